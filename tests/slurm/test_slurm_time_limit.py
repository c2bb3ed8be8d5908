"""A run longer than its time limit, on the CI cluster (.ci/slurm-up.sh): `cluster.time_min` 1 (SLURM's
smallest) and a lab run held 2 s a step (CANCELCTL_TEST_STEP_PAUSE_S, counted in the plan too) that needs
several allocations. Each allocation ends at a step boundary with a checkpoint and a requeue (the
measured deadline, or USR2 at the planned lead); the run completes with every step logged once, in
one MLflow run, after at least three allocations — more time-outs than the plan's count would be
refused by submitit, so the count following the plan is what lets it finish.
"""

from __future__ import annotations

from figures import record_figure
import json
import shutil
import time
import uuid

import pytest
import sweep_files
from slurm_gate import cluster_problem
from sweep_files import TINY_LAB

from cancelctl.backends.lab.step_cost import STEP_PAUSE_ENV
from cancelctl.jobs.outcome import read_attempts
from cancelctl.jobs.time_limit import time_limit_plan
from cancelctl.launch import cancel_sweep, launch_sweep, sweep_status, wait_for_sweep
from cancelctl.spec.expand import load_sweep
from cancelctl.spec.metric_keys import REWARD_KEY
from cancelctl.workdir import RunFolder, sweep_paths

_PROBLEM = cluster_problem()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or "")]

STEPS = 40  # x ~2.2 s: ~90 s of steps, over allocations that leave ~20-38 s each after start-up and the lead


def test_a_run_needing_three_allocations_of_one_minute_completes_each_step_once_in_one_mlflow_run(
        tmp_path, template_db, monkeypatch):
    monkeypatch.setenv(STEP_PAUSE_ENV, "2")  # sbatch passes the environment on to the job
    base = {"executor": "slurm", "lab": {**TINY_LAB, "checkpoint_every": 4}, "cluster": {"time_min": 1, "cpus_per_task": 1}}
    path = sweep_files.write_sweep(tmp_path, f"timelimit-{uuid.uuid4().hex[:6]}", arms={"grpo": {"algorithm": {"loss": "grpo"}}},
                                   seeds=(0,), steps=STEPS, base=base)
    sweep = load_sweep(path)
    run = sweep.runs[0]
    plan = time_limit_plan(run)
    assert plan.allocations >= 3 and plan.max_timeouts > 3, plan  # more than submitit's default count
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(template_db, workdir / "mlflow.db")
    started = time.monotonic()
    try:
        launch_sweep(sweep, workdir=workdir)
        states = wait_for_sweep(workdir, sweep.name, poll_s=3, timeout_s=540)
    finally:
        if any(s.active for s in sweep_status(workdir, sweep.name)):
            cancel_sweep(workdir, sweep.name)
    wall = time.monotonic() - started
    run_dir = sweep_paths(workdir, sweep.name).run_dir(run.run_id, run.name)
    attempts = read_attempts(run_dir)
    ends = [a["outcome"] for a in attempts if a.get("event") == "end"]
    timing = json.loads((run_dir / "timing.json").read_text())
    record_figure(f"time-limit run: {len(ends)} allocations ({ends}) in {wall:.0f} s; plan {plan.to_json()}; measured step "
          f"{timing['step_s']:.2f} s, checkpoint {timing['checkpoint_s']:.3f} s")
    assert [s.state for s in states] == ["completed"], [(s.state, s.reason) for s in states]
    assert ends.count("requeued") >= 2 and ends[-1] == "finished", ends  # >= 3 allocations, each left at a boundary

    steps = [json.loads(line)["step"] for line in RunFolder(run_dir).metrics.read_text().splitlines()]
    assert steps == list(range(STEPS + 1))  # step 0 (the warm start's evaluation) to the last, each once

    from mlflow.tracking import MlflowClient

    from cancelctl.tracking import default_tracking_uri

    client = MlflowClient(default_tracking_uri(workdir))
    experiment = client.get_experiment_by_name(sweep.name)
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    history = [m.step for m in client.get_metric_history(runs[0].info.run_id, REWARD_KEY)]
    assert len(history) == len(set(history)) and set(range(1, STEPS + 1)) <= set(history), history  # each step once
