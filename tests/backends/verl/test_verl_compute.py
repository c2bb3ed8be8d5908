"""The compute keys (docs/metrics.md#compute) derived from verl's own per-step metrics (verl logs no generated-token count)."""

from __future__ import annotations

import pytest

from cancelctl.backends.verl.compute import ComputeAccount
from cancelctl.spec.run import updates_per_step
from cancelctl.tracking.runfiles import encode_metrics_line


def verl_step(step: int) -> dict[str, float]:
    return {"response_length/mean": 100.0 + step, "timing_s/step": 30.0 * step, "actor/pg_loss": 0.1}


def test_compute_keys_from_response_length_timing_and_the_spec(make_run):
    run = make_run(G=4, nodes=2, algorithm_extra=", ppo_epochs: 3")  # 32 prompts, mini-batches of 16, 8 GPUs/node
    assert updates_per_step(run.spec) == 3 * 2
    account = ComputeAccount(run)
    out = [account.add(step, verl_step(step)) for step in (1, 2, 3)]
    assert [o["compute/gen_tokens"] for o in out] == [101 * 128, 102 * 128, 103 * 128]  # × (32 prompts × G 4)
    assert out[2]["compute/gen_tokens_cum"] == (101 + 102 + 103) * 128
    assert [o["compute/update_steps_cum"] for o in out] == [6, 12, 18]
    assert out[2]["compute/hours_cum"] == pytest.approx((30 + 60 + 90) * 16 / 3600)  # GPU-hours on 2 × 8 GPUs
    assert out[0]["actor/pg_loss"] == 0.1  # verl's own keys pass through


def test_validation_only_line_gets_no_token_count(make_run):
    out = ComputeAccount(make_run()).add(0, {"val-core/aime/acc/mean_at_32": 0.2})
    assert "compute/gen_tokens" not in out and "compute/gen_tokens_cum" not in out
    assert out["compute/update_steps_cum"] == 0


def test_a_requeued_verl_resuming_from_its_checkpoint_gets_the_same_totals(make_run, tmp_path):
    """Attempt 1 logs steps 1-5; verl's last checkpoint was step 3, so attempt 2 logs 4-6 again."""
    run = make_run()
    uninterrupted = ComputeAccount(run)
    expected = [uninterrupted.add(step, verl_step(step)) for step in range(1, 7)]

    first = ComputeAccount(run)
    jsonl = tmp_path / "metrics.jsonl"
    with jsonl.open("wb") as fh:
        for step in range(1, 6):
            fh.write(encode_metrics_line(step, 0, first.add(step, verl_step(step))))
    second = ComputeAccount.from_run_dir(run, jsonl)
    resumed = [second.add(step, verl_step(step)) for step in (4, 5, 6)]
    assert resumed == expected[3:]


def test_reward_balanced_steps_count_every_generated_rollout(make_run):
    """The sampler's `batching/gen_tokens` (discarded rollouts included) replaces the trained-batch estimate."""
    run = make_run("{batching: {strategy: reward_balanced}}", G=4)
    account = ComputeAccount(run)
    trained_only = 50.0 * 32 * 4  # response_length/mean x the trained batch
    one = account.add(1, {"response_length/mean": 50.0, "batching/gen_tokens": 3 * trained_only})
    two = account.add(2, {"response_length/mean": 50.0})  # a step without the sampler's key
    assert one["compute/gen_tokens"] == 3 * trained_only
    assert two["compute/gen_tokens_cum"] == 4 * trained_only


def test_a_resumed_sampler_restarting_its_count_keeps_the_runs_discard_total(make_run, tmp_path):
    """Seen on real verl (tests/slurm/test_verl_e2e.py): requeued after step 3 and resumed from the
    checkpoint of step 2, the reward-balanced sampler's own running count started again at 0."""
    run = make_run("{batching: {strategy: reward_balanced}}", G=4)
    jsonl = tmp_path / "metrics.jsonl"
    first = ComputeAccount(run)
    with jsonl.open("wb") as fh:
        for step, cum in ((1, 32.0), (2, 96.0), (3, 128.0)):
            metrics = {"batching/discarded_rollouts": cum - {1: 0, 2: 32, 3: 96}[step], "batching/discarded_rollouts_cum": cum}
            fh.write(encode_metrics_line(step, 0, first.add(step, metrics)))
    second = ComputeAccount.from_run_dir(run, jsonl)
    # the new process replays step 3 and goes on, its own count from 0
    out = [second.add(step, {"batching/discarded_rollouts": 32.0, "batching/discarded_rollouts_cum": 32.0 * i})
           for i, step in enumerate((3, 4), start=1)]
    assert [o["batching/discarded_rollouts_cum"] for o in out] == [128.0, 160.0]
