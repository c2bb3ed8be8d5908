"""grpo / dapo / gspo / grpo_symclip against their formulas written out by hand (verl parity is in
test_verl.py); registry and metric keys."""

from __future__ import annotations

import pytest
import torch
from loss_helpers import Batch, grad_of, make_batch

import losses

PG_KEYS = {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}


@pytest.fixture
def b() -> Batch:
    return make_batch(groups=4, group_size=4, tokens=10, seed=5, spread=0.6, dtype=torch.float64)


def token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum()


def test_registry_names_and_lookup():
    assert losses.names() == ["grpo", "dapo", "gspo", "grpo_symclip", "dfpo"]
    assert losses.get("gspo") is losses.gspo
    with pytest.raises(ValueError, match="unknown loss 'ppo'; registered: grpo, dapo"):
        losses.get("ppo")


def test_grpo_is_the_token_clip_with_dual_clip(b):
    cfg = losses.LossConfig(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=1.5)
    loss, metrics = losses.grpo(**b.kwargs(config=cfg))
    r = torch.exp(b.log_prob - b.old_log_prob)
    a = b.advantages
    objective = torch.minimum(r * a, r.clamp(0.8, 1.28) * a)
    objective = torch.where(a < 0, torch.maximum(objective, 1.5 * a), objective)  # dual clip [H eq. 2]
    expected = -token_mean(objective, b.response_mask)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    torch.testing.assert_close(grad_of(loss, b.log_prob), grad_of(expected, b.log_prob))
    assert set(metrics) == PG_KEYS and metrics["actor/pg_clipfrac_lower"] > 0
    clipped = r.clamp(0.8, 1.28) * a < r * a
    assert metrics["actor/pg_clipfrac"] == pytest.approx(token_mean(clipped.double(), b.response_mask).item())


def test_grpo_without_dual_clip_and_default_config(b):
    no_dual, metrics = losses.grpo(**b.kwargs(config=losses.LossConfig(clip_ratio_c=None)))
    r = torch.exp(b.log_prob - b.old_log_prob)
    expected = -token_mean(torch.minimum(r * b.advantages, r.clamp(0.8, 1.2) * b.advantages), b.response_mask)
    assert no_dual.item() == pytest.approx(expected.item(), rel=1e-12)
    assert metrics["actor/pg_clipfrac_lower"] == 0.0
    default, _ = losses.grpo(**b.kwargs())  # config=None: verl's defaults, dual clip c = 3
    with_c3, _ = losses.grpo(**b.kwargs(config=losses.LossConfig(clip_ratio_c=3.0)))
    assert default.item() == with_c3.item()
    with pytest.raises(ValueError, match="clip_ratio_c"):
        losses.grpo(**b.kwargs(config=losses.LossConfig(clip_ratio_c=0.9)))


def test_dapo_forces_token_mean(b):
    cfg = losses.LossConfig(clip_ratio_low=0.2, clip_ratio_high=0.28)
    dapo, _ = losses.dapo(**b.kwargs(config=cfg, loss_agg_mode="seq-mean-token-sum"))
    grpo_tm, _ = losses.grpo(**b.kwargs(config=cfg, loss_agg_mode="token-mean"))
    grpo_seq, _ = losses.grpo(**b.kwargs(config=cfg, loss_agg_mode="seq-mean-token-sum"))
    assert dapo.item() == grpo_tm.item() != grpo_seq.item()


def test_gspo_is_the_sequence_clip_with_every_token_carrying_gradient(b):
    cfg = losses.LossConfig(clip_ratio_low=0.1, clip_ratio_high=0.15)
    loss, metrics = losses.gspo(**b.kwargs(config=cfg, loss_agg_mode="seq-mean-token-mean"))
    mask = b.response_mask
    s = torch.exp(((b.log_prob - b.old_log_prob) * mask).sum(-1) / mask.sum(-1))  # [D eq. 44]
    a = b.row_adv
    expected = -torch.minimum(s * a, s.clamp(0.9, 1.15) * a).mean()  # [D eq. 42]
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    torch.testing.assert_close(grad_of(loss, b.log_prob), grad_of(expected, b.log_prob))
    assert metrics["actor/pg_clipfrac_lower"] == 0.0 and 0 < metrics["actor/pg_clipfrac"] < 1


def test_grpo_symclip_uses_clip_ratio_high(b):
    cfg = losses.LossConfig(clip_ratio_low=0.05, clip_ratio_high=0.3)
    loss, metrics = losses.grpo_symclip(**b.kwargs(config=cfg))
    r = torch.exp(b.log_prob - b.old_log_prob)
    expected = -token_mean(b.advantages * r.clamp(0, 1.3), b.response_mask)  # [D eq. 80]
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
    torch.testing.assert_close(grad_of(loss, b.log_prob), grad_of(expected, b.log_prob))
    assert metrics["actor/pg_clipfrac"] == pytest.approx(token_mean((r > 1.3).double(), b.response_mask).item())


@pytest.mark.parametrize("name", ["grpo", "dapo", "gspo", "grpo_symclip"])
def test_per_row_advantages_broadcast_like_verl(b, name):
    per_token, m1 = losses.get(name)(**b.kwargs())
    kwargs = b.kwargs()
    kwargs["advantages"] = b.row_adv.contiguous()
    per_row, m2 = losses.get(name)(**kwargs)
    assert per_token.item() == per_row.item() and m1 == m2


@pytest.mark.parametrize("name", ["grpo", "dapo", "gspo", "grpo_symclip", "dfpo"])
def test_same_metric_keys_on_every_call(name):
    keys = set()
    for seed in range(3):
        b = make_batch(seed=seed, spread=0.1 * (seed + 1))
        _, metrics = losses.get(name)(**b.kwargs(group_ids=b.group_ids))
        assert PG_KEYS <= set(metrics) and all(type(v) is float for v in metrics.values())
        keys.add(frozenset(metrics))
    assert len(keys) == 1
