"""The stall watchdog on the local executor, on real sweeps of a tiny lab run: its training process (the
pid job.json names) frozen with SIGSTOP at a chosen step is caught within its limit, its stacks saved,
requeued, and the run completes with every step logged once; a run whose steps slow down 5x is left
alone; with no retries left the run fails naming the stall."""

from __future__ import annotations

from figures import record_figure
import json
import uuid

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
from sweep_files import write_sweep

from cancelctl.backends.lab.step_cost import STEP_PAUSE_ENV
from cancelctl.jobs.watchdog import py_spy
from cancelctl.launch import cancel_sweep, launch_sweep, sweep_status, wait_for_sweep
from cancelctl.spec.expand import load_sweep
from cancelctl.workdir import sweep_paths

STEPS = 12
FREEZE_AT = 5


def _one_run(tmp_path, workdir, stall: dict, steps: int = STEPS):
    path = write_sweep(tmp_path, f"stall-{uuid.uuid4().hex[:6]}", arms={"grpo": {"algorithm": {"loss": "grpo"}}},
                       seeds=(0,), steps=steps, base={"monitor": {"stall": stall}})
    sweep = load_sweep(path)
    run = sweep.runs[0]
    launch_sweep(sweep, workdir=workdir, wait=False)  # a detached driver: the test freezes the run meanwhile
    return sweep, sweep_paths(workdir, sweep.name).run_dir(run.run_id, run.name)


def _finish(workdir, sweep, timeout_s: float = 240):
    try:
        return wait_for_sweep(workdir, sweep.name, poll_s=0.5, timeout_s=timeout_s)
    finally:
        if any(s.active for s in sweep_status(workdir, sweep.name)):
            cancel_sweep(workdir, sweep.name)


def test_a_frozen_lab_run_is_caught_within_its_limit_its_stacks_saved_requeued_and_completes_each_step_once(
        tmp_path, workdir, monkeypatch):
    monkeypatch.setenv(STEP_PAUSE_ENV, STEP_PAUSE_S)
    sweep, run_dir = _one_run(tmp_path, workdir, FAST_STALL)
    pid, start, frozen_at = freeze_at_step(run_dir, FREEZE_AT, timeout_s=180)
    try:
        states = _finish(workdir, sweep)
    finally:
        kill_if_frozen(pid, start)
    assert [s.state for s in states] == ["completed"], [(s.state, s.reason) for s in states]
    assert steps_logged(run_dir) == list(range(STEPS + 1))  # each step once, the frozen one included
    (stall,) = stall_ends(run_dir)
    assert stall["requeue"] and stall["step"] >= FREEZE_AT
    caught_s = stall["ts"] - frozen_at
    assert caught_s <= 60 * stall["limit_min"] + 3, (caught_s, stall)  # within its limit (a poll and the dump)
    stacks = (run_dir / stall["stacks"]).read_text()
    assert f"=== process {pid}:" in stacks
    if py_spy() is not None:  # the test extra installs it; without it the frozen process gives /proc's view only
        assert "lab/train.py" in stacks  # py-spy read the frozen process
    assert states[0].stalls == 1 and "1 stall(s), the latest stalled at step" in states[0].reason
    (requeue_s,) = stall_to_requeue_s(run_dir)
    record_figure(f"local lab: frozen at step {FREEZE_AT}, caught after {caught_s:.1f} s (limit "
          f"{60 * stall['limit_min']:.1f} s); stall -> requeued attempt started: {requeue_s:.1f} s")


def test_a_lab_run_whose_steps_slow_down_five_fold_is_never_called_stalled(tmp_path, workdir, monkeypatch):
    monkeypatch.setenv(STEP_PAUSE_ENV, STEP_PAUSE_S)
    sweep, run_dir = _one_run(tmp_path, workdir, FAST_STALL, steps=14)
    wait_until(lambda: (steps_logged(run_dir) or [-1])[-1] >= 4, 180, "step 4", poll_s=0.05)
    before = median(step_times(run_dir).values())
    try:
        with Throttle(run_dir, factor=5, step_s=before):
            wait_until(lambda: steps_logged(run_dir)[-1] >= 12, 240, "step 12 under the throttle")
        states = _finish(workdir, sweep)
    finally:
        kill_if_frozen(*training_process(run_dir))
    slowed = median(t for step, t in step_times(run_dir).items() if 6 <= step <= 12)
    assert slowed >= 3 * before, (before, slowed)  # the steps did grow several-fold
    assert [s.state for s in states] == ["completed"], [(s.state, s.reason) for s in states]
    assert stall_ends(run_dir) == [] and states[0].attempts == 1


def test_a_run_stalled_with_no_retries_left_fails_naming_the_stall(tmp_path, workdir, monkeypatch):
    monkeypatch.setenv(STEP_PAUSE_ENV, STEP_PAUSE_S)
    sweep, run_dir = _one_run(tmp_path, workdir, {**FAST_STALL, "retries": 0})
    pid, start, _ = freeze_at_step(run_dir, 2, timeout_s=180)
    try:
        states = _finish(workdir, sweep)
    finally:
        kill_if_frozen(pid, start)
    (stall,) = stall_ends(run_dir)
    assert not stall["requeue"]
    assert [s.state for s in states] == ["failed"] and "stalled at step" in states[0].reason, states[0].reason
    assert "retries used up (0)" in states[0].reason and json.loads((run_dir / "job.json").read_text())["pid"] == pid
    # MLflow says it too: the run closed FAILED (the frozen process could not), its stall counted, stacks kept
    from mlflow import MlflowClient

    from cancelctl.tracking import default_tracking_uri
    from cancelctl.tracking.tags import LAST_STALL_TAG, STALLS_TAG

    client = MlflowClient(default_tracking_uri(workdir))
    mlflow_id = json.loads((run_dir / "run.json").read_text())["mlflow_run_id"]
    mlflow_run = wait_until(lambda: (r := client.get_run(mlflow_id)).info.status == "FAILED" and r, 90,
                            "the MLflow run closed FAILED")  # by the watchdog, once the frozen process is dead
    assert mlflow_run.data.tags[STALLS_TAG] == "1" and "stalled at step" in mlflow_run.data.tags[LAST_STALL_TAG]
    assert stall["stacks"].split("/")[-1] in [a.path for a in client.list_artifacts(mlflow_run.info.run_id)]
