"""An interrupted launch leaves nothing behind: `kill -TERM` (or SIGHUP) to `cancelctl sweep`'s own
pid — not its process group, as a batch system or a login node's reaper sends it — ends every run that
launch queued or started as `cancelled` at a step boundary, with no process left, at whatever moment
it lands (while runs start, while they step); `cancel` during start-up or before the sweep's manifest
exists cancels, never leaves `unsubmitted`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from polling import wait_until
from sweep_files import write_sweep

from cancelctl.jobs.outcome import read_attempts
from cancelctl.launch import cancel_sweep, launch_sweep, sweep_status
from cancelctl.launch import interrupt
from cancelctl.spec.expand import load_sweep
from cancelctl.workdir import sweep_paths

ARMS = {"grpo": {"algorithm": {"loss": "grpo"}}, "gspo": {"algorithm": {"loss": "gspo"}}}


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _launch_processes(workdir: Path) -> list[int]:
    """Every process of a launch in `workdir` still alive: run processes (attempts.jsonl) and the
    submitit controllers (their command line names the work dir)."""
    pids = set()
    for attempts in workdir.glob("sweeps/*/runs/*/attempts.jsonl"):
        pids.update(a["pid"] for a in read_attempts(attempts.parent) if a.get("event") == "start")
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(workdir) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    pids.add(int(proc.name))
            except OSError:
                pass
    return sorted(pid for pid in pids if _alive(pid) and pid != os.getpid())


@pytest.mark.parametrize("moment", ["a run starting", "runs stepping"])
def test_sigterm_to_the_launcher_ends_every_run_of_its_launch_cancelled(tmp_path, workdir, moment):
    path = write_sweep(tmp_path, "term", arms=ARMS, seeds=(0, 1), steps=100_000)  # 4 runs, 2 at a time
    sweep = load_sweep(path)
    paths = sweep_paths(workdir, sweep.name)
    cli = subprocess.Popen([sys.executable, "-m", "cancelctl.cli", "sweep", str(path), "-w", str(workdir)],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                           env={**os.environ, "CANCELCTL_LOCAL_PARALLEL": "2"})
    try:
        if moment == "a run starting":  # its controller is up, the run itself still importing
            wait_until(lambda: list(workdir.glob("sweeps/*/submitit/local/*")), 120, "a run's controller", poll_s=0.05)
        else:
            wait_until(lambda: sum((paths.run_dir(r.run_id, r.name).joinpath("metrics.jsonl").exists()) for r in sweep.runs) == 2
                       and sum((s.step or 0) >= 3 for s in sweep_status(workdir, sweep.name)) == 2, 120, "two runs stepping",
                       poll_s=0.05)
        os.kill(cli.pid, signal.SIGTERM)  # the launcher alone: no run gets a signal from the terminal
        out, err = cli.communicate(timeout=90)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    assert cli.returncode == 128 + signal.SIGTERM and "interrupted (SIGTERM)" in err and "Traceback" not in err, (out, err)
    assert _launch_processes(workdir) == []  # nothing left alive, at once
    states = sweep_status(workdir, sweep.name)  # every run was queued by then: each ends cancelled
    assert [s.state for s in states] == ["cancelled"] * 4, repr([(s.name, s.state, s.reason) for s in states])
    steps = {s.name: s.step for s in states}
    time.sleep(2.0)
    assert {s.name: s.step for s in sweep_status(workdir, sweep.name)} == steps  # no run steps on
    assert not any(paths.run_dir(s.run_id, s.name).joinpath("result.json").exists() for s in states)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped exception, on purpose
def test_a_signal_whose_exception_a_finalizer_dropped_is_not_lost():
    """A handler's exception raised while a `__del__` runs is printed and dropped by Python (what
    lost a SIGTERM to the launcher); the signal is recorded, and the next tick raises it."""

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here, inside the finalizer

    with interrupt.signals_interrupt():
        Finalized()  # collected at once: the Interrupted raised in its __del__ is dropped
        with pytest.raises(interrupt.Interrupted) as caught:
            interrupt.raise_if_interrupted()
    assert caught.value.signum == signal.SIGTERM
    interrupt.raise_if_interrupted()  # outside the block: nothing pending


def test_cancel_while_runs_start_and_before_the_manifest_exists_cancels_them(tmp_path, workdir, monkeypatch):
    """`cancel` arriving while the first launch still plans (its folder and submit lock exist, its
    manifest not yet — a slow `sbatch --test-only`) waits for it and cancels what it queued; runs
    stopped before their first step end `cancelled`, never `unsubmitted`."""
    from cancelctl.executors.local import LocalExecutor

    path = write_sweep(tmp_path, "early", arms=ARMS, seeds=(0,), steps=100_000)
    sweep = load_sweep(path)
    planning = threading.Event()

    def slow_test_submission(self, paths, plan):
        planning.set()
        time.sleep(2.0)

    monkeypatch.setattr(LocalExecutor, "test_submission", slow_test_submission)
    launcher = threading.Thread(target=launch_sweep, args=(sweep,), kwargs=dict(workdir=workdir, executor="local", wait=False))
    launcher.start()
    assert planning.wait(30)
    assert not sweep_paths(workdir, sweep.name).store.exists()  # no manifest yet
    cancel_sweep(workdir, sweep.name)  # not "unknown sweep"
    launcher.join(60)
    states = wait_until(lambda: [s for s in sweep_status(workdir, sweep.name) if not s.active] or None, 60, "runs to end", poll_s=0.05)
    assert [s.state for s in states] == ["cancelled", "cancelled"], [(s.name, s.state, s.reason) for s in states]
    assert all("unsubmitted" not in s.reason for s in states)
    wait_until(lambda: _launch_processes(workdir) == [], 30, "no process left", poll_s=0.05)
