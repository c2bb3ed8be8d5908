"""An interrupted launch leaves nothing behind: `kill -TERM` (or SIGHUP) to `cancelctl sweep`'s own
pid — not its process group, as a batch system or a login node's reaper sends it — ends every run that
launch queued or started as `cancelled` at a step boundary, with no process left, at whatever moment
it lands (while runs start, while they step). In the sweep's first seconds — its file being read, its
launch planning, its manifest just written — a signal submits nothing and the launcher's last line says
what `status` then shows, and a `cancel` is never 'unknown sweep': no run is submitted, each ends
`cancelled`, never `unsubmitted`. Those moments are held, not slept to (`starting.hold_at`)."""

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

from cancelctl.errors import SweepNotFound
from cancelctl.jobs.outcome import read_attempts
from cancelctl.launch import cancel_sweep, launch_sweep, sweep_status
from cancelctl.launch import interrupt
from cancelctl.launch.starting import HOLD_PREFIX
from cancelctl.spec.expand import load_sweep
from cancelctl.workdir import sweep_paths

ARMS = {"grpo": {"algorithm": {"loss": "grpo"}}, "gspo": {"algorithm": {"loss": "gspo"}}}
CANCELLED_BEFORE_START = "cancelled before it started (cancelctl cancel)"
INTERRUPTED_BEFORE_START = "interrupted before it started (its launch got Ctrl-C, SIGTERM or SIGHUP)"


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
    manifest not yet — a slow `sbatch --test-only`) leaves a request and waits for it: the launch
    submits none of its runs, which end `cancelled`, never `unsubmitted`."""
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
    assert all(s.reason == CANCELLED_BEFORE_START for s in states)
    wait_until(lambda: _launch_processes(workdir) == [], 30, "no process left", poll_s=0.05)


# ------------------------------------------------------------------ the first seconds of a sweep


def _sweep_held_at(tmp_path: Path, workdir: Path, path: Path, point: str) -> subprocess.Popen:
    """`cancelctl sweep` started and held at `point` (`starting.hold_at`) until the test removes
    tmp_path/hold (`_release`): a signal or a `cancel` lands exactly there, no sleep involved."""
    gate = tmp_path / "hold"
    gate.touch()
    cli = subprocess.Popen([sys.executable, "-m", "cancelctl.cli", "sweep", str(path), "-w", str(workdir)],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                           preexec_fn=_default_sigint,
                           env={**os.environ, "CANCELCTL_LOCAL_PARALLEL": "2", HOLD_PREFIX + point.upper(): str(gate)})
    wait_until(lambda: (tmp_path / "hold.reached").exists() or cli.poll() is not None, 120, f"the launcher at {point}",
               poll_s=0.02)
    assert cli.poll() is None, cli.communicate()
    return cli


def _default_sigint() -> None:  # SIGINT raises KeyboardInterrupt in the child even where the runner ignores it
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _release(tmp_path: Path) -> None:
    (tmp_path / "hold").unlink()


def _nothing_ran(workdir: Path, paths) -> None:
    assert _launch_processes(workdir) == []
    assert not paths.submitit_dir.exists()  # no run was ever started
    assert not list(paths.runs_dir.glob("*/attempts.jsonl")) and not list(paths.runs_dir.glob("*/job.json"))
    assert all(p.stat().st_size == 0 for p in paths.runs_dir.glob("*/metrics.jsonl"))  # no step logged


@pytest.mark.parametrize(("moment", "signum"), [
    ("loading", signal.SIGHUP),  # the process has started, its sweep file not yet read
    ("planning", signal.SIGINT),  # in launch_sweep, no manifest yet
    ("registered", signal.SIGTERM),  # the manifest has just appeared, nothing queued
])
def test_a_signal_during_start_up_submits_nothing_and_leaves_what_the_launcher_says(tmp_path, workdir, moment, signum):
    """A signal in a sweep's first seconds: nothing is submitted, and what `status` shows afterwards is
    what the launcher said — no run recorded (unknown sweep), or every run `cancelled` with the reason
    that it was interrupted before it started, never `unsubmitted` with no reason."""
    path = write_sweep(tmp_path, "startup", arms=ARMS, seeds=(0,), steps=100_000)
    sweep = load_sweep(path)
    paths = sweep_paths(workdir, sweep.name)
    cli = _sweep_held_at(tmp_path, workdir, path, moment)
    try:
        os.kill(cli.pid, signum)
        out, err = cli.communicate(timeout=90)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    name = signal.Signals(signum).name
    assert cli.returncode == 128 + signum and "Traceback" not in err, (cli.returncode, out, err)
    _nothing_ran(workdir, paths)
    if moment == "registered":
        assert f"sweep startup interrupted ({name}) before it submitted any run: 2 cancelled;" in err, err
        states = sweep_status(workdir, sweep.name)
        assert [(s.state, s.reason) for s in states] == [("cancelled", INTERRUPTED_BEFORE_START)] * 2
        assert paths.store.load().submissions == {}
    else:
        assert f"sweep startup interrupted ({name}) before it recorded any run: nothing was submitted;" in err, err
        with pytest.raises(SweepNotFound):
            sweep_status(workdir, sweep.name)


@pytest.mark.parametrize("moment", ["loading", "planning", "registered"])
def test_cancel_right_after_sweep_starts_stops_it_before_anything_is_submitted(tmp_path, workdir, moment):
    """`cancel` in a sweep's first seconds — before its file is validated, while it plans, just after
    its manifest appears — is never 'unknown sweep': it waits for the launch to record its runs, which
    end `cancelled` without one being submitted, and `sweep` exits 3 saying so."""
    path = write_sweep(tmp_path, "early", arms=ARMS, seeds=(0,), steps=100_000)
    sweep = load_sweep(path)
    paths = sweep_paths(workdir, sweep.name)
    cli = _sweep_held_at(tmp_path, workdir, path, moment)
    cancel = None
    try:
        cancel = subprocess.Popen([sys.executable, "-m", "cancelctl.cli", "cancel", sweep.name, "-w", str(workdir)],
                                  cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: paths.cancel_request.exists() or cancel.poll() is not None, 120, "the cancel request",
                   poll_s=0.02)
        assert cancel.poll() is None, cancel.communicate()  # it waits for the launch it cancelled
        _release(tmp_path)
        cancel_out, cancel_err = cancel.communicate(timeout=90)
        out, err = cli.communicate(timeout=90)
    finally:
        for proc in (cli, cancel):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert cancel.returncode == 0 and "early: cancelled 0 jobs" in cancel_out, (cancel_out, cancel_err)
    assert cli.returncode == 3 and "early: 2 run(s) cancelled" in err and "Traceback" not in err, (out, err)
    states = sweep_status(workdir, sweep.name)
    assert [(s.state, s.reason) for s in states] == [("cancelled", CANCELLED_BEFORE_START)] * 2
    assert paths.store.load().submissions == {}
    _nothing_ran(workdir, paths)
