"""Local and debug execution: a driver process starts queued runs.

local: each run is one submitit `LocalExecutor` job (its own process tree, logs, result pickle,
USR2-before-timeout checkpoint/requeue). submitit's local executor starts every submission at
once (no array_parallelism), so the driver bounds parallelism itself: at most one run per core at a
time (`CANCELCTL_LOCAL_PARALLEL` overrides), each with torch threads = cores // parallel. The
runs' processes survive a killed driver; the next launch counts them as running.

debug: the driver calls the runs in its own process, one after another (breakpoints work).

One driver per sweep: `Manifest.driver` names it (pid + process start). The launcher drives in
process when it waits; otherwise it starts `python -m cancelctl.launch.local` detached. Runs wait
in the manifest as "queued" (RunEntry.queued_at) until the driver takes them, so a launch while a
driver is alive only adds to its queue.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from cancelctl.jobs import JOB_JSON, RunJob, archive_error, process_alive, process_start
from cancelctl.launch.layout import SweepPaths, sweep_paths
from cancelctl.launch.states import RunState, process_running, sweep_states
from cancelctl.manifest import ABANDONED, INTENT, SUBMITTED, Manifest, ManifestStore

log = logging.getLogger("cancelctl.launch")

LOCAL_TIMEOUT_MIN = 7 * 24 * 60  # local runs have no wall-clock limit worth the name
LOCAL_ADOPT_GRACE_S = 30.0  # a job started just before its launcher died writes job.json within this
PARALLEL_ENV = "CANCELCTL_LOCAL_PARALLEL"

Progress = Callable[[list[RunState]], None]


def cores() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def local_parallelism() -> int:
    value = os.environ.get(PARALLEL_ENV)
    return max(1, int(value)) if value else cores()


def me() -> dict[str, int]:
    pid = os.getpid()
    return {"pid": pid, "start": process_start(pid) or 0}


def driver_alive(manifest: Manifest) -> bool:
    driver = manifest.driver
    return bool(driver) and process_alive(driver.get("pid"), driver.get("start"))


def claim_driver(store: ManifestStore, who: dict[str, int] | None = None) -> bool:
    """Become the sweep's driver unless another live process is."""
    who = who or me()
    with store.update() as manifest:
        if driver_alive(manifest) and manifest.driver != who:
            return False
        manifest.driver = who
    return True


def release_driver(store: ManifestStore) -> None:
    with store.update() as manifest:
        if manifest.driver == me():
            manifest.driver = None


def start_detached_driver(paths: SweepPaths, executor: str) -> int:
    """`python -m cancelctl.launch.local` in its own session (survives the CLI); output to driver.log."""
    log_file = open(paths.driver_log, "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cancelctl.launch.local", str(paths.workdir), paths.sweep, executor],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log_file.close()
    # Claim on the child's behalf now, so status never shows its queue without a driver.
    claim_driver(paths.store, {"pid": proc.pid, "start": process_start(proc.pid) or 0})
    return proc.pid


def reconcile_local_intents(paths: SweepPaths, wait: bool = True) -> None:
    """Intents of local runs whose driver died between recording and starting them: adopt the
    process if the run wrote job.json with the intent's token, else mark the intent abandoned
    (after giving a just-started process LOCAL_ADOPT_GRACE_S to show up)."""
    store = paths.store
    manifest = store.load()
    if driver_alive(manifest):
        return
    pending = [s for s in manifest.intents() if s.executor == "local"]
    while pending:
        adopted: dict[str, dict] = {}
        for sub in pending:
            job = _read_job(paths.run_dir(sub.run_ids[0]))
            if job.get("token") == sub.token:
                adopted[sub.token] = job
        youngest = max(s.created_at for s in pending)
        expired = not wait or time.time() - youngest >= LOCAL_ADOPT_GRACE_S
        if adopted or expired:
            with store.update() as manifest:
                for sub in pending:
                    current = manifest.submissions[sub.token]
                    job = adopted.get(sub.token)
                    if job is not None:
                        controller = str(job.get("job_id") or job["pid"])
                        current.state, current.job_id = SUBMITTED, controller
                        current.pid_start = process_start(int(controller)) if controller.isdigit() else None
                        current.submitted_at = job.get("started_at")
                    elif expired:
                        current.state = ABANDONED
            pending = [s for s in pending if s.token not in adopted and not expired]
        if pending:
            time.sleep(0.5)


def drive(paths: SweepPaths, executor: str, *, progress: Progress | None = None, poll_s: float = 1.0,
          job_ids: list[str] | None = None) -> None:
    """Run the sweep's queued runs until none is queued or running. The caller has claimed the
    driver role; it is released on the way out (also on Ctrl-C)."""
    try:
        if executor == "debug":
            _drive_debug(paths, progress)
        else:
            _drive_local(paths, progress, poll_s, job_ids if job_ids is not None else [])
    finally:
        release_driver(paths.store)


def _drive_local(paths: SweepPaths, progress: Progress | None, poll_s: float, job_ids: list[str]) -> None:
    LocalExecutor = _local_executor_class()  # noqa: N806
    store = paths.store
    parallel = local_parallelism()
    threads = max(1, cores() // parallel)
    executor = LocalExecutor(folder=paths.submitit_dir / "local")
    executor.update_parameters(timeout_min=LOCAL_TIMEOUT_MIN, signal_delay_s=30)
    own: dict[str, object] = {}  # token -> LocalJob; polling them reaps finished children
    while True:
        for token, job in list(own.items()):
            if job.done():
                del own[token]
        starting: list[tuple[str, str]] = []
        with store.update() as manifest:
            if manifest.driver != me():
                log.warning("sweep %s: another process took over as driver; stopping", paths.sweep)
                return
            active = _running_local(paths, manifest)
            queued = sorted((e.queued_at, i, run_id) for i, (run_id, e) in enumerate(manifest.runs.items()) if e.queued_at)
            for _, _, run_id in queued[: max(0, parallel - active)]:
                sub = manifest.add_submission("local", [run_id])
                starting.append((run_id, sub.token))
            if not queued and active == 0:
                manifest.driver = None
                finished = True
            else:
                finished = False
        for run_id, token in starting:
            run_dir = paths.run_dir(run_id)
            archive_error(run_dir)
            with _sigint_ignored():  # inherited by the controller only; the run restores it
                job = executor.submit(RunJob(run_dir, token, threads))
            own[token] = job
            job_ids.append(job.job_id)
            with store.update() as manifest:
                sub = manifest.submissions[token]
                sub.state, sub.job_id, sub.submitted_at = SUBMITTED, job.job_id, time.time()
                sub.pid_start = process_start(int(job.job_id))
        if progress is not None:
            progress(sweep_states(paths, store.load(), driver_alive=not finished))
        if finished:
            return
        time.sleep(poll_s)


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """submitit's local controller answers SIGINT by SIGKILLing its run one second later, too soon
    for the run to record the interruption and close its MLflow run; started with SIGINT ignored,
    it leaves Ctrl-C (and `cancel`) to the run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _local_executor_class():
    import submitit

    class LocalExecutor(submitit.LocalExecutor):
        """submitit's local executor with cancelctl's job entry (fast exit after the result)."""

        @property
        def _submitit_command_str(self) -> str:
            return " ".join([self.python, "-u -m cancelctl.jobs local", shlex.quote(str(self.folder))])

    return LocalExecutor


def _running_local(paths: SweepPaths, manifest: Manifest) -> int:
    """Local runs whose process is alive, whoever started them (a killed driver's runs go on)."""
    count = 0
    for run_id in manifest.runs:
        latest = manifest.latest_submission(run_id)
        if latest is None or latest[0].executor != "local":
            continue
        sub = latest[0]
        if sub.state == INTENT or (sub.state == SUBMITTED and process_running(paths.run_dir(run_id), sub)):
            count += 1
    return count


def _drive_debug(paths: SweepPaths, progress: Progress | None) -> None:
    store = paths.store
    while True:
        with store.update() as manifest:
            queued = sorted((e.queued_at, i, run_id) for i, (run_id, e) in enumerate(manifest.runs.items()) if e.queued_at)
            if not queued:
                manifest.driver = None
                return
            run_id = queued[0][2]
            who = me()
            sub = manifest.add_submission(
                "debug", [run_id], state=SUBMITTED, job_id=str(who["pid"]), pid_start=who["start"], submitted_at=time.time()
            )
        run_dir = paths.run_dir(run_id)
        archive_error(run_dir)
        try:
            RunJob(run_dir, sub.token)()
        except Exception as exc:  # noqa: BLE001 - recorded in error.txt and reported as failed
            log.error("run %s failed: %s: %s (see %s)", run_id, type(exc).__name__, exc, run_dir / "error.txt")
        if progress is not None:
            progress(sweep_states(paths, store.load(), driver_alive=True))


def _read_job(run_dir: Path) -> dict:
    import json

    try:
        return json.loads((run_dir / JOB_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def main(argv: list[str]) -> int:
    """Detached driver: python -m cancelctl.launch.local WORKDIR SWEEP EXECUTOR."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    workdir, sweep, executor = argv
    paths = sweep_paths(Path(workdir), sweep)
    if not claim_driver(paths.store):
        log.info("sweep %s already has a live driver; nothing to do", sweep)
        return 0
    drive(paths, executor)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
