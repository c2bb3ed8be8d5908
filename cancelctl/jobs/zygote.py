"""The local executor's preloaded worker: `python -u -m cancelctl.jobs.zygote FOLDER FD`, one per sweep
driver, imports what a lab run imports — torch, MLflow and its SQL store, submitit's runtime, the
lab and the losses, and `torch._dynamo`, which an optimizer's first step imports — computes nothing,
and forks each lab run's processes from there. A fresh interpreter pays ~5 CPU-s for those imports
(`benchmarks/bench_local_preload.py`), as much as a demo run spends training.

A fork reproduces what submitit's local executor starts, process for process:

    controller   `python -m submitit.local._local FOLDER`: submitit's own `Controller` (its pid is the
                 job id; logs, USR2 before the time limit, a requeue restarts the task on exit 144),
                 whose task is forked rather than started from a fresh interpreter
    task         `python -u -m cancelctl.jobs local FOLDER`: `cancelctl.jobs.entry.main`, with the
                 environment and working directory the driver sends, signal handlers reset as exec
                 resets them, stdout and stderr in submitit's log files; it writes its own pid in
                 job.json, claims the fence, tracks to MLflow — all as before

Both stay in the driver's process group (as before: a terminal's Ctrl-C reaches the run itself).
Neither the worker nor a controller runs a torch op, so no thread pool exists to be forked: torch
starts its OpenMP pool at the first parallel op, in the task, which sets its threads (`RunJob`).

Protocol, one JSON line each way on the socket FD: {"ready": true} once imported; then per run
{"env": {...}, "cwd": "..."} -> {"pid": <controller pid>}. End of file ends the worker: it reaps the
controllers that have exited and leaves running ones to finish (they outlive a killed driver).
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

# What a lab run imports, found by diffing sys.modules around a whole run; verl stays out.
PRELOAD = (
    "torch", "torch._dynamo", "torch.profiler._cupti_monitor", "torch.utils.serialization",
    "mlflow", "mlflow.store.tracking.sqlalchemy_store", "mlflow.store.tracking.sqlalchemy_workspace_store",
    "sqlalchemy.dialects.sqlite", "alembic.command", "alembic.config", "email.policy",
    "submitit.core.submission", "submitit.local.local",
    "cancelctl.backends.lab.train", "cancelctl.jobs.entry", "cancelctl.jobs.runjob", "cancelctl.jobs.raycluster",
    "cancelctl.jobs.hardware", "cancelctl.jobs.preemption", "cancelctl.jobs.monitor", "cancelctl.spec.run",
    "cancelctl.tracking", "cancelctl.tracking.runfiles", "cancelctl.tracking.tags",
)
TASK_ENTRY = ["-u", "-m", "cancelctl.jobs"]  # the task command's words after the interpreter, forked in process
PICKLE_POLL_S = 0.01  # submitit's own wait polls each second: a forked task starts before the pickle is moved
PICKLE_WAIT_S = 60.0  # submitit's
REAP_S = 0.2  # exited controllers are reaped this often


def preload() -> None:
    import losses

    for name in (*PRELOAD, *sorted(set(losses._EXPORTS.values()))):
        importlib.import_module(name)


def main(argv: list[str]) -> None:
    folder, fd = argv[0], int(argv[1])
    sock = socket.socket(fileno=fd)
    preload()
    _send(sock, {"ready": True})
    pending = b""
    while True:
        readable, _, _ = select.select([sock], [], [], REAP_S)
        _reap()
        if not readable:
            continue
        data = sock.recv(65536)
        if not data:  # the driver is gone or done
            break
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            try:
                _send(sock, {"pid": _fork_controller(folder, request, sock)})
            except OSError as exc:  # fork failed (no memory, pid limit): the driver starts this run afresh
                _send(sock, {"error": f"{type(exc).__name__}: {exc}"})
    _reap()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # tearing down torch and MLflow would cost seconds for nothing


def _send(sock: socket.socket, message: dict) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _fork_controller(folder: str, request: dict, sock: socket.socket) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        sock.close()
        _as_if_exec(request["env"], request["cwd"])
        from submitit.local.local import Controller

        class ForkingController(Controller):
            def start_tasks(self) -> None:
                if self.command[1:4] != TASK_ENTRY:  # not cancelctl's job entry: start it as submitit does
                    super().start_tasks()
                    return
                from submitit.core.utils import JobPaths

                self.folder.mkdir(exist_ok=True)
                paths = [JobPaths(self.folder, self.pid, k) for k in range(self.ntasks)]
                self.stdouts = [p.stdout.open("a") for p in paths]
                self.stderrs = self.stdouts if self.stderr_to_stdout else [p.stderr.open("a") for p in paths]
                for k in range(self.ntasks):
                    env = dict(os.environ, SUBMITIT_LOCAL_LOCALID=str(k), SUBMITIT_LOCAL_GLOBALID=str(k),
                               SUBMITIT_LOCAL_JOB_ID=self.pid)
                    self.tasks.append(ForkedTask.start(self.command[4:], env, self.stdouts[k], self.stderrs[k],
                                                       paths[k].submitted_pickle))

        ForkingController(Path(folder)).run()
        code = 0
    except BaseException:  # noqa: BLE001 - shown where the controller's output goes (the driver's)
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _as_if_exec(env: dict[str, str], cwd: str | None) -> None:
    """What exec and Python's start-up would give a fresh interpreter: signals with a handler back to
    the default (ignored ones stay ignored), SIGINT to KeyboardInterrupt unless ignored, the given
    environment and working directory, and numpy's global generator seeded afresh (`random`
    reseeds itself after a fork)."""
    for signum in signal.valid_signals():
        if callable(signal.getsignal(signum)):
            signal.signal(signum, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) == signal.SIG_DFL:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


class ForkedTask:
    """A forked task as submitit's `Controller` uses a `subprocess.Popen`: poll, send_signal."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    @classmethod
    def start(cls, args: list[str], env: dict[str, str], stdout, stderr, submitted_pickle: Path) -> ForkedTask:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return cls(pid)
        try:
            os.dup2(stdout.fileno(), 1)
            os.dup2(stderr.fileno(), 2)
            _as_if_exec(env, None)
            from cancelctl.jobs import entry

            sys.argv = [str(Path(entry.__file__).with_name("__main__.py")), *args]
            deadline = time.monotonic() + PICKLE_WAIT_S
            while not submitted_pickle.exists() and time.monotonic() < deadline:
                time.sleep(PICKLE_POLL_S)
            entry.main(args)  # ends the process (os._exit)
        except BaseException:  # noqa: BLE001 - into the run's log, as a fresh interpreter's traceback would be
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(1)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass


if __name__ == "__main__":  # run from the imported module, not from a second copy of it named __main__
    from cancelctl.jobs.zygote import main as zygote_main

    zygote_main(sys.argv[1:])
