"""`launch_sweep`: plan against the manifest and the executor, create MLflow runs, submit.

Order of a launch, under the sweep's submit lock from 1.'s scheduler check on (one launcher at a time):
 0. announce it (`cancelctl.launch.starting`): a `cancel` from then on stops it, even before its
    manifest exists — it submits none of its runs;
 1. planning's preflight (`cancelctl.launch.preflight`): runs a backend cannot run yet are refused; the
    executor checks its per-run settings (SLURM: submitit's names, then `sbatch --test-only` once
    per resource shape): a bad setting stops the launch before anything is submitted;
 2. add new runs to the manifest and resolve intents a killed launcher left (`reconcile`);
 3. classify each run by its state: completed and active runs are skipped, failed runs only go
    again with `retry_failed`, runs already FINISHED in their tracking store are adopted, the rest
    (never submitted, cancelled, interrupted) are submitted;
 4. write every run's run.json and create its MLflow run (status SCHEDULED);
 5. unless a `cancel` came since 0. (the runs are then recorded cancelled), hand the runs to the
    executor (`Executor.submit`; SLURM: arrays, local/debug: the driver's queue), then, with the
    lock released, let it start them (`Executor.start`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cancelctl.errors import SpecError
from cancelctl.executors import DEFAULT_EXECUTOR, get_executor
from cancelctl.errors import SchedulerError
from cancelctl.executors.base import ArrayPlan, Executor
from cancelctl.executors.driver import driver_alive
from cancelctl.jobs.outcome import archive_error, archive_stop
from cancelctl.launch.control import mark_not_started, reconcile, stop_runs, sweep_status, wait_for_sweep
from cancelctl.launch.interrupt import raise_if_interrupted, signals_recorded
from cancelctl.launch import unstarted
from cancelctl.launch.preflight import (
    finished_in_tracking_store,
    refuse_tracking_credentials,
    refuse_unlaunchable,
    unusable_tracking_stores,
)
from cancelctl.launch.prepare import prepare_run, write_adopted_result
from cancelctl.launch.starting import cancel_requested_at, hold_at, launching
from cancelctl.launch.states import sweep_states
from cancelctl.manifest import Manifest, RunEntry, file_lock
from cancelctl.runstate import (
    ACTIVE,
    CANCELLED,
    COMPLETED,
    FAILED,
    STOPPED,
    UNSUBMITTED,
    RunState,
)
from cancelctl.spec.expand import Sweep
from cancelctl.spec.run import RunSpec, planned_steps
from cancelctl.workdir import SweepPaths, sweep_paths

log = logging.getLogger("cancelctl.launch")

SUBMIT_LOCK_TIMEOUT_S = 120.0

Progress = Callable[[list[RunState]], None]


@dataclass
class LaunchResult:
    sweep: str
    executor: str
    workdir: Path
    dry_run: bool = False
    submitted: list[str] = field(default_factory=list)  # run ids submitted now (dry run: would be)
    skipped_finished: list[str] = field(default_factory=list)
    skipped_running: list[str] = field(default_factory=list)  # queued, pending or running already
    skipped_failed: list[str] = field(default_factory=list)  # failed before; retry_failed resubmits
    skipped_stopped: list[str] = field(default_factory=list)  # stopped by a monitor rule; retry_stopped resubmits
    failed: list[str] = field(default_factory=list)  # refused by the scheduler now, or ended failed (wait)
    cancelled: list[str] = field(default_factory=list)  # stopped by `cancelctl cancel` while this launch ran
    job_ids: list[str] = field(default_factory=list)  # SLURM array ids / local pids created now
    arrays: list[ArrayPlan] = field(default_factory=list)
    states: list[RunState] = field(default_factory=list)  # after submission, or final when waited
    errors: dict[str, str] = field(default_factory=dict)  # run id -> why it failed
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.cancelled

    @property
    def exit_code(self) -> int:
        """`sweep`'s exit status: 1 when a run failed, 3 when runs were cancelled (none failed), else 0."""
        return 1 if self.failed else 3 if self.cancelled else 0


def launch_sweep(
    sweep: Sweep,
    *,
    workdir: Path,
    executor: str | None = None,
    dry_run: bool = False,
    retry_failed: bool = False,
    wait: bool | None = None,
    progress: Progress | None = None,
    retry_stopped: bool = False,
) -> LaunchResult:
    """Submit what of `sweep` is not finished or running. `executor` overrides the specs' (a name
    in `cancelctl.executors`); `wait` defaults to the executor's (yes for local/debug, no for slurm).
    A run a monitor rule stopped is resubmitted (resuming from its checkpoint) only with
    `retry_stopped`. Raises SpecError (bad input, nothing submitted) and SchedulerError (scheduler unusable)."""
    options = dict(workdir=workdir, executor=executor, dry_run=dry_run, retry_failed=retry_failed, wait=wait,
                   progress=progress, retry_stopped=retry_stopped)
    if dry_run:  # writes nothing, announces nothing
        return _launch_sweep(sweep, started_at=time.time(), **options)
    # `cancel` knows the sweep from here on, before its manifest exists; a cancel since the announcement
    # (the caller's, when it made one first: the CLI's, before the sweep file is validated) stops it
    with launching(sweep_paths(workdir, sweep.name)) as started_at:
        return _launch_sweep(sweep, started_at=started_at, **options)


def _launch_sweep(sweep: Sweep, *, workdir: Path, executor: str | None, dry_run: bool, retry_failed: bool,
                  wait: bool | None, progress: Progress | None, retry_stopped: bool, started_at: float) -> LaunchResult:
    workdir = Path(workdir).resolve()
    paths = sweep_paths(workdir, sweep.name)
    kind = executor_of(sweep, executor)
    runner = get_executor(kind)
    wait = runner.waits_by_default if wait is None else wait
    result = LaunchResult(sweep=sweep.name, executor=kind, workdir=workdir, dry_run=dry_run)
    if not dry_run:
        hold_at("planning")  # (tests: a signal or a cancel while it plans)
    refuse_unlaunchable(sweep)
    refuse_tracking_credentials(sweep.runs, workdir, ask_stores=not dry_run)
    plan = runner.plan(sweep.runs, workdir)
    if dry_run:
        return _dry_run(paths, sweep, runner, plan, retry_failed, result, retry_stopped)
    runner.check_available()
    launched: list[str] = []  # the runs this launch queued or submitted: an interrupt stops them
    try:
        with unstarted.reserve(paths):  # space to record why its queued runs did not start, on a full disk
            return _launch(paths, sweep, runner, plan, kind, started_at, retry_failed, retry_stopped, wait, progress,
                           result, launched)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM / SIGHUP turned into one (cancelctl.launch.interrupt)
        with signals_recorded():  # a second signal must not cut the stop short
            if runner.stops_with_launcher and launched:  # the runs it drives end with it, `cancelled`
                stop_runs(paths, launched)
            mark_not_started(paths, [run.run_id for run in sweep.runs])  # none left 'unsubmitted', no reason
        raise
    except Exception as exc:  # the launcher itself failed (a full disk under the manifest): the runs it
        if runner.stops_with_launcher and launched:  # queued and never started say why, not "queued"
            unstarted.record_unstarted(paths, kind, launched, exc)
        raise


def _launch(paths: SweepPaths, sweep: Sweep, runner: Executor, plan, kind: str, started_at: float, retry_failed: bool,
            retry_stopped: bool, wait: bool, progress: Progress | None, result: LaunchResult,
            launched: list[str]) -> LaunchResult:
    workdir = paths.workdir
    paths.sweep_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(paths.submit_lock, SUBMIT_LOCK_TIMEOUT_S, what=f"sweep {sweep.name} submission") as lock_fd:
        runner.test_submission(paths, plan)
        result.warnings.extend(_register(paths, sweep, kind))
        hold_at("registered")  # (tests: a signal just after the manifest appears)
        reconcile(paths)
        manifest = paths.store.load()
        every = sweep_states(paths, manifest, driver_alive=driver_alive(manifest))
        if every.unreachable:
            if retry_failed:  # a run SLURM has not said ended is never submitted twice
                raise SchedulerError(f"{every.unreachable}; --retry-failed resubmits nothing until SLURM answers "
                                     f"(a run it has not reported ended may still be running)")
            result.warnings.append(every.unreachable)
        states = {s.run_id: s for s in every}
        to_submit = _classify(sweep.runs, states, retry_failed, result, retry_stopped)
        stores_down = _stores_down(sweep, paths, result)
        to_submit = _adopt_finished_in_store(paths, to_submit, states, result, stores_down)
        for run in sweep.runs:  # one MLflow run per RunSpec, created when planned
            prepare_run(paths, run, result.warnings, stores_down)
        to_submit = _drop_cancelled(paths, to_submit, started_at, result)  # last look before submitting
        for run in to_submit:
            archive_error(paths.run_dir(run.run_id, run.name))
            archive_stop(paths.run_dir(run.run_id, run.name))  # a stopped run resubmitted is no longer stopped
        launched.extend(run.run_id for run in to_submit)
        raise_if_interrupted()
        done = runner.submit(paths, to_submit, plan, lock_fd)
        result.submitted.extend(done.submitted)
        result.job_ids.extend(done.job_ids)
        result.arrays.extend(done.arrays)
        result.failed.extend(done.errors)
        result.errors.update(done.errors)
        for why in dict.fromkeys(done.unconfirmed.values()):
            runs = sum(1 for w in done.unconfirmed.values() if w == why)
            result.warnings.append(f"{runs} run(s) pending, not failed: sbatch's answer was lost ({why}); the job may be "
                                   f"queued: `cancelctl status` looks it up by name, and no sweep resubmits them "
                                   f"until SLURM says it was not")

    runner.start(paths, to_submit, wait=wait, tick=_progress_tick(paths, progress), job_ids=result.job_ids)
    if wait:
        result.states = wait_for_sweep(workdir, sweep.name, progress=progress, poll_s=runner.poll_s)
        for state in result.states:
            if state.state == FAILED and state.run_id not in result.failed:
                result.failed.append(state.run_id)
                result.errors[state.run_id] = state.reason
    else:
        result.states = sweep_status(workdir, sweep.name)
    note_cancelled(result, {run.run_id for run in to_submit})
    return result


def note_cancelled(result: LaunchResult, launched: set[str]) -> None:
    """Runs of this launch that ended cancelled (a `cancel` while it started or ran them) go into
    `result.cancelled`: the launch did not do what it was asked (`exit_code` 3)."""
    for state in result.states:
        if state.state == CANCELLED and state.run_id in launched and state.run_id not in result.cancelled:
            result.cancelled.append(state.run_id)


def _progress_tick(paths: SweepPaths, progress: Progress | None):
    """The executor's driver reports each step: a signal whose exception was lost ends the launch
    here (`raise_if_interrupted`), and the progress bar gets the sweep's states."""

    def tick(alive: bool) -> None:
        raise_if_interrupted()
        if progress is not None:
            progress([s for s in sweep_states(paths, paths.store.load(), driver_alive=alive) if not s.stale])

    return tick


# ---------------------------------------------------------------------------------- planning


def executor_of(sweep: Sweep, override: str | None) -> str:
    """The executor of a launch: `override`, else the one every run's spec names."""
    if override is not None:
        get_executor(override)  # SpecError naming the known ones
        return override
    kinds = sorted({run.spec.executor for run in sweep.runs})
    if len(kinds) > 1:
        raise SpecError(
            f"runs of sweep {sweep.name} name several executors ({', '.join(kinds)}); set one in base or pass --executor",
            title="invalid experiment spec",
        )
    return kinds[0] if kinds else DEFAULT_EXECUTOR


def _register(paths: SweepPaths, sweep: Sweep, kind: str) -> list[str]:
    """Record the sweep file's runs; returns a warning when runs of an earlier version are no longer planned."""
    with paths.store.update(create=Manifest(sweep=sweep.name, executor=kind)) as manifest:
        manifest.file, manifest.executor, manifest.launched_at = str(Path(sweep.file).resolve()), kind, time.time()
        manifest.baseline = sweep.spec.baseline
        planned = [run.run_id for run in sweep.runs]
        newly_stale = [e.name for run_id, e in manifest.runs.items() if run_id not in planned and manifest.is_current(run_id)]
        manifest.planned = planned
        for run in sweep.runs:
            entry = manifest.runs.get(run.run_id)
            if entry is None:
                manifest.runs[run.run_id] = RunEntry(run.name, run.arm, run.seed, run.group, steps=planned_steps(run.spec))
            else:
                entry.name, entry.arm, entry.group, entry.steps = run.name, run.arm, run.group, planned_steps(run.spec)
    if not newly_stale:
        return []
    listed = ", ".join(sorted(newly_stale)[:6]) + (", ..." if len(newly_stale) > 6 else "")
    return [(f"the sweep file changed: {len(newly_stale)} run(s) of its earlier version are no longer planned "
             f"({listed}); they are kept as stale (not submitted, not counted by status, left out of the report)")]


def _stores_down(sweep: Sweep, paths: SweepPaths, result: LaunchResult) -> dict[str, str]:
    """The sweep's tracking stores that cannot be used now, each with why, said once on the screen
    at once (the runs go on: their points stay in metrics.jsonl until `cancelctl sync`)."""
    down = unusable_tracking_stores(sweep.runs, paths.workdir)
    for uri, problem in down.items():
        result.warnings.append(
            f"tracking store {uri} unusable: {problem}; the runs go on with every point in their metrics.jsonl, "
            "`cancelctl sync` uploads them once the store works"
        )
        log.warning(result.warnings[-1])
    return down


def _adopt_finished_in_store(
    paths: SweepPaths, runs: list[RunSpec], states: dict[str, RunState], result: LaunchResult,
    stores_down: dict[str, str],
) -> list[RunSpec]:
    """Runs never submitted from this work dir that their MLflow store already holds FINISHED are
    adopted, not run again: their result.json is written from the store's final metrics. Returns
    the runs still to submit."""
    fresh = [run for run in runs if states[run.run_id].state == UNSUBMITTED and not states[run.run_id].attempts]
    found, warnings = finished_in_tracking_store(fresh, paths.workdir, skip=stores_down)
    result.warnings.extend(warnings)
    names = {run.run_id: run.name for run in fresh}
    for run_id, (mlflow_run, uri) in found.items():
        write_adopted_result(paths.run_dir(run_id, names[run_id]), mlflow_run, uri)
    if found:
        result.skipped_finished.extend(sorted(found))
        result.warnings.append(
            f"{len(found)} run(s) already FINISHED in their MLflow store (same run ids) were adopted, not rerun"
        )
    return [run for run in runs if run.run_id not in found]


def _drop_cancelled(
    paths: SweepPaths, runs: list[RunSpec], started_at: float, result: LaunchResult
) -> list[RunSpec]:
    """A `cancel` since this launch was announced — while it planned, before its manifest existed,
    or while it held the submit lock (`cancelctl.launch.starting`) — found nothing submitted to stop:
    the runs it would now submit are recorded cancelled instead, and the sweep cancelled."""
    cancelled_at = cancel_requested_at(paths, paths.store.load())
    if cancelled_at is None or cancelled_at < started_at or not runs:
        return runs
    with paths.store.update() as manifest:
        manifest.cancelled_at = max(manifest.cancelled_at or cancelled_at, cancelled_at)
        for run in runs:
            manifest.runs[run.run_id].queued_at = None
            manifest.runs[run.run_id].cancelled_at = manifest.cancelled_at
    result.cancelled.extend(run.run_id for run in runs)
    result.warnings.append(f"sweep {result.sweep} was cancelled while it started: {len(runs)} run(s) not submitted")
    return []


def _classify(runs: list[RunSpec], states: dict[str, RunState], retry_failed: bool, result: LaunchResult,
              retry_stopped: bool = False) -> list[RunSpec]:
    to_submit = []
    for run in runs:
        state = states[run.run_id].state
        if state == COMPLETED:
            result.skipped_finished.append(run.run_id)
        elif state == STOPPED and not retry_stopped:  # a rule judged it collapsed: rerun only when asked
            result.skipped_stopped.append(run.run_id)
        elif state in ACTIVE:
            result.skipped_running.append(run.run_id)
        elif state == FAILED and not retry_failed:
            result.skipped_failed.append(run.run_id)
        else:  # unsubmitted, cancelled/interrupted, failed with retry_failed, stopped with retry_stopped
            to_submit.append(run)
    return to_submit


def _dry_run(paths: SweepPaths, sweep: Sweep, runner: Executor, plan, retry_failed: bool, result: LaunchResult,
             retry_stopped: bool = False) -> LaunchResult:
    """What a launch would submit; writes nothing, submits nothing, asks the scheduler only for states."""
    states: dict[str, RunState] = {}
    manifest = paths.store.peek()  # as a launch would see it, a lost manifest rebuilt from the run folders
    if manifest is not None:
        every = sweep_states(paths, manifest, driver_alive=driver_alive(manifest))
        if every.unreachable:  # the states it decides on are the last SLURM gave: said, as every verb does
            result.warnings.append(every.unreachable)
        states = {s.run_id: s for s in every}
    for run in sweep.runs:
        states.setdefault(run.run_id, RunState(run.run_id, run.name, run.arm, run.seed, UNSUBMITTED, steps=planned_steps(run.spec)))
    to_submit = _classify(sweep.runs, states, retry_failed, result, retry_stopped)
    result.submitted = [run.run_id for run in to_submit]
    result.states = [states[run.run_id] for run in sweep.runs]
    result.arrays = runner.dry_run(paths, to_submit, plan)
    return result


__all__ = ["ArrayPlan", "LaunchResult", "executor_of", "launch_sweep"]
