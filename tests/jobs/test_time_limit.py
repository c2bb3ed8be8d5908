"""A run's time-limit plan (`cancelctl.jobs.time_limit`): the signal's lead covers one step and one
checkpoint, the allocations follow the run's work, submitit's time-out count follows them, and the
warning when an allocation cannot hold start-up, one step and one checkpoint."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import sweep_files

from cancelctl.backends.lab.step_cost import STEP_PAUSE_ENV, lab_step_cost
from cancelctl.jobs.time_limit import (
    LEAD_MARGIN,
    SUBMITIT_LEAD_S,
    SUBMITIT_TIMEOUTS,
    StepCost,
    plan_time_limit,
)
from cancelctl.spec.expand import load_sweep


def lab_run(tmp_path: Path, *, steps: int, time_min: int, **base):
    path = sweep_files.write_sweep(tmp_path, "t", arms={"a": {}}, seeds=(0,), steps=steps,
                                   base={"executor": "slurm", "cluster": {"time_min": time_min}, **base})
    return load_sweep(path).runs[0]


def cost(step_s: float, checkpoint_s: float, startup_s: float = 30.0, floor: float = 10.0, every: int | None = 10) -> StepCost:
    return StepCost(step_s, checkpoint_s, startup_s, floor, every)


def test_the_lead_covers_a_step_and_a_checkpoint_with_a_margin_above_the_floor():
    assert cost(100, 50).lead_s == LEAD_MARGIN * 150
    assert cost(1, 0.5, floor=90).lead_s == 90


def test_allocations_follow_the_runs_work_and_the_time_out_count_follows_them(tmp_path):
    run = lab_run(tmp_path, steps=100, time_min=1)
    plan = plan_time_limit(run, cost(3.0, 1.0, startup_s=20.0))
    # 100 steps x 3 s + 10 checkpoints x 1 s = 310 s over 60 - 20 - 10 = 30 s an allocation
    assert (plan.lead_s, plan.allocations) == (10, 11)
    assert plan.max_timeouts >= plan.allocations - 1 + 2 > SUBMITIT_TIMEOUTS  # more than submitit's default
    assert plan_time_limit(lab_run(tmp_path, steps=10, time_min=60), cost(3.0, 1.0)).max_timeouts == SUBMITIT_TIMEOUTS


def test_an_allocation_too_short_for_its_lead_still_plans_one_step_each_and_is_warned(tmp_path):
    run = lab_run(tmp_path, steps=12, time_min=1)
    plan = plan_time_limit(run, cost(50.0, 20.0, startup_s=30.0))  # 30 + 50 + 20 > 60
    assert plan.lead_s == 10 and plan.allocations == 12  # at most a tenth of the allocation, above the floor
    long = plan_time_limit(lab_run(tmp_path, steps=12, time_min=600), cost(2000.0, 500.0))
    assert long.lead_s == 3600  # a slow estimate never takes more than a tenth of each allocation
    assert not plan.holds_one_step
    assert "cluster.time_min 1 may not hold start-up (30 s), one step (50 s) and one checkpoint (20 s)" in plan.warning()
    assert "at least 2" in plan.warning()
    assert plan_time_limit(run, cost(5.0, 1.0)).warning() is None


def test_without_an_estimate_the_job_gets_submitits_defaults(tmp_path):
    plan = plan_time_limit(lab_run(tmp_path, steps=10, time_min=60), None)
    assert (plan.lead_s, plan.allocations, plan.max_timeouts, plan.warning()) == (SUBMITIT_LEAD_S, None, SUBMITIT_TIMEOUTS, None)


def test_the_labs_estimate_grows_with_its_size_and_counts_the_test_pause(tmp_path, monkeypatch):
    small = lab_step_cost(lab_run(tmp_path, steps=10, time_min=60))
    big = lab_step_cost(lab_run(tmp_path, steps=10, time_min=60, lab={"d_model": 512, "n_layers": 8, "n_heads": 8}))
    assert big.step_s > 2 * small.step_s and big.checkpoint_s > small.checkpoint_s
    monkeypatch.setenv(STEP_PAUSE_ENV, "2")
    assert lab_step_cost(lab_run(tmp_path, steps=10, time_min=60)).step_s == pytest.approx(small.step_s + 2)


def test_a_token_budget_plans_its_steps_from_a_quarter_filled_cap(tmp_path):
    run = lab_run(tmp_path, steps=1, time_min=1, budget={"gen_tokens": 4 * 2 * 16 * 10, "prompts_per_step": 4})
    plan = plan_time_limit(run, cost(3.0, 1.0, startup_s=20.0, every=None))
    assert plan.allocations == 4  # 40 steps x 3 s over 30 s


def test_planning_imports_no_torch(tmp_path):
    """`plan` and `validate` stay fast: the lab's estimate is arithmetic on its spec."""
    import subprocess

    path = sweep_files.write_sweep(tmp_path, "t", arms={"a": {}}, seeds=(0,), steps=10, base={"executor": "slurm"})
    code = ("import sys; from cancelctl.spec.expand import load_sweep; from cancelctl.jobs.time_limit import time_limit_plan; "
            f"time_limit_plan(load_sweep({str(path)!r}).runs[0]); assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
