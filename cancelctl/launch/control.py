"""Following a launched sweep: status, wait, cancel, and resolving a killed launcher's intents."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from cancelctl.executors import get_executor
from cancelctl.errors import SchedulerError
from cancelctl.executors.base import DECIDE, SHOW, Freshness
from cancelctl.executors.driver import driver_alive
from cancelctl.fileio import file_lock, file_lock_if_free, read_json
from cancelctl.manifest import ManifestBusy
from cancelctl.runstate import CANCELLED, COMPLETED, STOPPED, TERMINAL, UNSUBMITTED, RunState, SweepStates
from cancelctl.launch.starting import launch_in_progress, request_cancel
from cancelctl.launch.states import sweep_states
from cancelctl.workdir import RunFolder, SweepPaths, existing_sweep, sweep_paths

log = logging.getLogger("cancelctl.launch")

CANCEL_TIMEOUT_S = 60.0

Progress = Callable[[list[RunState]], None]


def reconcile(paths: SweepPaths, *, wait_local: bool = True) -> None:
    """Resolve submissions recorded as intent by a launcher that died before recording the job id:
    each executor resolves its own (SLURM by job name, local by the run's job.json)."""
    by_executor: dict[str, list] = {}
    for sub in paths.store.load().intents():
        by_executor.setdefault(sub.executor, []).append(sub)
    for name, intents in by_executor.items():
        get_executor(name).reconcile(paths, intents, wait=wait_local)


def sweep_status(workdir: Path, sweep: str | None = None, *, include_stale: bool = False,
                 freshness: Freshness = DECIDE) -> list[RunState]:
    """Per-run state (latest sweep when `sweep` is None) of the runs its sweep file planned at the
    last launch; `include_stale` adds runs of earlier versions (`RunState.stale`). SLURM: one sacct
    call for the whole sweep; local: the manifest, process liveness and the run folders' files."""
    paths = existing_sweep(workdir, sweep)
    manifest = paths.store.load()
    if any(get_executor(s.executor).reconcile_on_status for s in manifest.intents()):
        _reconcile_if_idle(paths)
        manifest = paths.store.load()
    states = sweep_states(paths, manifest, driver_alive=driver_alive(manifest), freshness=freshness)
    if include_stale:
        return states
    current = SweepStates(s for s in states if not s.stale)
    current.unreachable = states.unreachable
    return current


def list_sweeps(workdir: Path) -> list[tuple[str, list[RunState] | None, str]]:
    """(sweep, states of its current runs or None, note) for every sweep of `workdir`, launched last first;
    a sweep whose state cannot be read says why in the note instead of stopping the listing."""
    from cancelctl.workdir import known_sweeps, sweep_paths

    listed = []
    for name in known_sweeps(workdir):
        try:
            manifest = sweep_paths(workdir, name).store.load()
            states, note, stamp = (sweep_status(workdir, name, freshness=SHOW), manifest.file or "",
                                   manifest.launched_at or manifest.created_at)
        except Exception as exc:  # noqa: BLE001 - one broken sweep must not hide the others
            states, note, stamp = None, f"unreadable: {exc}", 0.0
        listed.append((stamp, name, states, note))
    return [(name, states, note) for _, name, states, note in sorted(listed, key=lambda t: -t[0])]


def _reconcile_if_idle(paths: SweepPaths) -> None:
    """A killed launcher's scheduler intents get resolved by status too, unless a launcher is busy."""
    try:
        with file_lock(paths.submit_lock, timeout_s=0.0, what="submit lock"):
            reconcile(paths, wait_local=False)
    except ManifestBusy:
        pass  # a launcher is submitting right now: its intents are "queued, being submitted"


def wait_for_sweep(
    workdir: Path,
    sweep: str,
    progress: Progress | None = None,
    poll_s: float = 5.0,
    timeout_s: float | None = None,
) -> list[RunState]:
    """Poll until no run is queued, pending or running; returns the final states. Jobs that died
    outside Python (scancel, OOM) end as failed through the scheduler's state, so this never
    waits on a result that cannot come. TimeoutError after `timeout_s`."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        states = sweep_status(workdir, sweep)
        if progress is not None:
            progress(states)
        if not any(s.active for s in states):
            break
        if deadline is not None and time.monotonic() >= deadline:
            active = [s.name for s in states if s.active]
            raise TimeoutError(f"sweep {sweep}: {len(active)} runs still active after {timeout_s:.0f} s: {', '.join(active[:5])}")
        time.sleep(poll_s)
    settle_tracking(states)
    return states


def cancel_sweep(workdir: Path, sweep: str) -> list[str]:
    """Stop every queued, pending and running run of `sweep`; returns the cancelled job ids (SLURM
    array ids, local process ids). Returns once none of them is left running (or raises
    TimeoutError after CANCEL_TIMEOUT_S). A sweep still starting (its launcher announced, its
    manifest not yet written: `cancelctl.launch.starting`) is never 'unknown': the request left here
    makes the launch submit none of its runs, and `cancel` returns once it has recorded them
    cancelled, or has ended without recording any."""
    paths = sweep_paths(workdir, sweep)
    if not launch_in_progress(paths):
        paths = existing_sweep(workdir, sweep)  # SweepNotFound: neither run here nor starting
    request_cancel(paths)  # first: a launch that has not submitted yet honours it, whatever it holds
    deadline = time.monotonic() + CANCEL_TIMEOUT_S
    while not paths.store.exists():
        if not launch_in_progress(paths):
            if paths.store.exists():  # it recorded its runs as it ended
                break
            return []  # it ended before recording any run (interrupted, refused): nothing to cancel
        if time.monotonic() >= deadline:
            raise TimeoutError(f"sweep {sweep}: its launch still plans {CANCEL_TIMEOUT_S:.0f} s after cancel; the "
                               f"request stands: it submits none of its runs")
        time.sleep(0.05)
    with file_lock(paths.submit_lock, CANCEL_TIMEOUT_S, what=f"sweep {sweep} submission"):
        return _stop(paths, only=None)


def stop_runs(paths: SweepPaths, run_ids: list[str]) -> list[str]:
    """What an interrupted launch does to the runs it queued or started (a SIGTERM to `cancelctl
    sweep`): `cancel` for those runs alone — unqueued, stopped at a step boundary, `cancelled`."""
    with file_lock(paths.submit_lock, CANCEL_TIMEOUT_S, what=f"sweep {paths.sweep} submission"):
        return _stop(paths, only=set(run_ids))


def mark_not_started(paths: SweepPaths, run_ids: list[str]) -> list[str]:
    """What an interrupted launch leaves of the runs it had not submitted yet: each of `run_ids` never
    submitted (a failed or abandoned submission keeps its own reason) and not ended is recorded
    cancelled — interrupted before it started — not left `unsubmitted` with no reason. Asks no
    scheduler; returns them. A launch that had not written its manifest yet recorded nothing."""
    if not paths.manifest.is_file():
        return []
    now, marked = time.time(), []
    try:
        with paths.store.update() as manifest:
            for run_id in run_ids:
                entry = manifest.runs.get(run_id)
                if entry is None or entry.queued_at is not None or entry.cancelled_at is not None:
                    continue  # not in it yet, queued (`stop_runs` stops it), or cancelled already
                if entry.submissions:
                    continue  # its executor, or its failed submission, says where it is
                if paths.run_folder(run_id, entry.name).result.exists():
                    continue  # finished (adopted from its tracking store)
                entry.cancelled_at = now
                marked.append(run_id)
    except (OSError, ValueError) as exc:  # the interrupt still ends the launch; the runs stay unsubmitted
        log.warning("sweep %s: could not record its runs cancelled after the interrupt (%s); they show "
                    "unsubmitted, and the next `cancelctl sweep FILE` submits them", paths.sweep, exc)
        return []
    return marked


def _stop(paths: SweepPaths, only: set[str] | None) -> list[str]:
    """Mark the active and queued runs (of `only`, or all: the sweep itself is then marked cancelled)
    cancelled and stop them; the caller holds the submit lock."""
    sweep = paths.sweep
    cancelled: list[str] = []
    stopped: dict[str, list[str]] = {}  # executor -> job ids it stopped
    reconcile(paths, wait_local=False)
    manifest = paths.store.load()
    first = sweep_states(paths, manifest, driver_alive=driver_alive(manifest))
    if first.unreachable:  # which jobs still run is unknown: nothing is marked, nothing half-done
        raise SchedulerError(f"{first.unreachable}; nothing was cancelled: run `cancelctl cancel {sweep}` "
                             f"again once SLURM answers")
    active_ids = {s.run_id for s in first if s.active and (only is None or s.run_id in only)}
    if only is not None:  # a launch's own runs: one its interrupt caught mid-submission ends cancelled too
        active_ids |= {s.run_id for s in first if s.run_id in only and s.state == UNSUBMITTED}
    now = time.time()
    with paths.store.update() as manifest:  # nothing queued is started after this
        if only is None:
            manifest.cancelled_at = now
        for run_id, entry in manifest.runs.items():
            if only is not None and run_id not in only:
                continue
            if run_id in active_ids or entry.queued_at is not None:  # a run that already ended keeps its state
                entry.queued_at = None
                entry.cancelled_at = now
    deadline = time.monotonic() + CANCEL_TIMEOUT_S
    signalled: dict[str, float] = {}
    try:
        while True:
            manifest = paths.store.load()
            states = sweep_states(paths, manifest, driver_alive=driver_alive(manifest))
            if states.unreachable:
                raise SchedulerError(states.unreachable)
            active = [s for s in states if s.active and (only is None or s.run_id in only)]
            if not active:
                break
            if time.monotonic() >= deadline:
                raise TimeoutError(f"sweep {sweep}: still active {CANCEL_TIMEOUT_S:.0f} s after cancel: "
                                   f"{', '.join(s.name for s in active)}")
            by_executor: dict[str, list[RunState]] = {}
            for state in active:
                if state.executor is not None:
                    by_executor.setdefault(state.executor, []).append(state)
            for name, runs in sorted(by_executor.items()):
                ids = get_executor(name).cancel(paths, runs, signalled)
                cancelled.extend(ids)
                stopped.setdefault(name, []).extend(ids)
            time.sleep(0.5)
        for name, ids in stopped.items():
            get_executor(name).wait_stopped(ids, deadline)
    except SchedulerError as exc:
        raise SchedulerError(f"sweep {sweep}: {exc}; the sweep is marked cancelled (none of its queued runs will "
                             f"start), but its jobs may still run: `cancelctl cancel {sweep}` again once SLURM "
                             f"answers") from None
    except TimeoutError as exc:
        raise TimeoutError(str(exc) if str(exc).startswith(f"sweep {sweep}") else f"sweep {sweep}: {exc}") from None
    settle_tracking([s for s in states if only is None or s.run_id in only])
    return cancelled


def settle_tracking(states: list[RunState]) -> None:
    """Bring the MLflow runs of ended runs in line with their run folders: the final status each
    asked for at close, or, for one that died without closing (scancel, OOM, SIGKILL), FAILED, or
    KILLED when cancelled (by cancelctl, or by a scancel from outside); and every point still only
    in its metrics.jsonl. Needed when a close lost a race for the store (a sweep's runs all closing
    into one sqlite at once) or was cut short (a SIGKILL at the scheduler's kill wait). A run whose
    process still holds its attempt lock is left to close itself (scancel's SIGTERM: it checkpoints
    at its next step and closes KILLED); the first call after the process is gone settles it."""
    unreachable: dict[str, str | None] = {}  # a store found down is not asked again for each run
    for state in states:
        folder = RunFolder(state.run_dir) if state.run_dir is not None else None
        if state.state not in TERMINAL or folder is None or not folder.run_json.exists():
            continue  # never started: no folder to lock (nor to create by locking)
        with file_lock_if_free(folder.attempt_lock, _closing_wait_s(state), what="run attempt") as held:
            if not held:
                log.debug("run %s: its process is still closing it", state.run_id)
                continue
            _settle_run(state, folder, unreachable)


def _settle_run(state: RunState, folder: RunFolder, unreachable: dict[str, str | None]) -> None:
    from cancelctl.jobs.stall_close import tag_stalls
    from cancelctl.tracking import RunLogger, SyncState
    from cancelctl.tracking.runfiles import run_store_uri
    from cancelctl.tracking.uri import normalize_tracking_uri, probe_store

    record = read_json(folder.run_json)
    if not record or not record.get("tracking_uri"):
        return
    record = {**record, "tracking_uri": run_store_uri(record, folder.path)}  # a moved work dir's own store
    sync_state = SyncState.load(folder.path)
    status = sync_state.final_status or _status_of_unclosed(state)
    uri = normalize_tracking_uri(record["tracking_uri"])
    progress = sync_state.progress(uri)
    metrics = folder.metrics
    if progress.status == status and progress.bytes >= (metrics.stat().st_size if metrics.exists() else 0):
        return  # closed, and every point it wrote is in the store
    if uri not in unreachable:
        unreachable[uri] = probe_store(uri)
        if unreachable[uri] is not None:  # said once per store; the run folders keep every point
            log.warning("tracking store %s unusable: %s; MLflow not brought in line with the run folders, "
                        "`cancelctl sync` uploads their points once the store works", uri, unreachable[uri])
    if unreachable[uri] is not None:
        return
    try:
        logger = RunLogger(folder.path, record["tracking_uri"], record.get("mlflow_run_id"), mark_running=False)
        tag_stalls(logger, folder.path)  # a run failed of a stall: its watchdog could not close it (SLURM)
        logger.close(status)
    except Exception as exc:  # noqa: BLE001 - tracking trouble must not hide the sweep's outcome
        log.warning("run %s: could not mark its MLflow run %s (%s)", state.run_id, status, exc)


def _closing_wait_s(state: RunState) -> float:
    """A run with its result written is a moment from releasing its lock; one the scheduler ended
    may take the kill wait to close itself, and is not waited for."""
    return 2.0 if state.state in (COMPLETED, STOPPED) else 0.0


def _status_of_unclosed(state: RunState) -> str:
    """The MLflow status of a run that ended without recording one at close."""
    if state.state in (COMPLETED, STOPPED):
        return "FINISHED"  # result.json was written: only the close was lost
    return "KILLED" if state.state == CANCELLED or state.cancel_requested else "FAILED"


__all__ = ["stop_runs", "mark_not_started", "cancel_sweep", "list_sweeps", "reconcile", "settle_tracking", "sweep_status", "wait_for_sweep"]
