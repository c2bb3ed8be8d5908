"""Leaving an allocation before its time limit, at a step boundary, from what the run measured.

The sbatch script's `--signal=USR2@<lead>` is fixed when the job is submitted, from an estimate
(`jobs.time_limit`). Once the run has timed its own steps and checkpoint writes (kept in the run
folder's `timing.json`, so a requeued attempt starts knowing them), the job also checks at each step
boundary whether its allocation's time left still holds one more step, a checkpoint and the requeue:
when it does not, it leaves as on USR2 (`preemption.at_step_boundary`: checkpoint, then submitit's
requeue). Where the estimate was too short the run still loses nothing.

The allocation's end: $SLURM_JOB_END_TIME where SLURM sets it, else `squeue -o %L` (time left) asked
once when the job starts. Outside a SLURM job there is none, and nothing here acts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from cancelctl.fileio import atomic_write_json
from cancelctl.jobs.time_limit import LEAD_MARGIN

log = logging.getLogger("cancelctl.jobs")

TIMING_JSON = "timing.json"
EXIT_S = 10.0  # flushing the tracking store, submitit's requeue call, the process's exit
KEEP = 20  # the longest of the last KEEP steps (and checkpoints) is what the next one may take
SQUEUE_TIMEOUT_S = 10


@dataclass
class Timing:
    """The run's measured step and checkpoint-write seconds (the most recent KEEP of each)."""

    steps: list[float] = field(default_factory=list)
    checkpoints: list[float] = field(default_factory=list)

    @property
    def step_s(self) -> float | None:
        return max(self.steps) if self.steps else None

    @property
    def checkpoint_s(self) -> float | None:
        return max(self.checkpoints) if self.checkpoints else None

    @classmethod
    def read(cls, run_dir: Path) -> Timing:
        try:
            data = json.loads((Path(run_dir) / TIMING_JSON).read_text(encoding="utf-8"))
            return cls([float(s) for s in data["steps"]][-KEEP:], [float(s) for s in data["checkpoints"]][-KEEP:])
        except (OSError, ValueError, KeyError, TypeError):
            return cls()  # none yet, or unreadable: measured again

    def write(self, run_dir: Path) -> None:
        data = {"steps": [round(s, 3) for s in self.steps], "checkpoints": [round(s, 3) for s in self.checkpoints],
                "step_s": self.step_s, "checkpoint_s": self.checkpoint_s}
        with contextlib.suppress(OSError):  # advisory: a full disk fails the checkpoint itself, not this
            atomic_write_json(Path(run_dir) / TIMING_JSON, data)


class AllocationDeadline:
    """This allocation's end and the run's timing: whether the next step still fits."""

    def __init__(self, run_dir: Path, end: float, timing: Timing | None = None, clock=time.time) -> None:
        self.run_dir, self.end, self.clock = Path(run_dir), end, clock
        self.timing = timing if timing is not None else Timing.read(run_dir)

    def step_took(self, seconds: float) -> None:
        self.timing.steps = [*self.timing.steps, seconds][-KEEP:]

    def checkpoint_took(self, seconds: float) -> None:
        self.timing.checkpoints = [*self.timing.checkpoints, seconds][-KEEP:]
        self.timing.write(self.run_dir)  # with the checkpoint: what a requeued attempt resumes knowing

    def needed_s(self) -> float | None:
        """What the rest of this allocation must hold to take one more step and leave cleanly; None
        until a step and a checkpoint were measured (the signal's estimated lead covers until then)."""
        step, checkpoint = self.timing.step_s, self.timing.checkpoint_s
        if step is None or checkpoint is None:
            return None
        return LEAD_MARGIN * (step + checkpoint) + EXIT_S  # the margin the signal's planned lead has

    def left_s(self) -> float:
        return self.end - self.clock()

    def must_leave(self) -> bool:
        needed = self.needed_s()
        if needed is None or self.left_s() >= needed:
            return False
        log.warning("%.0f s left in this allocation, less than one more step, a checkpoint and the requeue "
                    "(%.0f s measured x %.1f + %.0f s): checkpointing and requeuing now", self.left_s(),
                    (needed - EXIT_S) / LEAD_MARGIN, LEAD_MARGIN, EXIT_S)
        return True


def allocation_end(environ=os.environ, clock=time.time) -> float | None:
    """When this SLURM job's allocation ends (epoch seconds), None outside a job or unknown."""
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    if environ.get("SLURM_JOB_END_TIME", "").isdigit():
        return float(environ["SLURM_JOB_END_TIME"])
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%L"], capture_output=True, text=True,
                             timeout=SQUEUE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None  # USR2 still comes, at the estimated lead
    left = parse_time_left(out.stdout.strip()) if out.returncode == 0 else None
    return None if left is None else clock() + left


_TIME_LEFT = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$")


def parse_time_left(text: str) -> float | None:
    """squeue's %L ("45", "1:05", "2:03:04", "1-02:03:04") in seconds; None for UNLIMITED, NOT_SET, ..."""
    if text.isdigit():
        return float(text)
    match = _TIME_LEFT.match(text)
    if not match:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def for_this_job(run_dir: Path) -> AllocationDeadline | None:
    """The deadline of the SLURM allocation this process runs in, None outside one."""
    end = allocation_end()
    return AllocationDeadline(run_dir, end) if end is not None else None
