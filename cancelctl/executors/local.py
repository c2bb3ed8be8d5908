"""The local executor: each run is one submitit `LocalExecutor` job (its own process tree, logs,
result pickle, USR2-before-timeout checkpoint/requeue), started by the sweep's driver.

submitit's local executor starts every submission at once (no array_parallelism), so the driver
bounds parallelism itself: at most one run per core at a time (`CANCELCTL_LOCAL_PARALLEL`
overrides), and never more than the runs' own `cluster.array_parallelism` (what SLURM honours for
an array: a spec whose runs do not fit in memory twice says 1 once, for both executors), each run
with torch threads = cores // parallel. The runs' processes survive a killed driver; the next
launch counts them as running.

Lab runs are forked from a preloaded worker (`cancelctl.jobs.zygote`) that has imported torch,
MLflow and the lab once for the whole drive, instead of each starting two fresh interpreters that
import them again; each run's processes, pids, signals, fencing and tracking are what submitit's
would be. `CANCELCTL_LOCAL_PRELOAD=0`, a platform without fork, or a worker that fails start every
run afresh, as do other backends (verl's import stays off the lab's path).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from cancelctl.executors.base import Tick
from cancelctl.executors.driver import DrivenExecutor, DrivenJob, driver_alive, is_driver, main, me, queued_runs, submission_alive
from cancelctl.fileio import read_json
from cancelctl.jobs.entry import LOCAL_PROCESS_ENTRY
from cancelctl.jobs.outcome import archive_error, process_start, same_process_alive
from cancelctl.jobs.runjob import RunJob
from cancelctl.manifest import ABANDONED, INTENT, SUBMITTED, Manifest, Submission
from cancelctl.workdir import RunFolder, SweepPaths

log = logging.getLogger("cancelctl.launch")

LOCAL_TIMEOUT_MIN = 7 * 24 * 60  # local runs have no wall-clock limit worth the name
LOCAL_ADOPT_GRACE_S = 30.0  # a job started just before its driver died writes job.json within this
PARALLEL_ENV = "CANCELCTL_LOCAL_PARALLEL"
PRELOAD_ENV = "CANCELCTL_LOCAL_PRELOAD"  # "0": every run starts in fresh interpreters (the benchmark's baseline)
FORK_ANSWER_S = 30.0  # a fork is answered in milliseconds; no answer by then: the worker is given up
WORKER_EXIT_S = 5.0
DRIVE_INTERVAL_S = 1.0  # the queue is looked at this often; sooner when one of this driver's runs ends
EXIT_CHECK_S = 0.05  # how often this driver's own runs are checked for an exit (Popen.poll: no I/O)


def cores() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def local_parallelism() -> int:
    value = os.environ.get(PARALLEL_ENV)
    return max(1, int(value)) if value else cores()


def array_parallelism(paths: SweepPaths, manifest: Manifest, run_ids: Sequence[str]) -> list[int]:
    """The `cluster.array_parallelism` of each run (its run.json, written at launch), unset ones left out."""
    limits = []
    for run_id in run_ids:
        record = read_json(RunFolder(paths.run_dir(run_id, manifest.runs[run_id].name)).run_json) or {}
        limit = ((record.get("run") or {}).get("spec") or {}).get("cluster", {}).get("array_parallelism")
        if isinstance(limit, int) and limit >= 1:
            limits.append(limit)
    return limits


class LocalJob(DrivenJob):
    """A run as one submitit local job: its controller's output is submitit's log pair."""

    @property
    def log_path(self) -> Path | None:
        return None if self.sub.job_id is None else self.paths.submitit_dir / "local" / f"{self.sub.job_id}_0_log.err"


class LocalExecutor(DrivenExecutor):
    name = "local"
    controller_signal = signal.SIGKILL  # submitit's controller would SIGKILL its run a second after SIGINT
    job_class = LocalJob

    def drive_queue(self, paths: SweepPaths, tick: Tick | None, job_ids: list[str]) -> None:
        store = paths.store
        manifest = store.load()
        parallel = min([local_parallelism(), *array_parallelism(paths, manifest, queued_runs(manifest))])
        threads = max(1, cores() // parallel)
        executor = _submitit_local_executor()(folder=paths.submitit_dir / "local")
        executor.update_parameters(timeout_min=LOCAL_TIMEOUT_MIN, signal_delay_s=30)
        worker = None
        if preload_enabled() and any(forks_preloaded(paths, manifest, r) for r in queued_runs(manifest)):
            worker = PreloadedWorker(executor.folder)
        try:
            while worker is not None and not worker.ready and not worker.broken:  # ~ what one fresh run spends importing
                worker.wait_ready(DRIVE_INTERVAL_S)
                if tick is not None:
                    tick(True)
            self._drive(paths, tick, job_ids, executor, worker, parallel, threads)
        finally:
            if worker is not None:
                worker.close()

    def _drive(self, paths: SweepPaths, tick: Tick | None, job_ids: list[str], executor, worker: PreloadedWorker | None,
               parallel: int, threads: int) -> None:
        store = paths.store
        own: dict[str, object] = {}  # token -> LocalJob; polling them reaps finished children
        while True:
            for token, job in list(own.items()):
                if job.done():
                    del own[token]
            starting: list[tuple[str, str, str]] = []
            with store.update() as manifest:
                if not is_driver(manifest, me()):
                    log.warning("sweep %s: another process took over as driver; stopping", paths.sweep)
                    return
                active = self._live_runs(paths, manifest)
                queued = queued_runs(manifest)
                for run_id in queued[: max(0, parallel - active)]:
                    sub = manifest.add_submission(self.name, [run_id])
                    starting.append((run_id, manifest.runs[run_id].name, sub.token))
                finished = not queued and active == 0
                if finished:
                    manifest.driver = None
            for run_id, name, token in starting:
                run_dir = paths.run_dir(run_id, name)
                archive_error(run_dir)
                executor.worker = worker if forks_preloaded(paths, manifest, run_id) else None
                with _signals_deferred():  # a run started is a run recorded: cancel finds its process
                    with _sigint_ignored():  # inherited by the controller only; the run restores it
                        job = executor.submit(RunJob(run_dir, token, threads))
                    own[token] = job
                    job_ids.append(job.job_id)
                    with store.update() as manifest:
                        sub = manifest.submissions[token]
                        sub.state, sub.job_id, sub.submitted_at = SUBMITTED, job.job_id, time.time()
                        sub.pid_start = process_start(int(job.job_id))
            if tick is not None:
                tick(not finished)
            if finished:
                return
            _until_one_ends(list(own.values()), DRIVE_INTERVAL_S)

    def _live_runs(self, paths: SweepPaths, manifest: Manifest) -> int:
        """How many of this executor's runs are being submitted or have a live process, whoever started
        them (a killed driver's runs go on)."""
        count = 0
        for run_id, entry in manifest.runs.items():
            latest = manifest.latest_submission(run_id)
            if latest is None or latest[0].executor != self.name:
                continue
            sub = latest[0]
            if sub.state == INTENT or (sub.state == SUBMITTED and submission_alive(paths.run_dir(run_id, entry.name), sub)):
                count += 1
        return count

    def reconcile(self, paths: SweepPaths, intents: Sequence[Submission], *, wait: bool) -> None:
        """Intents whose driver died between recording and starting them: adopt the process if the
        run wrote job.json with the intent's token, else mark the intent abandoned (after giving a
        just-started process LOCAL_ADOPT_GRACE_S to show up)."""
        store = paths.store
        manifest = store.load()
        if driver_alive(manifest):
            return
        pending = list(intents)
        while pending:
            adopted: dict[str, dict] = {}
            for sub in pending:
                run_id = sub.run_ids[0]
                job = read_json(RunFolder(paths.run_dir(run_id, manifest.runs[run_id].name)).job) or {}
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


def preload_enabled() -> bool:
    return os.environ.get(PRELOAD_ENV, "1") != "0" and sys.platform.startswith("linux") and hasattr(os, "fork")


def run_backend(paths: SweepPaths, manifest: Manifest, run_id: str) -> str | None:
    """The run's `backend` (its run.json, written at launch)."""
    record = read_json(RunFolder(paths.run_dir(run_id, manifest.runs[run_id].name)).run_json) or {}
    return ((record.get("run") or {}).get("spec") or {}).get("backend")


def forks_preloaded(paths: SweepPaths, manifest: Manifest, run_id: str) -> bool:
    """The run's backend trains on what the preloaded worker has imported (`Backend.preloaded`,
    asked through the spec's catalog: executors import no backend)."""
    from cancelctl.spec.backends import is_backend, resolve_backend

    name = run_backend(paths, manifest, run_id)
    return name is not None and is_backend(name) and resolve_backend(name).preloaded


def worker_command(folder: Path, fd: int) -> list[str]:
    """Its command line names the sweep's submitit folder, as the controllers' does (so do its forks)."""
    return [sys.executable, "-u", "-m", "cancelctl.jobs.zygote", str(folder), str(fd)]


class PreloadedWorker:
    """The driver's end of `python -u -m cancelctl.jobs.zygote FOLDER FD` (its protocol is there). A
    worker that ends or stops answering is `broken`: the runs after it start in fresh interpreters."""

    def __init__(self, folder: Path) -> None:
        ours, theirs = socket.socketpair()
        with _sigint_ignored():  # as the controllers it forks were started (SIGINT ignored)
            self.proc = subprocess.Popen(worker_command(folder, theirs.fileno()), pass_fds=[theirs.fileno()])
        theirs.close()
        self.sock, self.ready, self.broken, self._pending = ours, False, False, b""

    def wait_ready(self, timeout_s: float) -> bool:
        try:
            self.ready = self.ready or self._message(timeout_s) is not None
        except (EOFError, OSError):
            self._give_up("it ended while importing")
        return self.ready

    def fork(self, env: dict[str, str], cwd: str) -> int | None:
        """The pid of a controller forked with `env` and `cwd`, or None (start this run afresh)."""
        if not self.ready or self.broken:
            return None
        try:
            self.sock.sendall(json.dumps({"env": env, "cwd": cwd}).encode() + b"\n")
            answer = self._message(FORK_ANSWER_S)
        except (EOFError, OSError) as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        if answer is None or "pid" not in answer:
            self._give_up((answer or {}).get("error", f"no answer in {FORK_ANSWER_S:.0f} s"))
            return None
        return int(answer["pid"])

    def close(self) -> None:
        """End of file to the worker: it exits; the runs it forked go on. One still importing has
        forked nothing and reads nothing yet: it is killed."""
        self.sock.close()
        if not self.ready:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        try:
            self.proc.wait(WORKER_EXIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _message(self, timeout_s: float) -> dict | None:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                return None
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the preloaded worker ended")
            self._pending += data
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def _give_up(self, why: str) -> None:
        log.warning("preloaded worker: %s; runs start in fresh interpreters", why)
        self.broken = True
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()  # one that never answered must not fork a run late


class ForkedController:
    """A controller the worker forked, as submitit's `LocalJob` polls a `subprocess.Popen`: the worker
    reaps it, so the driver sees only whether it still runs (by pid and start), not its status."""

    def __init__(self, pid: int) -> None:
        self.pid, self.start = pid, process_start(pid)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not same_process_alive(self.pid, self.start):
            self.returncode = 0
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)


def _until_one_ends(jobs: list, timeout_s: float) -> None:
    """Sleep until one of `jobs` (submitit LocalJobs this driver started) has ended, at most `timeout_s`:
    the next queued run starts within EXIT_CHECK_S of a slot freeing, not up to a whole interval later."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(job.done() for job in jobs):
            return
        time.sleep(EXIT_CHECK_S)


@contextlib.contextmanager
def _signals_deferred(signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """Signals that land inside the block are delivered as it ends, to the handlers in place before
    it: starting a run (a fork answered over a socket, a Popen) and recording its process in the
    manifest happen together or not at all."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    # a handler installed outside Python (getsignal: None) cannot be put back, so it is left alone
    previous = {signum: signal.signal(signum, lambda signum, frame: received.append(signum))
                for signum in signums if signal.getsignal(signum) is not None}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)


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


def _submitit_local_executor():
    import submitit

    class SubmititLocalExecutor(submitit.LocalExecutor):
        """submitit's local executor with cancelctl's job entry (fast exit after the result); with a
        `worker` set, the run's controller is forked from it with the environment submitit gives one."""

        worker: PreloadedWorker | None = None

        @property
        def _submitit_command_str(self) -> str:
            return " ".join([self.python, f"-u -m cancelctl.jobs {LOCAL_PROCESS_ENTRY}", shlex.quote(str(self.folder))])

        def _submit_command(self, command: str):
            pid = None if self.worker is None else self.worker.fork(controller_env(self.parameters, command), os.getcwd())
            if pid is None:
                return super()._submit_command(command)
            ntasks = self.parameters.get("tasks_per_node", 1)
            return submitit.LocalJob(folder=self.folder, job_id=str(pid), process=ForkedController(pid),
                                                 tasks=list(range(ntasks)))

    return SubmititLocalExecutor


def controller_env(parameters: dict, command: str) -> dict[str, str]:
    """The environment `submitit.local.local.start_controller` starts a controller with (no GPUs, no
    setup commands: what this executor submits)."""
    return dict(
        os.environ,
        SUBMITIT_LOCAL_NTASKS=str(parameters.get("tasks_per_node", 1)),
        SUBMITIT_LOCAL_COMMAND=command,
        SUBMITIT_LOCAL_TIMEOUT_S=str(int(60 * parameters.get("timeout_min", 2.0))),
        SUBMITIT_LOCAL_SIGNAL_DELAY_S=str(int(parameters.get("signal_delay_s", 30))),
        SUBMITIT_LOCAL_NODEID="0",
        SUBMITIT_LOCAL_JOB_NUM_NODES="1",
        SUBMITIT_STDERR_TO_STDOUT="1" if parameters.get("stderr_to_stdout", False) else "",
        SUBMITIT_EXECUTOR="local",
        CUDA_VISIBLE_DEVICES="",
        SUBMITIT_LOCAL_WITH_SHELL="",
    )



if __name__ == "__main__":
    sys.exit(main(LocalExecutor(), sys.argv[1:]))
