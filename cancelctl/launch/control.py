"""Following a launched sweep: status, wait, cancel, the latest sweep of a work dir."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from cancelctl.jobs import JOB_JSON, RUN_JSON, process_alive
from cancelctl.launch import local, slurm
from cancelctl.launch.layout import SweepPaths, known_sweeps, sweep_paths
from cancelctl.launch.states import CANCELLED, FAILED, RunState, sweep_states
from cancelctl.manifest import ManifestBusy, file_lock

log = logging.getLogger("cancelctl.launch")

CANCEL_TIMEOUT_S = 60.0
INTERRUPT_GRACE_S = 10.0  # local runs get SIGINT (they close their MLflow run KILLED), then SIGKILL

Progress = Callable[[list[RunState]], None]


def latest_sweep(workdir: Path) -> str | None:
    """The sweep launched last in `workdir` (None if there is none)."""
    best: tuple[float, str] | None = None
    for name in known_sweeps(workdir):
        try:
            manifest = sweep_paths(workdir, name).store.load()
        except (OSError, ValueError):
            continue
        stamp = manifest.launched_at or manifest.created_at
        if best is None or stamp > best[0]:
            best = (stamp, name)
    return best[1] if best else None


def _paths(workdir: Path, sweep: str | None) -> SweepPaths:
    name = sweep or latest_sweep(workdir)
    if name is None:
        raise FileNotFoundError(f"no sweep has been launched in {Path(workdir).resolve()}")
    paths = sweep_paths(workdir, name)
    if not paths.store.exists():
        raise FileNotFoundError(f"no sweep {name!r} in {paths.workdir} (known: {', '.join(known_sweeps(workdir)) or 'none'})")
    return paths


def sweep_status(workdir: Path, sweep: str | None = None) -> list[RunState]:
    """Per-run state (latest sweep when `sweep` is None). SLURM: one sacct call for the whole sweep;
    local: the manifest, process liveness and the run folders' result/error files."""
    paths = _paths(workdir, sweep)
    manifest = paths.store.load()
    if any(s.executor == "slurm" for s in manifest.intents()):
        _reconcile_if_idle(paths)
        manifest = paths.store.load()
    return sweep_states(paths, manifest, driver_alive=local.driver_alive(manifest))


def _reconcile_if_idle(paths: SweepPaths) -> None:
    """A killed launcher's SLURM intents get resolved by status too, unless a launcher is busy."""
    from cancelctl.launch.launcher import reconcile

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
    TimeoutError after CANCEL_TIMEOUT_S)."""
    paths = _paths(workdir, sweep)
    cancelled: list[str] = []
    with file_lock(paths.submit_lock, CANCEL_TIMEOUT_S, what=f"sweep {sweep} submission"):
        from cancelctl.launch.launcher import reconcile

        reconcile(paths, wait_local=False)
        manifest = paths.store.load()
        active_ids = {s.run_id for s in sweep_states(paths, manifest, driver_alive=local.driver_alive(manifest)) if s.active}
        now = time.time()
        with paths.store.update() as manifest:  # nothing queued is started after this
            manifest.cancelled_at = now
            for run_id, entry in manifest.runs.items():
                if run_id in active_ids or entry.queued_at is not None:  # a run that already ended keeps its state
                    entry.queued_at = None
                    entry.cancelled_at = now
        deadline = time.monotonic() + CANCEL_TIMEOUT_S
        signalled: dict[str, float] = {}
        slurm_arrays: set[str] = set()
        while True:
            manifest = paths.store.load()
            states = sweep_states(paths, manifest, driver_alive=local.driver_alive(manifest))
            active = [s for s in states if s.active]
            if not active:
                break
            if time.monotonic() >= deadline:
                raise TimeoutError(f"sweep {sweep}: still active after cancel: {', '.join(s.name for s in active)}")
            arrays = sorted({s.job_id.split("_")[0] for s in active if s.executor == "slurm" and s.job_id})
            new_arrays = [a for a in arrays if a not in signalled]
            if new_arrays:
                slurm.scancel(new_arrays)
                signalled.update({a: time.monotonic() for a in new_arrays})
                cancelled.extend(new_arrays)
                slurm_arrays.update(new_arrays)
            for state in active:
                if state.executor in ("local", "debug") and state.job_id:
                    if state.job_id not in signalled:
                        cancelled.append(state.job_id)
                    _stop_process(paths, state, signalled)
            time.sleep(0.5)
        arrays = sorted(slurm_arrays)
        while arrays and slurm.live_tasks(arrays):  # scancel'd tasks linger as COMPLETING for KillWait
            if time.monotonic() >= deadline:
                raise TimeoutError(f"sweep {sweep}: SLURM still runs {', '.join(slurm.live_tasks(arrays))} after cancel")
            time.sleep(0.5)
    settle_tracking(states)
    return cancelled


def _stop_process(paths: SweepPaths, state: RunState, signalled: dict[str, float]) -> None:
    """SIGINT to the run's own process first (it records INTERRUPTED and closes its MLflow run
    KILLED), SIGKILL to it and its controller after a grace. A controller whose run has not
    started yet is killed at once: the late run would refuse to start anyway (cancelled)."""
    now = time.monotonic()
    first = signalled.setdefault(state.job_id, now)
    hard = now - first >= INTERRUPT_GRACE_S
    if first != now and not hard:
        return  # SIGINT once: a second one would interrupt the run's own cleanup
    controller = int(state.job_id) if state.job_id.isdigit() else None
    job = _read_json(paths.run_dir(state.run_id) / JOB_JSON) or {}
    task = job.get("pid") if process_alive(job.get("pid"), job.get("start")) else None
    targets: list[tuple[int, int]] = []
    if task is not None:
        targets.append((task, signal.SIGKILL if hard else signal.SIGINT))
    if controller is not None and (hard or task is None):
        targets.append((controller, signal.SIGKILL if state.executor == "local" else signal.SIGINT))
    for pid, sig in targets:
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def settle_tracking(states: list[RunState]) -> None:
    """Close the MLflow runs of runs that died without closing them (scancel, OOM, SIGKILL): FAILED,
    or KILLED when cancelled. Metrics already in metrics.jsonl are uploaded on the way."""
    from cancelctl.tracking import RunLogger, SyncState

    for state in states:
        if state.state not in (FAILED, CANCELLED) or state.run_dir is None:
            continue
        record = _read_json(state.run_dir / RUN_JSON)
        if not record or SyncState.load(state.run_dir).final_status is not None:
            continue
        status = "KILLED" if state.state == CANCELLED else "FAILED"
        try:
            logger = RunLogger(state.run_dir, record["tracking_uri"], record.get("mlflow_run_id"), mark_running=False)
            logger.close(status)
        except Exception as exc:  # noqa: BLE001 - tracking trouble must not hide the sweep's outcome
            log.warning("run %s: could not mark its MLflow run %s (%s)", state.run_id, status, exc)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
