"""The stall watchdog on the CI cluster (.ci/slurm-up.sh): a lab run whose training process (the pid its
run folder's job.json names, on this machine's node) is frozen with SIGSTOP at a chosen step is caught
within its limit, its stacks saved, requeued with `scontrol requeue`, and completes with every step
logged once, in one MLflow run tagged with the stall; a run whose steps slow down 5x is left alone."""

from __future__ import annotations

from figures import record_figure
import uuid

import pytest
import sweep_files
from slurm_gate import cluster_problem
from stall_runs import (
    FAST_STALL,
    STEP_PAUSE_S,
    Throttle,
    freeze_at_step,
    kill_if_frozen,
    median,
    stall_ends,
    stall_to_requeue_s,
    step_times,
    steps_logged,
    training_process,
)
from polling import wait_until

from cancelctl.backends.lab.step_cost import STEP_PAUSE_ENV
from cancelctl.jobs.watchdog import py_spy
from cancelctl.launch import cancel_sweep, launch_sweep, sweep_status, wait_for_sweep
from cancelctl.spec.expand import load_sweep
from cancelctl.workdir import sweep_paths

_PROBLEM = cluster_problem()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or "")]

STEPS = 12
FREEZE_AT = 5


def _one_run(tmp_path, workdir, steps: int = STEPS):
    base = {"executor": "slurm", "cluster": {"cpus_per_task": 1}, "monitor": {"stall": FAST_STALL}}
    path = sweep_files.write_sweep(tmp_path, f"stall-{uuid.uuid4().hex[:6]}", arms={"grpo": {"algorithm": {"loss": "grpo"}}},
                                   seeds=(0,), steps=steps, base=base)
    sweep = load_sweep(path)
    run = sweep.runs[0]
    launch_sweep(sweep, workdir=workdir)
    return sweep, sweep_paths(workdir, sweep.name).run_dir(run.run_id, run.name)


def _finish(workdir, sweep):
    try:
        return wait_for_sweep(workdir, sweep.name, poll_s=2, timeout_s=420)
    finally:
        if any(s.active for s in sweep_status(workdir, sweep.name)):
            cancel_sweep(workdir, sweep.name)


def test_a_frozen_lab_job_is_caught_its_stacks_saved_requeued_by_slurm_and_completes_each_step_once(
        tmp_path, workdir, monkeypatch):
    monkeypatch.setenv(STEP_PAUSE_ENV, STEP_PAUSE_S)  # sbatch passes the environment on to the job
    sweep, run_dir = _one_run(tmp_path, workdir)
    pid, start, frozen_at = freeze_at_step(run_dir, FREEZE_AT, timeout_s=300)
    try:
        states = _finish(workdir, sweep)
    finally:
        kill_if_frozen(pid, start)
    assert [s.state for s in states] == ["completed"], [(s.state, s.reason) for s in states]
    assert steps_logged(run_dir) == list(range(STEPS + 1))
    (stall,) = stall_ends(run_dir)
    assert stall["requeue"] and stall["step"] >= FREEZE_AT
    caught_s = stall["ts"] - frozen_at
    assert caught_s <= 60 * stall["limit_min"] + 3, (caught_s, stall)
    stacks = (run_dir / stall["stacks"]).read_text()
    assert f"=== process {pid}:" in stacks
    if py_spy() is not None:  # the test extra installs it; without it the frozen process gives /proc's view only
        assert "lab/train.py" in stacks  # py-spy read the frozen process
    assert states[0].stalls == 1 and states[0].attempts == 2

    from mlflow.tracking import MlflowClient

    from cancelctl.tracking import default_tracking_uri
    from cancelctl.tracking.tags import STALLS_TAG

    client = MlflowClient(default_tracking_uri(workdir))
    runs = client.search_runs([client.get_experiment_by_name(sweep.name).experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED" and runs[0].data.tags[STALLS_TAG] == "1"
    (requeue_s,) = stall_to_requeue_s(run_dir)
    record_figure(f"SLURM lab: frozen at step {FREEZE_AT}, caught after {caught_s:.1f} s (limit "
          f"{60 * stall['limit_min']:.1f} s); stall -> requeued attempt started: {requeue_s:.1f} s")


def test_a_slurm_lab_job_whose_steps_slow_down_five_fold_is_never_called_stalled(tmp_path, workdir, monkeypatch):
    monkeypatch.setenv(STEP_PAUSE_ENV, STEP_PAUSE_S)
    sweep, run_dir = _one_run(tmp_path, workdir, steps=14)
    wait_until(lambda: (steps_logged(run_dir) or [-1])[-1] >= 4, 300, "step 4", poll_s=0.05)
    before = median(step_times(run_dir).values())
    try:
        with Throttle(run_dir, factor=5, step_s=before):
            wait_until(lambda: steps_logged(run_dir)[-1] >= 12, 300, "step 12 under the throttle")
        states = _finish(workdir, sweep)
    finally:
        kill_if_frozen(*training_process(run_dir))
    assert median(t for step, t in step_times(run_dir).items() if 6 <= step <= 12) >= 3 * before
    assert [s.state for s in states] == ["completed"], [(s.state, s.reason) for s in states]
    assert stall_ends(run_dir) == [] and states[0].attempts == 1
