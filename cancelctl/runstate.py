"""The state of one run of a sweep, as `status` shows it; below launch and the executors.

    unsubmitted  planned, no live submission (never submitted, or it never reached the scheduler)
    queued       waiting for a local core, or being submitted right now
    pending      in the scheduler's queue (incl. requeued)
    running      started
    completed    result.json written (the backend returned)
    stopped      result.json and stopped.json: a `stop` rule of the spec's monitor ended the run
                 at a step boundary, its checkpoint kept; reason "<rule> at step N"
    failed       the run raised, or its job died outside Python (scancel, OOM, node failure, timeout)
    cancelled    stopped by `cancelctl cancel` or interrupted (Ctrl-C); resumable

A rerun submits unsubmitted and cancelled runs, `--retry-failed` also failed ones, `--retry-stopped`
stopped ones (they resume from their checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

UNSUBMITTED, QUEUED, PENDING, RUNNING = "unsubmitted", "queued", "pending", "running"
COMPLETED, FAILED, CANCELLED, STOPPED = "completed", "failed", "cancelled", "stopped"
ACTIVE = (QUEUED, PENDING, RUNNING)
TERMINAL = (COMPLETED, FAILED, CANCELLED, STOPPED)
STATES = (UNSUBMITTED, QUEUED, PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, STOPPED)


@dataclass
class RunState:
    run_id: str
    name: str
    arm: str
    seed: int
    state: str
    executor: str | None = None
    job_id: str | None = None  # '812_3' (SLURM array task), a pid (local), None if never submitted
    reason: str = ""  # why it failed / is pending, in one line
    step: int | None = None  # last step in metrics.jsonl: where a run is, or where it ended
    steps: int | None = None  # planned steps
    attempts: int = 0  # job starts so far (requeues and retries included)
    run_dir: Path | None = None
    log: Path | None = None  # the scheduler's stderr log of the latest job
    final: dict[str, float] = field(default_factory=dict)  # result.json metrics when completed or stopped
    stale: bool = False  # a run of an earlier version of the sweep file: not planned by its last launch
    # the scheduler ended it on a cancel request, cancelctl's or anyone's (scancel): its MLflow run
    # is KILLED, as when the run closes itself on the SIGTERM, whichever of the two gets there
    cancel_requested: bool = False
    hardware: dict[str, str] = field(default_factory=dict)  # what its latest attempt ran on (job.json)
    stalls: int = 0  # attempts the stall watchdog ended (attempts.jsonl); the reason names the latest

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["run_dir"] = str(self.run_dir) if self.run_dir else None
        data["log"] = str(self.log) if self.log else None
        return data


class SweepStates(list):
    """The RunStates of a sweep, and `unreachable`: the line saying a scheduler did not answer (its
    runs then show the last state it gave), or None. Verbs print it once; those that must decide
    on a state (`--retry-failed`, `cancel`) refuse while it is set."""

    unreachable: str | None = None


def state_counts(states) -> str:
    """"3 completed, 1 failed": the runs counted by state, as `status`, `sweep` and `list` print them."""
    counts: dict[str, int] = {}
    for s in states:
        counts[s.state] = counts.get(s.state, 0) + 1
    return ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items()))
