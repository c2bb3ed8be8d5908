"""Per-run state of a sweep, from the manifest, the scheduler and the run folders.

    unsubmitted  planned, no live submission (never submitted, or it never reached the scheduler)
    queued       waiting for a local core, or being submitted right now
    pending      in the scheduler's queue (incl. requeued)
    running      started
    completed    result.json written (the backend returned)
    failed       the run raised, or its job died outside Python (scancel, OOM, node failure, timeout)
    cancelled    stopped by `cancelctl cancel` or interrupted (Ctrl-C); resumable

A rerun submits unsubmitted and cancelled runs, `--retry-failed` also failed ones.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cancelctl.jobs import JOB_JSON, RESULT_JSON, process_alive, read_attempts, read_error
from cancelctl.launch import slurm
from cancelctl.launch.layout import SweepPaths
from cancelctl.manifest import ABANDONED, INTENT, SUBMIT_FAILED, SUBMITTED, Manifest, RunEntry, Submission

UNSUBMITTED, QUEUED, PENDING, RUNNING = "unsubmitted", "queued", "pending", "running"
COMPLETED, FAILED, CANCELLED = "completed", "failed", "cancelled"
ACTIVE = (QUEUED, PENDING, RUNNING)
TERMINAL = (COMPLETED, FAILED, CANCELLED)

# SLURM state words (sacct/squeue) by cancelctl state; anything else that ended is FAILED.
SLURM_PENDING = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED", "CONFIGURING",
                 "SPECIAL_EXIT", "RESV_DEL_HOLD", "STOPPED"}
SLURM_RUNNING = {"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"}
# Accounting writes lag sbatch by ~1 s; a job it does not show yet is pending for this long.
ACCOUNTING_GRACE_S = 120.0


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
    final: dict[str, float] = field(default_factory=dict)  # result.json metrics when completed

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["run_dir"] = str(self.run_dir) if self.run_dir else None
        data["log"] = str(self.log) if self.log else None
        return data


def sweep_states(paths: SweepPaths, manifest: Manifest, *, driver_alive: bool) -> list[RunState]:
    """States of every run in the manifest: one sacct call for all of the sweep's SLURM arrays."""
    latest = {run_id: manifest.latest_submission(run_id) for run_id in manifest.runs}
    arrays = {
        sub.job_id
        for pair in latest.values()
        if pair is not None
        for sub in [pair[0]]
        if sub.executor == "slurm" and sub.state == SUBMITTED and sub.job_id
    }
    tasks = slurm.task_states(sorted(arrays)) if arrays else {}
    now = time.time()
    return [
        run_state(paths, manifest, run_id, entry, latest[run_id], tasks, driver_alive, now)
        for run_id, entry in manifest.runs.items()
    ]


def run_state(
    paths: SweepPaths,
    manifest: Manifest,
    run_id: str,
    entry: RunEntry,
    latest: tuple[Submission, int] | None,
    tasks: dict[tuple[str, int], slurm.TaskState],
    driver_alive: bool,
    now: float,
) -> RunState:
    run_dir = paths.run_dir(run_id)
    state = RunState(run_id, entry.name, entry.arm, entry.seed, UNSUBMITTED, steps=entry.steps, run_dir=run_dir)
    state.attempts = sum(1 for a in read_attempts(run_dir) if a.get("event") == "start")
    result = _read_json(run_dir / RESULT_JSON)
    if result is not None:
        state.state, state.final = COMPLETED, dict(result.get("metrics") or {})
        if result.get("adopted_from"):  # run elsewhere, found FINISHED in the shared tracking store
            state.reason = f"adopted: FINISHED in {result['adopted_from']}"
    if latest is not None:
        sub, index = latest
        state.executor, state.job_id, state.log = sub.executor, sub.task_job_id(index), _log_path(paths, sub, index)
    if state.state == COMPLETED and not _requeued(latest, tasks):
        state.step = last_step(run_dir)
        return state
    state.state = UNSUBMITTED
    if entry.queued_at is not None:
        state.state, state.reason = (QUEUED, "waiting for a free core") if driver_alive else (UNSUBMITTED, "queued, but no launcher is running")
        return state
    if latest is None:
        return state
    sub, index = latest
    if sub.state == ABANDONED:
        state.reason = "its submission never reached the scheduler (launcher killed before sbatch)"
    elif sub.state == SUBMIT_FAILED:
        state.reason = f"submission failed: {sub.error}"
    elif sub.state == INTENT:
        state.state, state.reason = QUEUED, "being submitted"
    elif sub.executor == "slurm":
        _slurm_state(state, manifest, entry, sub, index, tasks, now)
    else:
        _process_state(state, manifest, entry, sub)
    if state.state != UNSUBMITTED or latest is not None:  # where it is, or where it stopped
        state.step = last_step(run_dir)
    return state


def _requeued(latest: tuple[Submission, int] | None, tasks: dict[tuple[str, int], slurm.TaskState]) -> bool:
    """A SLURM task that wrote result.json and was then requeued (`scontrol requeue`, preemption)
    runs again: until it ends, the scheduler's state is the truth, not the earlier result."""
    if latest is None or latest[0].executor != "slurm" or latest[0].state != SUBMITTED:
        return False
    task = tasks.get((latest[0].job_id, latest[1]))
    return task is not None and task.state in SLURM_PENDING | SLURM_RUNNING


def _cancelled_by_us(manifest: Manifest, entry: RunEntry, sub: Submission) -> bool:
    return entry.cancelled_at is not None and entry.cancelled_at >= sub.created_at


def _slurm_state(state: RunState, manifest: Manifest, entry: RunEntry, sub: Submission, index: int, tasks, now: float) -> None:
    task = tasks.get((sub.job_id, index))
    error = read_error(state.run_dir)
    if task is None:
        if error is not None:
            state.state, state.reason = FAILED, error[1]
        elif now - (sub.submitted_at or sub.created_at) < ACCOUNTING_GRACE_S:
            state.state, state.reason = PENDING, "submitted; not in accounting yet"
        else:
            state.state, state.reason = FAILED, f"job {state.job_id} is unknown to SLURM (sacct/squeue)"
        return
    word = task.state
    if word in SLURM_PENDING:
        state.state, state.reason = PENDING, task.detail or word.lower()
    elif word in SLURM_RUNNING:
        state.state = RUNNING
    elif word == "COMPLETED":
        state.state = COMPLETED  # the job wrapper exits non-zero whenever the run raised
    elif word == "CANCELLED" and _cancelled_by_us(manifest, entry, sub):
        state.state, state.reason = CANCELLED, "cancelled by cancelctl"
    else:  # FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, CANCELLED from outside ...
        outside = " (killed outside cancelctl)" if word == "CANCELLED" else ""
        detail = f"{task.detail or word}{outside}"
        state.state = FAILED
        state.reason = f"{detail}; {error[1]}" if error is not None else detail


def _process_state(state: RunState, manifest: Manifest, entry: RunEntry, sub: Submission) -> None:
    """Local (submitit controller process) and debug (the launcher itself) runs."""
    error = read_error(state.run_dir)  # written as the run ends: its process may still be exiting
    if error is None and process_running(state.run_dir, sub):
        state.state = RUNNING
        return
    started = any(a.get("event") == "start" and a.get("token") == sub.token for a in read_attempts(state.run_dir))
    if error is not None and error[0] == "INTERRUPTED":
        state.state, state.reason = CANCELLED, "interrupted" + (" by cancelctl" if _cancelled_by_us(manifest, entry, sub) else "")
    elif error is not None:
        state.state, state.reason = FAILED, error[1]
    elif not started:
        state.state, state.reason = UNSUBMITTED, "its process ended before the run started"
    else:
        state.state, state.reason = FAILED, f"process {sub.job_id} ended without a result (killed?); see {state.log}"


def process_running(run_dir: Path, sub: Submission) -> bool:
    """Is the process of a local/debug submission alive: its controller (or the launcher, for
    debug) or the run's own process (which outlives a controller killed with SIGKILL)?"""
    pid = int(sub.job_id) if sub.job_id and sub.job_id.isdigit() else None
    if process_alive(pid, sub.pid_start):
        return True
    job = _read_json(run_dir / JOB_JSON) or {}
    return job.get("token") == sub.token and process_alive(job.get("pid"), job.get("start"))


def _log_path(paths: SweepPaths, sub: Submission, index: int) -> Path | None:
    if sub.job_id is None:
        return None
    if sub.executor == "slurm":
        return paths.submitit_dir / f"{sub.job_id}_{index}_0_log.err"
    if sub.executor == "local":
        return paths.submitit_dir / "local" / f"{sub.job_id}_0_log.err"
    return None


def last_step(run_dir: Path) -> int | None:
    """The step of the last complete line of metrics.jsonl (reads only the file's tail)."""
    path = run_dir / "metrics.jsonl"
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - 8192))
            tail = handle.read()
    except OSError:
        return None
    for raw in reversed(tail.split(b"\n")):
        try:
            return int(json.loads(raw)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None

