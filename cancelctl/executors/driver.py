"""Executors whose runs a driver process starts (local, debug, in-process test executors).

Runs wait in the manifest as "queued" (RunEntry.queued_at) until the sweep's one driver takes them
(`Manifest.driver` names it: pid + process start), so a launch while a driver is alive only adds to
its queue. The launcher drives in process when it waits; otherwise it starts the executor's module
(`python -m <module> WORKDIR SWEEP`) detached, with its output in driver.log.

A run's process state comes from its controller (or the driver itself) and the run's own process
(job.json), which outlives a controller killed with SIGKILL. Three liveness checks, by what they
are given: `same_process_alive(pid, start)` (one process for good: pids are reused, start times are
not), `submission_alive(run_dir, sub)` (a driven submission: its controller or the run's own
process) and `_pid_running(pid)` (whatever holds a pid now: a stopped process we signalled is gone).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from cancelctl.executors.base import DECIDE, Executor, Freshness, NoTasks, Submitted, Tick
from cancelctl.executors.handle import JobHandle
from cancelctl.fileio import read_json
from cancelctl.jobs.outcome import process_start, read_attempts, read_error, same_process_alive
from cancelctl.manifest import Manifest, ManifestStore, RunEntry, Submission
from cancelctl.runstate import CANCELLED, FAILED, RUNNING, UNSUBMITTED, RunState
from cancelctl.workdir import RunFolder, SweepPaths, sweep_paths

if TYPE_CHECKING:
    from cancelctl.spec.run import RunSpec

log = logging.getLogger("cancelctl.launch")

INTERRUPT_GRACE_S = 10.0  # runs get SIGINT (they close their MLflow run KILLED), then SIGKILL
RUNNING_PROCESS = "RUNNING"  # a driven job's one state word: its controller or its run's process is alive


class ProcessId(NamedTuple):
    """One process for good: its pid and its start time (`process_start`, clock ticks since boot)."""

    pid: int
    start: int

    @classmethod
    def of(cls, record: Mapping[str, int] | None) -> ProcessId | None:
        """From the manifest's `driver` record ({"pid": ..., "start": ...}); None when there is none."""
        if not record or record.get("pid") is None or record.get("start") is None:
            return None
        return cls(int(record["pid"]), int(record["start"]))

    def alive(self) -> bool:
        return same_process_alive(self.pid, self.start)


def me() -> ProcessId:
    """This process, as the manifest names a sweep's driver."""
    pid = os.getpid()
    return ProcessId(pid, process_start(pid) or 0)


def is_driver(manifest: Manifest, who: ProcessId) -> bool:
    return ProcessId.of(manifest.driver) == who


def driver_alive(manifest: Manifest) -> bool:
    driver = ProcessId.of(manifest.driver)
    return driver is not None and driver.alive()


def claim_driver(store: ManifestStore, who: ProcessId | None = None) -> bool:
    """Become the sweep's driver unless another live process is."""
    who = who or me()
    with store.update() as manifest:
        if driver_alive(manifest) and not is_driver(manifest, who):
            return False
        manifest.driver = who._asdict()
    return True


def release_driver(store: ManifestStore) -> None:
    with store.update() as manifest:
        if is_driver(manifest, me()):
            manifest.driver = None


def queued_runs(manifest: Manifest) -> list[str]:
    """Queued run ids in queue order (sweep order within one launch)."""
    queued = sorted((e.queued_at, i, run_id) for i, (run_id, e) in enumerate(manifest.runs.items()) if e.queued_at)
    return [run_id for _, _, run_id in queued]


def submission_alive(run_dir: Path, sub: Submission) -> bool:
    """Is the process of a driven submission alive: its controller (or the driver, in process) or
    the run's own process (which outlives a controller killed with SIGKILL)? Each by pid and start."""
    pid = int(sub.job_id) if sub.job_id and sub.job_id.isdigit() else None
    if same_process_alive(pid, sub.pid_start):
        return True
    job = read_json(RunFolder(run_dir).job) or {}
    return job.get("token") == sub.token and same_process_alive(job.get("pid"), job.get("start"))


class DrivenJob(JobHandle[NoTasks]):
    """A driven run's process: its controller (`sub.job_id`, the driver itself for debug) and the
    run's own process (job.json); no scheduler keeps a word for it once it is gone."""

    @property
    def state(self) -> str | None:
        return RUNNING_PROCESS if submission_alive(self.run_dir, self.sub) else None

    def classify(self, state: RunState, entry: RunEntry, now: float) -> RunState:
        sub = self.sub
        error = read_error(state.run_dir)  # written as the run ends: its process may still be exiting
        if error is None and self.state == RUNNING_PROCESS:
            return replace(state, state=RUNNING)
        started = any(a.get("event") == "start" and a.get("token") == sub.token for a in read_attempts(state.run_dir))
        if error is not None and error[0] == "INTERRUPTED":
            return replace(state, state=CANCELLED,
                           reason="interrupted" + (" by cancelctl" if self.cancelled_by_us(entry) else ""))
        if error is not None:
            return replace(state, state=FAILED, reason=error[1])
        if not started and self.cancelled_by_us(entry):  # stopped while it started: what cancel promised
            return replace(state, state=CANCELLED,
                           reason="cancelled before it started (cancelctl cancel, or an interrupted launch)")
        if not started:
            return replace(state, state=UNSUBMITTED, reason="its process ended before the run started")
        if self.cancelled_by_us(entry):  # stopped by cancelctl before it could record it (still starting)
            return replace(state, state=CANCELLED, reason="interrupted by cancelctl while it started; a rerun resumes it")
        # no result, no error: killed from outside (SIGKILL, a closed terminal, the OOM killer)
        return replace(state, state=CANCELLED, reason=(
            f"interrupted: process {sub.job_id} was killed (no result, no error); "
            f"a rerun resumes it from its checkpoint" + (f"; see {state.log}" if state.log else "")))


class DrivenExecutor(Executor[None, NoTasks]):
    """Submission = queueing in the manifest; a driver process starts the queued runs. Nothing is
    planned per run and no scheduler is asked: the manifest and the processes are the state."""

    controller_signal = signal.SIGINT  # how a run's controller is stopped once the run is gone
    stops_with_launcher = True  # the launcher (or its detached driver) owns these runs: they end with it
    job_class: ClassVar[type[DrivenJob]] = DrivenJob

    @abstractmethod
    def drive_queue(self, paths: SweepPaths, tick: Tick | None, job_ids: list[str]) -> None:
        """Start queued runs until none is queued or running (the caller holds the driver role)."""

    def plan(self, runs: Sequence[RunSpec], workdir: Path) -> None:
        return None

    def submit(self, paths: SweepPaths, runs: Sequence[RunSpec], plan: None, lock_fd: int) -> Submitted:
        now = time.time()
        with paths.store.update() as manifest:
            for i, run in enumerate(runs):
                entry = manifest.runs[run.run_id]
                entry.queued_at, entry.cancelled_at = now + i * 1e-6, None  # keeps sweep order
        return Submitted(submitted=[run.run_id for run in runs])

    def start(self, paths: SweepPaths, runs: Sequence[RunSpec], *, wait: bool, tick: Tick | None,
              job_ids: list[str]) -> None:
        if not runs:
            return
        if wait and claim_driver(paths.store):
            self.drive(paths, tick=tick, job_ids=job_ids)
        elif not wait and not driver_alive(paths.store.load()):
            job_ids.append(str(self.start_detached_driver(paths)))

    def drive(self, paths: SweepPaths, *, tick: Tick | None = None, job_ids: list[str] | None = None) -> None:
        """Drive the queue; the driver role is released on the way out (also on Ctrl-C)."""
        try:
            self.drive_queue(paths, tick, job_ids if job_ids is not None else [])
        finally:
            release_driver(paths.store)

    def start_detached_driver(self, paths: SweepPaths) -> int:
        """`python -m <this executor's module> WORKDIR SWEEP` in its own session (survives the CLI)."""
        log_file = open(paths.driver_log, "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", type(self).__module__, str(paths.workdir), paths.sweep],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            )
        finally:
            log_file.close()
        # Claim on the child's behalf now, so status never shows its queue without a driver.
        claim_driver(paths.store, ProcessId(proc.pid, process_start(proc.pid) or 0))
        return proc.pid

    # -- status --------------------------------------------------------------------------------

    def task_states(self, paths: SweepPaths, submissions: Sequence[Submission], freshness: Freshness = DECIDE) -> NoTasks:
        return {}

    # -- cancel --------------------------------------------------------------------------------

    def cancel(self, paths: SweepPaths, active: Sequence[RunState], signalled: dict[str, float]) -> list[str]:
        stopped = []
        for state in active:
            if not state.job_id:
                continue
            if state.job_id not in signalled:
                stopped.append(state.job_id)
            self._stop_process(state, signalled)
        return stopped

    def wait_stopped(self, job_ids: Sequence[str], deadline: float) -> None:
        """A run records INTERRUPTED before its process has exited (MLflow closing, interpreter
        teardown): return only once the stopped processes are gone, so a cancel leaves none behind."""
        pids = sorted({int(job_id) for job_id in job_ids if job_id.isdigit()} - {os.getpid()})
        while True:
            running = [pid for pid in pids if _pid_running(pid)]
            if not running:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"processes {', '.join(map(str, running))} still running after cancel")
            time.sleep(0.1)

    def _stop_process(self, state: RunState, signalled: dict[str, float]) -> None:
        """SIGINT to the run's own process first (it records INTERRUPTED and closes its MLflow run
        KILLED), SIGKILL to it and its controller after a grace. A controller whose run has not
        started yet is stopped at once: the late run would refuse to start anyway (cancelled)."""
        now = time.monotonic()
        first = signalled.setdefault(state.job_id, now)
        hard = now - first >= INTERRUPT_GRACE_S
        if first != now and not hard:
            return  # SIGINT once: a second one would interrupt the run's own cleanup
        controller = int(state.job_id) if state.job_id.isdigit() else None
        job = read_json(RunFolder(state.run_dir).job) or {}
        task = job.get("pid") if same_process_alive(job.get("pid"), job.get("start")) else None
        targets: list[tuple[int, int]] = []
        if task is not None:
            targets.append((task, signal.SIGKILL if hard else signal.SIGINT))
        if controller is not None and (hard or task is None):
            targets.append((controller, self.controller_signal))
        for pid, sig in targets:
            if pid == os.getpid():
                continue
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def _pid_running(pid: int) -> bool:
    """Some process holds `pid` and is not a zombie (a zombie has exited; only its parent's wait is
    due) — whichever process that is: for pids this process signalled a moment ago."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def main(executor: DrivenExecutor, argv: list[str]) -> int:
    """Detached driver: python -m <executor module> WORKDIR SWEEP."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    workdir, sweep = argv[:2]
    paths = sweep_paths(Path(workdir), sweep)
    if not claim_driver(paths.store):
        log.info("sweep %s already has a live driver; nothing to do", sweep)
        return 0
    executor.drive(paths)
    return 0
