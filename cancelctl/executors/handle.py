"""One run's job as its executor sees it (as submitit's `core.core.Job`): what `status`, `watch`,
`logs` and `cancel` ask of a run's latest submission, bound to the executor's answer for the sweep.

An executor hands one out per run through `Executor.handle(paths, sub, index, tasks, run_dir)`
(its `job_class`, as submitit's `Executor.job_class`); `sub` and `index` say which task of which
submission the run is, `tasks` is the executor's typed view of the scheduler (`TasksT`: SLURM's
`TaskStates`, a driven executor's `NoTasks`) from ONE `task_states` query shared by every run.

    job_id                  the scheduler's id of this task ('812_3' for SLURM array task 3)
    state                   the scheduler's word for it now (None: the scheduler holds none)
    log_path                the job's stderr log (None: the executor keeps none)
    answered                the scheduler answered for it in `tasks` (not a state remembered)
    requeued()              it wrote its result but is queued or running again
    classify(state, entry, now) -> RunState   a submitted run's state word and reason
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from cancelctl.manifest import RunEntry, Submission
from cancelctl.runstate import RunState
from cancelctl.workdir import SweepPaths

TasksT = TypeVar("TasksT")  # the scheduler's answer `task_states` gives and a handle reads (SLURM: TaskStates)


@dataclass(frozen=True, eq=False)
class JobHandle(ABC, Generic[TasksT]):
    """Run `index` of submission `sub`, whose folder is `run_dir`, as `tasks` show it. Holds no
    state of its own: built afresh for every look, from the manifest and one scheduler answer."""

    paths: SweepPaths
    sub: Submission
    index: int
    tasks: TasksT
    run_dir: Path

    @property
    def run_id(self) -> str:
        return self.sub.run_ids[self.index]

    @property
    def job_id(self) -> str | None:
        """The scheduler's id of this task (a driven executor's: its controller's pid)."""
        return self.sub.job_id

    @property
    def state(self) -> str | None:
        """The scheduler's own word for this task in `tasks` (PENDING, RUNNING, FAILED ...); None
        where it holds none (not known to it, or ended without a word the scheduler keeps)."""
        return None

    @property
    def log_path(self) -> Path | None:
        """The job's stderr log, its stdout beside it with the suffix `.out`."""
        return None

    @property
    def answered(self) -> bool:
        """The scheduler answered for this submission in `tasks` (not a state remembered from before)."""
        return True

    def requeued(self) -> bool:
        """A run that wrote its result but is queued or running again (requeue, preemption)."""
        return False

    @abstractmethod
    def classify(self, state: RunState, entry: RunEntry, now: float) -> RunState:
        """The state of a run whose latest submission reached the scheduler: `state` (what the run
        folder says) with its state word and reason — and, where the scheduler ended it on a cancel
        request, `cancel_requested` — as `tasks` and the run folder decide; `state` is not changed."""

    def cancelled_by_us(self, entry: RunEntry) -> bool:
        """`cancel` marked the run after this submission was made: the job's end was asked for."""
        return entry.cancelled_at is not None and entry.cancelled_at >= self.sub.created_at
