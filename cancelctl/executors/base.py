"""The protocol every executor implements (as submitit's `core.core.Executor`: one subclass per
scheduler, chosen by name in `cancelctl.executors.registry`).

The launcher, `status` and `cancel` talk to a scheduler only through these methods, in this order:

    check_available()                       launch: can this machine use the scheduler at all
    plan(runs, workdir) -> PlanT            launch and dry run: per-run settings, checked before any I/O
    test_submission(paths, plan)            launch, under the submit lock: the scheduler's own dry check
    dry_run(paths, runs, plan)              what would be submitted (ArrayPlans for batch schedulers)
    submit(paths, runs, plan, lock_fd)      launch, under the submit lock: hand runs over (or queue them)
    start(paths, runs, wait, tick)          launch, after the lock: drive queued runs (in-process drivers)
    reconcile(paths, intents, wait)         resolve intents a killed launcher left
    task_states(paths, submissions, freshness) -> TasksT  status: ONE scheduler query for the whole sweep,
                                            shared by every verb of the work dir while fresh enough
    unreachable(tasks) -> note | None       status: the scheduler did not answer (states are the last known)
    handle(paths, sub, index, tasks, run_dir) -> JobHandle   status, logs: one run's job, bound to `tasks`:
                                            its job id, state, log path, requeued and run state (`handle`)
    cancel(paths, active, signalled)        cancel: stop these runs; returns the job ids it stopped

An executor is typed by what its plan and its scheduler's answer are (`Executor[PlanT, TasksT]`, as
submitit's executors are by their job type): SLURM plans a `JobShape` per run and answers with
`TaskStates`; a driven executor (local, debug) plans nothing (`None`) and asks no scheduler
(`NoTasks`). What the scheduler says of one run is read through its `JobHandle[TasksT]` (the
executor's `job_class`, as submitit's `Executor.job_class`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from cancelctl.executors.handle import JobHandle, TasksT
from cancelctl.manifest import Submission
from cancelctl.runstate import RunState
from cancelctl.workdir import SweepPaths

if TYPE_CHECKING:
    from cancelctl.spec.run import RunSpec

# Called by a driver after each step with whether it still drives: the launcher turns it into the
# progress bar's states (executors never compute sweep states themselves).
Tick = Callable[[bool], None]

PlanT = TypeVar("PlanT")  # what `plan` checked per run and `submit` is handed (SLURM: run id -> JobShape)
NoTasks = dict[str, object]  # the answer of an executor that asks no scheduler: always empty


@dataclass(frozen=True)
class Freshness:
    """How old an answer of the scheduler a verb may use: `max_age_s` 0 asks now (a verb that decides:
    `sweep`, `cancel`); `wait` False never waits on the scheduler (a watcher: the last known states
    at once, a stale view refreshed in the background)."""

    max_age_s: float = 0.0
    wait: bool = True


DECIDE = Freshness()
SHOW = Freshness(max_age_s=30.0)  # status, list, logs: what another verb asked within 30 s is shared
WATCH = Freshness(max_age_s=30.0, wait=False)  # watch, sweep --wait: SLURM asked at most every 30 s

@dataclass
class ArrayPlan:
    """One batch submission: the runs of its tasks in index order and the script."""

    run_ids: list[str]
    script: str
    token: str
    job_id: str | None = None


@dataclass
class Submitted:
    """What one `submit` call did."""

    submitted: list[str] = field(default_factory=list)  # run ids handed over (or queued)
    errors: dict[str, str] = field(default_factory=dict)  # run id -> why the scheduler refused it
    # run id -> why the scheduler's answer was lost: maybe queued, looked up by name before a rerun
    unconfirmed: dict[str, str] = field(default_factory=dict)
    job_ids: list[str] = field(default_factory=list)
    arrays: list[ArrayPlan] = field(default_factory=list)


class Executor(ABC, Generic[PlanT, TasksT]):
    """One scheduler. Stateless: the sweep's state is in the manifest and the run folders."""

    name: ClassVar[str]
    waits_by_default: ClassVar[bool] = True  # `sweep` follows the runs unless --no-wait
    poll_s: ClassVar[float] = 1.0  # how often a waiting launcher asks for states
    reconcile_on_status: ClassVar[bool] = False  # `status` resolves this executor's intents (when no launcher is busy)
    stops_with_launcher: ClassVar[bool] = False  # an interrupted launch stops the runs it queued or started
    has_time_limit: ClassVar[bool] = False  # a job's `cluster.time_min` ends its allocation (the lead, validate's warning)
    job_class: ClassVar[type[JobHandle[Any]]]  # what `handle` hands out: reads this executor's `TasksT`

    # -- launch --------------------------------------------------------------------------------

    def check_available(self) -> None:
        """Raise SchedulerError when this machine cannot use the scheduler."""

    @abstractmethod
    def plan(self, runs: Sequence[RunSpec], workdir: Path) -> PlanT:
        """Per-run scheduler settings, checked (SpecError) before anything is written."""

    def test_submission(self, paths: SweepPaths, plan: PlanT) -> None:
        """Ask the scheduler whether it would accept the plan (SpecError if not); nothing queued."""

    def dry_run(self, paths: SweepPaths, runs: Sequence[RunSpec], plan: PlanT) -> list[ArrayPlan]:
        return []

    def render_job(self, run: RunSpec, workdir: Path, workload: Callable[[Path], list[str]]) -> str | None:
        """What the scheduler would be given for `run` and what its job runs (`cancelctl render`);
        None where there is nothing beyond the backend's own command. `workload(run_dir)`: the
        backend's command lines for the run (the caller resolves the backend)."""
        return None

    @abstractmethod
    def submit(self, paths: SweepPaths, runs: Sequence[RunSpec], plan: PlanT, lock_fd: int) -> Submitted:
        """Hand `runs` to the scheduler, recording intent then job id in the manifest."""

    def start(self, paths: SweepPaths, runs: Sequence[RunSpec], *, wait: bool, tick: Tick | None,
              job_ids: list[str]) -> None:
        """After the submit lock is released: start whatever must run the submitted runs."""

    def reconcile(self, paths: SweepPaths, intents: Sequence[Submission], *, wait: bool) -> None:
        """Resolve this executor's intents (submissions recorded before the scheduler call)."""

    # -- status --------------------------------------------------------------------------------

    @abstractmethod
    def task_states(self, paths: SweepPaths, submissions: Sequence[Submission],
                    freshness: Freshness = DECIDE) -> TasksT:
        """The scheduler's view of these submitted submissions (one query; none asked when there are
        none, nor while a view `freshness` allows is at hand), as its job handles read it. Where the
        scheduler does not answer, the last answer it gave stands (never "unknown")."""

    def unreachable(self, tasks: TasksT) -> str | None:
        """One line naming what did not answer and since when, when `tasks` are not a fresh answer."""
        return None

    def handle(self, paths: SweepPaths, sub: Submission, index: int, tasks: TasksT, run_dir: Path) -> JobHandle[TasksT]:
        """Run `index` of `sub` (its folder `run_dir`) as `tasks`, this executor's answer, show it."""
        return self.job_class(paths, sub, index, tasks, run_dir)

    # -- cancel --------------------------------------------------------------------------------

    @abstractmethod
    def cancel(self, paths: SweepPaths, active: Sequence[RunState], signalled: dict[str, float]) -> list[str]:
        """Stop these active runs (called every poll until none is active); `signalled` maps job
        ids already signalled to when. Returns the job ids stopped for the first time."""

    def wait_stopped(self, job_ids: Sequence[str], deadline: float) -> None:
        """Return once the scheduler holds nothing of these jobs (TimeoutError at `deadline`)."""

