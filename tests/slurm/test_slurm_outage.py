"""An outage is not a failure, on the real cluster: jobs run while sacct and squeue stop answering
(a PATH shim in front of the real binaries fails, hangs or garbles them — what a slurmctld restart,
a slurmdbd timeout or a loaded login node look like from the client side). Every verb keeps the last
known state and says so once; `--retry-failed` and `cancel` refuse to decide (exit 1); nothing is
resubmitted, nothing marked, no traceback. Counted from the scheduler itself once the shim is gone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from benchmarks.slurm_shim import set_mode, write_shims
from polling import wait_until
from slurm_gate import cluster_problem
from typer.testing import CliRunner

from cancelctl.cli import app
from cancelctl.executors import slurm as slurm_executor
from cancelctl.executors import slurm_states
from cancelctl.launch import cancel_sweep, launch_sweep, sweep_status
from cancelctl.spec.expand import load_sweep
from cancelctl.workdir import sweep_paths

_PROBLEM = cluster_problem()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or "")]

runner = CliRunner()
LONG = 1_000_000


@pytest.fixture
def shim(tmp_path, monkeypatch):
    """Put sacct/squeue/scancel shims first on PATH; returns a function setting their mode (None: pass through)."""
    folder, mode = tmp_path / "shim", tmp_path / "shim.mode"
    write_shims(folder, mode, ("sacct", "squeue", "scancel"), hang_s=30)  # `hang` outlives the 2 s query timeout
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(slurm_executor, "ACCOUNTING_GRACE_S", 0.0)  # past the grace at once
    monkeypatch.setattr(slurm_states, "QUERY_TIMEOUT_S", 2)

    return lambda value: set_mode(mode, value)


def _decisions(workdir: Path, sweep: str) -> dict:
    """What the manifest says was decided: submissions, queueing and cancels (not when it was last read)."""
    manifest = json.loads(sweep_paths(workdir, sweep).manifest.read_text())
    return {"submissions": manifest["submissions"], "cancelled_at": manifest["cancelled_at"],
            "runs": {k: {f: v[f] for f in ("submissions", "queued_at", "cancelled_at")} for k, v in manifest["runs"].items()}}


def test_an_outage_keeps_running_runs_running_and_no_verb_decides_on_silence(tmp_path, workdir, shim):
    import sweep_files

    base = {"executor": "slurm", "lab": dict(sweep_files.TINY_LAB), "cluster": {"time_min": 30, "cpus_per_task": 1}}
    path = sweep_files.write_sweep(tmp_path, f"outage-{os.getpid()}-{tmp_path.name[-6:]}",
                                   arms={"grpo": {"algorithm": {"loss": "grpo"}}}, seeds=(0,), steps=LONG, base=base)
    sweep = load_sweep(path)
    result = launch_sweep(sweep, workdir=workdir)
    try:
        wait_until(lambda: all(s.state == "running" and (s.step or 0) >= 1 for s in sweep_status(workdir, sweep.name)),
                   120, "the run to step")
        manifest_before = _decisions(workdir, sweep.name)
        for mode in ("fail", "hang", "garbage"):
            shim(mode)
            states = sweep_status(workdir, sweep.name)
            assert [s.state for s in states] == ["running"], (mode, [(s.state, s.reason) for s in states])
            assert states.unreachable and states.unreachable.startswith("SLURM unreachable: sacct: "), states.unreachable
            assert "states as of" in states.unreachable

            shown = runner.invoke(app, ["status", sweep.name, "-w", str(workdir)])
            assert shown.exit_code == 0 and shown.exception is None, shown.output
            assert "running" in shown.output and shown.output.count("SLURM unreachable") == 1, shown.output

            retried = runner.invoke(app, ["sweep", str(path), "-w", str(workdir), "--retry-failed"])
            assert retried.exit_code == 1 and "Traceback" not in retried.output, retried.output
            assert "--retry-failed resubmits nothing until SLURM answers" in retried.output

            refused = runner.invoke(app, ["cancel", sweep.name, "-w", str(workdir)])
            assert refused.exit_code == 1 and "nothing was cancelled" in refused.output, refused.output
            assert isinstance(refused.exception, SystemExit)  # the one handler's exit, not an exception
        assert _decisions(workdir, sweep.name) == manifest_before  # nothing submitted, queued or marked cancelled

        shim(None)  # SLURM answers again
        states = sweep_status(workdir, sweep.name)
        assert [s.state for s in states] == ["running"] and states.unreachable is None
        acct = slurm_states.task_states(result.job_ids, {result.job_ids[0]: 1})
        assert len(acct) == 1  # one job for the run: nothing was submitted during the outage
    finally:
        shim(None)
        cancel_sweep(workdir, sweep.name)
    assert [s.state for s in sweep_status(workdir, sweep.name)] == ["cancelled"]


# ---------------------------------------------------------------------------------- sbatch's answer lost

@pytest.fixture
def sbatch_shim(tmp_path, monkeypatch):
    """sbatch, sacct, squeue and scancel shims; returns set_mode(value, command=None)."""
    from cancelctl.executors import slurm_commands

    folder, mode = tmp_path / "shim", tmp_path / "shim.mode"
    write_shims(folder, mode, ("sbatch", "sacct", "squeue", "scancel"), hang_s=30)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(slurm_executor, "ACCOUNTING_GRACE_S", 0.0)
    monkeypatch.setattr(slurm_states, "QUERY_TIMEOUT_S", 2)
    monkeypatch.setattr(slurm_commands, "SBATCH_TIMEOUT_S", 3)  # `queued-then-hang` outlives it
    yield lambda value, command=None: set_mode(mode, value, command)
    set_mode(mode, None)
    for command in ("sbatch", "sacct", "squeue"):
        set_mode(mode, None, command)


def _one_run_sweep(tmp_path, label: str, steps: int = LONG):
    import sweep_files

    base = {"executor": "slurm", "lab": dict(sweep_files.TINY_LAB), "cluster": {"time_min": 30, "cpus_per_task": 1}}
    return sweep_files.write_sweep(tmp_path, f"{label}-{os.getpid()}-{tmp_path.name[-6:]}",
                                   arms={"grpo": {"algorithm": {"loss": "grpo"}}}, seeds=(0,), steps=steps, base=base)


def _jobs_named(workdir: Path, sweep: str) -> list[str]:
    """Every job SLURM ever queued for this sweep's submissions (sacct by job name): the duplicates count."""
    manifest = json.loads(sweep_paths(workdir, sweep).manifest.read_text())
    names = [s["job_name"] for s in manifest["submissions"].values() if s["job_name"]]
    found = []
    for name in names:
        out = slurm_commands_run(["sacct", "-X", "-n", "-P", "-S", "now-1hour", "--name", name, "-o", "JobID"])
        found.extend(line for line in out.splitlines() if line.strip())
    return found


def slurm_commands_run(cmd: list[str]) -> str:
    import subprocess

    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout


@pytest.mark.parametrize("lost", ["queued-then-timeout", "queued-then-hang", "queued-then-banner", "queued-then-killed"])
def test_a_job_queued_whose_sbatch_answer_was_lost_is_found_by_name_and_never_submitted_twice(
        tmp_path, workdir, sbatch_shim, lost):
    path = _one_run_sweep(tmp_path, "lost")
    sweep = load_sweep(path)
    sbatch_shim(lost, "sbatch")
    result = launch_sweep(sweep, workdir=workdir)
    try:
        assert not result.failed and not result.errors, result.errors  # never FAILED: it is queued
        assert len(result.job_ids) == 1 and result.submitted == [sweep.runs[0].run_id]
        sbatch_shim(None, "sbatch")
        again = runner.invoke(app, ["sweep", str(path), "-w", str(workdir)])
        assert again.exit_code == 0 and "submitted 0" in again.output, again.output
        wait_until(lambda: _jobs_named(workdir, sweep.name), 30, "accounting to record the job")
        assert len(_jobs_named(workdir, sweep.name)) == 1  # one allocation, one training
        states = sweep_status(workdir, sweep.name)
        assert states[0].state in ("pending", "running") and states[0].job_id == f"{result.job_ids[0]}_0"
    finally:
        sbatch_shim(None, "sbatch")
        cancel_sweep(workdir, sweep.name)


def test_while_the_lookup_cannot_answer_a_lost_submission_stays_pending_and_nothing_is_resubmitted(
        tmp_path, workdir, sbatch_shim):
    path = _one_run_sweep(tmp_path, "lostdark")
    sweep = load_sweep(path)
    sbatch_shim("queued-then-timeout", "sbatch")
    for query in ("sacct", "squeue"):  # they do not answer: the lookup by name cannot tell
        sbatch_shim("fail", query)
    result = launch_sweep(sweep, workdir=workdir)
    try:
        assert not result.failed and not result.submitted and not result.job_ids
        assert any("pending, not failed: sbatch's answer was lost" in w for w in result.warnings), result.warnings
        before = _decisions(workdir, sweep.name)
        sbatch_shim(None, "sbatch")  # sbatch works again; sacct/squeue still do not
        for argv in (["status", sweep.name], ["sweep", str(path)], ["list"], ["sweep", str(path), "--dry-run"]):
            shown = runner.invoke(app, [*argv, "-w", str(workdir)])
            assert shown.exit_code == 0 and "Traceback" not in shown.output, (argv, shown.output)
            assert "sbatch answer was lost" in shown.output and "FAILED" not in shown.output, (argv, shown.output)
        retried = runner.invoke(app, ["sweep", str(path), "-w", str(workdir), "--retry-failed"])
        assert retried.exit_code == 1 and "resubmits nothing" in retried.output, retried.output
        states = sweep_status(workdir, sweep.name)
        assert states[0].state == "pending" and "sbatch's answer was lost" in states[0].reason
        assert "the lookup got no answer" in states[0].reason
        assert _decisions(workdir, sweep.name)["runs"] == before["runs"]  # nothing resubmitted

        for query in ("sacct", "squeue"):  # SLURM answers: the job is found by its name and adopted
            sbatch_shim(None, query)
        states = sweep_status(workdir, sweep.name)
        assert states[0].state in ("pending", "running") and states[0].job_id and states.unreachable is None
        wait_until(lambda: _jobs_named(workdir, sweep.name), 30, "accounting to record the job")
        assert len(_jobs_named(workdir, sweep.name)) == 1
    finally:
        for command in ("sbatch", "sacct", "squeue"):
            sbatch_shim(None, command)
        cancel_sweep(workdir, sweep.name)


def test_an_unreachable_controller_that_queued_nothing_is_a_failed_submission_once_slurm_says_so(
        tmp_path, workdir, sbatch_shim, monkeypatch):
    path = _one_run_sweep(tmp_path, "lostnone")
    sweep = load_sweep(path)
    sbatch_shim("unreachable-not-queued", "sbatch")  # nothing queued, which only a lookup can tell
    monkeypatch.setattr(slurm_executor, "LOST_ANSWER_GRACE_S", 3600.0)
    first = launch_sweep(sweep, workdir=workdir)
    assert not first.failed and [s.state for s in sweep_status(workdir, sweep.name)] == ["pending"]
    monkeypatch.setattr(slurm_executor, "LOST_ANSWER_GRACE_S", 0.0)  # past the grace: SLURM has no such job
    states = sweep_status(workdir, sweep.name)
    assert states[0].state == "unsubmitted" and "it was not queued" in states[0].reason, states[0].reason
    sbatch_shim(None, "sbatch")
    second = launch_sweep(sweep, workdir=workdir)
    try:
        assert second.submitted == [sweep.runs[0].run_id] and len(second.job_ids) == 1
        wait_until(lambda: _jobs_named(workdir, sweep.name), 30, "accounting to record the job")
        assert len(_jobs_named(workdir, sweep.name)) == 1
    finally:
        cancel_sweep(workdir, sweep.name)


# ---------------------------------------------------------------------------------- a run's own record counts

@pytest.mark.timeout(300)
def test_a_run_that_finished_during_an_outage_counts_as_finished_and_watch_ends(tmp_path, workdir, shim):
    from cancelctl.workdir import RunFolder

    path = _one_run_sweep(tmp_path, "ownrecord", steps=6)
    sweep = load_sweep(path)
    launch_sweep(sweep, workdir=workdir)
    wait_until(lambda: all(s.state == "running" for s in sweep_status(workdir, sweep.name)), 120, "the run to start")
    shim("fail")  # SLURM's last word: running
    run_dir = sweep_status(workdir, sweep.name)[0].run_dir
    wait_until(lambda: RunFolder(run_dir).result.exists(), 180, "the run to write result.json")
    states = sweep_status(workdir, sweep.name)
    assert [s.state for s in states] == ["completed"], [(s.state, s.reason) for s in states]
    assert "1 finished by their own record" in states.unreachable
    watched = runner.invoke(app, ["watch", sweep.name, "-w", str(workdir), "--refresh", "0.2"])
    assert watched.exit_code == 0 and "finished by their own record" in watched.output, watched.output
    for argv in (["list"], ["logs", states[0].name], ["sweep", str(path), "--dry-run"]):
        shown = runner.invoke(app, [*argv, "-w", str(workdir)])
        assert shown.exit_code == 0 and "SLURM unreachable" in shown.output, (argv, shown.output)
    shim(None)


# ---------------------------------------------------------------------------------- a hanging scheduler, watched

def test_watch_draws_the_last_known_states_at_once_while_slurm_hangs_and_says_since_when(tmp_path, workdir, shim,
                                                                                            monkeypatch):
    import io

    from rich.console import Console

    from cancelctl.executors import slurm_view
    from cancelctl.executors.base import Freshness
    from cancelctl.report.live.watch import watch

    monkeypatch.setattr(slurm_states, "QUERY_TIMEOUT_S", 5)
    every_look = Freshness(max_age_s=0.0, wait=False)  # a watcher whose view is always due: it asks each time
    path = _one_run_sweep(tmp_path, "watchhang")
    sweep = load_sweep(path)
    launch_sweep(sweep, workdir=workdir)
    try:
        wait_until(lambda: [s.state for s in sweep_status(workdir, sweep.name)] == ["running"], 120, "the run to start")
        shim("hang")
        out = io.StringIO()
        shown = watch(lambda: sweep_status(workdir, sweep.name, freshness=every_look), title=sweep.name,
                      console=Console(file=out, width=200), refresh_s=0.1, max_refreshes=3)
        assert [r.state for r in shown.view.runs] == ["running"]  # the last known state, drawn
        asking = slurm_view._asking[sweep_paths(workdir, sweep.name).sweep_dir]
        assert asking.is_alive()  # SLURM is still being asked: the watch did not wait for it
        asking.join(30)
        states = sweep_status(workdir, sweep.name, freshness=every_look)
        assert [s.state for s in states] == ["running"] and "no answer since" in states.unreachable, states.unreachable
    finally:
        shim(None)
        cancel_sweep(workdir, sweep.name)
