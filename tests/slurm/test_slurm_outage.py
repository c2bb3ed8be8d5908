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
