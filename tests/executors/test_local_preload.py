"""Lab runs forked from the local executor's preloaded worker (`cancelctl.jobs.zygote`): the processes
submitit's local executor would start, without importing torch and MLflow again for each run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import types

from sweep_files import write_sweep

from cancelctl.executors import local
from cancelctl.jobs import zygote
from cancelctl.jobs.outcome import read_attempts
from cancelctl.launch import launch_sweep
from cancelctl.spec.expand import load_sweep
from cancelctl.tracking import collect, default_tracking_uri
from cancelctl.workdir import RunFolder, sweep_paths


def _forks(monkeypatch) -> list[int]:
    """The controller pids the worker forked (a spy on the driver's end)."""
    pids: list[int] = []
    fork = local.PreloadedWorker.fork

    def spy(self, env, cwd):
        pid = fork(self, env, cwd)
        if pid is not None:  # None: this run starts afresh
            pids.append(pid)
        return pid

    monkeypatch.setattr(local.PreloadedWorker, "fork", spy)
    return pids


def _launch(tmp_path, workdir, name: str):
    sweep = load_sweep(write_sweep(tmp_path, name, seeds=(0, 1), steps=3))
    result = launch_sweep(sweep, workdir=workdir, executor="local")
    paths = sweep_paths(workdir, sweep.name)
    manifest = paths.store.load()
    controllers = {run_id: manifest.latest_submission(run_id)[0].job_id for run_id in manifest.runs}
    runs = {r.run_id: RunFolder(paths.run_dir(r.run_id, r.name)) for r in sweep.runs}
    return result, controllers, runs, paths


def test_lab_runs_are_forked_from_one_worker_each_with_its_own_processes_and_record(tmp_path, workdir, monkeypatch):
    monkeypatch.delenv(local.PRELOAD_ENV, raising=False)
    forked = _forks(monkeypatch)
    result, controllers, runs, paths = _launch(tmp_path, workdir, "forked")
    assert result.ok and [s.state for s in result.states] == ["completed"] * 4, [(s.name, s.reason) for s in result.states]
    assert sorted(forked) == sorted(int(c) for c in controllers.values())  # every run's controller came from the worker
    for run_id, folder in runs.items():
        job = json.loads(folder.job.read_text())
        started = [a for a in read_attempts(folder.path) if a["event"] == "start"]
        assert len(started) == 1 and started[0]["pid"] == job["pid"]
        assert job["job_id"] == controllers[run_id] and job["pid"] not in (int(controllers[run_id]), os.getpid())
        log = (paths.submitit_dir / "local" / f"{controllers[run_id]}_0_log.out").read_text()
        assert "Job completed successfully" in log  # submitit's runtime ran in the forked task, into its log
        assert json.loads(folder.result.read_text())["metrics"]
    assert len({json.loads(f.job.read_text())["pid"] for f in runs.values()}) == 4
    tracked, _ = collect(default_tracking_uri(workdir), "forked")
    assert tracked["state"].tolist() == ["FINISHED"] * 4


def test_without_the_worker_every_run_starts_in_fresh_interpreters(tmp_path, workdir, monkeypatch):
    monkeypatch.setenv(local.PRELOAD_ENV, "0")
    forked = _forks(monkeypatch)
    result, _, _, _ = _launch(tmp_path, workdir, "fresh")
    assert result.ok and forked == []


def test_a_worker_that_cannot_start_leaves_the_runs_to_fresh_interpreters(tmp_path, workdir, monkeypatch, caplog):
    monkeypatch.delenv(local.PRELOAD_ENV, raising=False)
    monkeypatch.setattr(local, "worker_command", lambda folder, fd: ["python3", "-c", "raise SystemExit(3)"])
    forked = _forks(monkeypatch)
    result, _, _, _ = _launch(tmp_path, workdir, "broken")
    assert result.ok and [s.state for s in result.states] == ["completed"] * 4
    assert forked == [] and "preloaded worker: it ended while importing" in caplog.text


def test_the_controller_gets_the_environment_submitit_starts_one_with(tmp_path, monkeypatch):
    import submitit.local.local as submitit_local

    started = {}

    def popen(cmd, shell, env):
        started["env"] = env
        return types.SimpleNamespace(pid=1, poll=lambda: 0)

    monkeypatch.setattr(submitit_local.subprocess, "Popen", popen)
    executor = local._submitit_local_executor()(folder=tmp_path)
    executor.update_parameters(timeout_min=local.LOCAL_TIMEOUT_MIN, signal_delay_s=30)
    submitit_local.LocalExecutor._submit_command(executor, "python -u -m cancelctl.jobs local X")
    assert local.controller_env(executor.parameters, "python -u -m cancelctl.jobs local X") == started["env"]


def test_a_forked_process_starts_as_exec_would_leave_it(tmp_path):
    """Handlers back to the default (ignored signals stay ignored), SIGINT to KeyboardInterrupt, the
    given environment and working directory — what a fresh interpreter would have."""
    read, write = os.pipe()
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2, signal.SIGHUP, signal.SIGINT)}
    # SIGINT handled here, whatever this pytest inherited (a shell's background job starts with it ignored,
    # which a fork, like an exec, rightly keeps)
    signal.signal(signal.SIGINT, lambda *a: None)
    signal.signal(signal.SIGTERM, lambda *a: None)
    signal.signal(signal.SIGUSR2, lambda *a: None)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through the pipe
            try:
                zygote._as_if_exec({"ONLY": "this"}, str(tmp_path))
                seen = {"term": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
                        "usr2": signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL,
                        "hup": signal.getsignal(signal.SIGHUP) == signal.SIG_IGN,
                        "int": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                        "env": dict(os.environ), "cwd": os.getcwd()}
                os.write(write, json.dumps(seen).encode())
            finally:
                os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        seen = json.loads(os.read(read, 65536))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert seen == {"term": True, "usr2": True, "hup": True, "int": True, "env": {"ONLY": "this"}, "cwd": str(tmp_path)}


def test_the_worker_imports_what_a_lab_run_does_and_nothing_of_verl():
    code = ("import sys; from cancelctl.jobs.zygote import preload; preload(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'verl' or m.startswith('losses.verl')), "
            "all(m in sys.modules for m in ('torch._dynamo', 'mlflow', 'cancelctl.backends.lab', 'losses.pg')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "True"]
