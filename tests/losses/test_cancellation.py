"""[D]'s cancellation identities, checked with autograd on the per-token log-probs.

A "shared context-token" is token 0 of every row of a group with the same ratio ρ (same old and
new log-prob). Its summed gradient coefficient is Σ_i dLoss/dlog π_{i,0}. Losses are minimised, so
dLoss/dlog π = −(objective coefficient) × the aggregation's normalisation.
"""

from __future__ import annotations

import math

import pytest
import torch
from loss_helpers import grad_of

import losses

EPS = 0.2


def shared_token_group(ratio: float, advantages: list[float], tokens: int = 5, seed: int = 0):
    """One group; token 0 shared (ratio `ratio` in every row), the rest random within the clip range."""
    g = torch.Generator().manual_seed(seed)
    n = len(advantages)
    old = -torch.rand(n, tokens, generator=g, dtype=torch.float64) * 2
    new = old + 0.05 * torch.randn(n, tokens, generator=g, dtype=torch.float64)
    old[:, 0] = -1.3
    new[:, 0] = -1.3 + math.log(ratio)
    adv = torch.tensor(advantages, dtype=torch.float64)[:, None].expand(n, tokens)
    mask = torch.ones(n, tokens, dtype=torch.bool)
    return old, new.requires_grad_(True), adv, mask


def shared_coefficient(name: str, ratio: float, advantages: list[float], agg: str = "token-mean", config=None):
    old, new, adv, mask = shared_token_group(ratio, advantages)
    loss, _ = losses.get(name)(
        old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, loss_agg_mode=agg, config=config
    )
    grad = grad_of(loss, new)
    return grad[:, 0], loss


ZERO_SUM = [-1.5, -0.5, 0.25, 0.75, 1.0]


@pytest.mark.parametrize("ratio", [0.85, 1.0, 1.1, 1.19])
def test_grpo_shared_token_cancels_inside_clip_range(ratio):
    """[D eq. 9]: ρ/2 (Â1 + Â2) ∇log π = 0 while every row is on the linear segment."""
    per_row, _ = shared_coefficient("grpo", ratio, ZERO_SUM)
    n_tokens = 5 * len(ZERO_SUM)
    expected = -torch.tensor(ZERO_SUM, dtype=torch.float64) * ratio / n_tokens  # token-mean: 1/#tokens
    torch.testing.assert_close(per_row, expected, rtol=1e-12, atol=1e-15)
    assert per_row.abs().min() > 0  # each row pulls; only the sum cancels
    assert abs(per_row.sum().item()) < 1e-15


@pytest.mark.parametrize("ratio", [0.05, 0.5, 0.79, 1.0, 1.2, 1.5, 2.9, 7.0])
def test_grpo_symclip_shared_token_cancels_for_every_ratio(ratio):
    """[D eq. 82]: φ(r*) Σ Â_i ∇log π = 0 whatever r*, since φ no longer depends on the sign of Â."""
    per_row, _ = shared_coefficient("grpo_symclip", ratio, ZERO_SUM)
    assert abs(per_row.sum().item()) < 1e-15
    if ratio < 1 + EPS:
        assert per_row.abs().min() > 0


def test_grpo_asymmetric_clip_above_range_eq75():
    """[D eq. 75] w > 1+ε, Â = (−A, +A): Â1·w + Â2·w̄ = A((1+ε) − w) ≠ 0 in value; in gradient only
    the negative row (unclipped branch) pulls, so the shared token does not cancel."""
    a, w = 0.8, 1.6  # w < clip_ratio_c = 3: the dual clip stays inactive
    per_row, loss = shared_single_token("grpo", w, [-a, a])
    assert loss.item() == pytest.approx(-a * ((1 + EPS) - w), rel=1e-12)
    torch.testing.assert_close(per_row, torch.tensor([a * w, 0.0], dtype=torch.float64), rtol=1e-12, atol=0)
    assert per_row.sum().item() == pytest.approx(a * w)


def test_grpo_asymmetric_clip_below_range_eq76():
    """[D eq. 76] w < 1−ε: Â1·w̄ + Â2·w = A(w − (1−ε)) ≠ 0; only the positive row pulls."""
    a, w = 0.8, 0.5
    per_row, loss = shared_single_token("grpo", w, [-a, a])
    assert loss.item() == pytest.approx(-a * (w - (1 - EPS)), rel=1e-12)
    torch.testing.assert_close(per_row, torch.tensor([0.0, -a * w], dtype=torch.float64), rtol=1e-12, atol=0)


@pytest.mark.parametrize("w", [0.5, 1.6])
def test_symclip_removes_the_asymmetry_of_eq75_76(w):
    per_row, loss = shared_single_token("grpo_symclip", w, [-0.8, 0.8])
    assert loss.item() == pytest.approx(0.0, abs=1e-15)
    assert per_row.sum().item() == pytest.approx(0.0, abs=1e-15)


def shared_single_token(name: str, ratio: float, advantages: list[float]):
    """G rows of one token each, all with ratio `ratio`; token-sum, so coefficients are unscaled."""
    n = len(advantages)
    old = torch.full((n, 1), -0.7, dtype=torch.float64)
    new = (old + math.log(ratio)).requires_grad_(True)
    adv = torch.tensor(advantages, dtype=torch.float64)[:, None]
    loss, _ = losses.get(name)(
        old_log_prob=old,
        log_prob=new,
        advantages=adv,
        response_mask=torch.ones(n, 1, dtype=torch.bool),
        loss_agg_mode="token-sum",
    )
    return grad_of(loss, new)[:, 0], loss


def test_gspo_shared_prefix_does_not_cancel_eq13_eq38():
    """[D eq. 38], length-normalised (s_i = (ρ1ρ2λ_i)^{1/3}, eq. 44): G = 2, T = 3, shared first two
    tokens, last token λ1 ≠ λ2. Per shared token, Σ_i dLoss/dlog π = −(1/G)(1/3) A (s2 − s1) ≠ 0."""
    rho1, rho2, lam1, lam2, a = 1.05, 0.97, 0.9, 1.08, 0.7
    base = torch.tensor([-0.4, -1.1, -2.0], dtype=torch.float64)
    old = base.repeat(2, 1)
    new = (old + torch.log(torch.tensor([[rho1, rho2, lam1], [rho1, rho2, lam2]], dtype=torch.float64))).requires_grad_(
        True
    )
    adv = torch.tensor([[-a] * 3, [a] * 3], dtype=torch.float64)
    config = losses.LossConfig(clip_ratio=0.5)  # every s_i on the linear segment
    loss, _ = losses.get("gspo")(
        old_log_prob=old,
        log_prob=new,
        advantages=adv,
        response_mask=torch.ones(2, 3, dtype=torch.bool),
        loss_agg_mode="seq-mean-token-mean",
        config=config,
    )
    grad = grad_of(loss, new)
    s1, s2 = (rho1 * rho2 * lam1) ** (1 / 3), (rho1 * rho2 * lam2) ** (1 / 3)
    expected = -(1 / 2) * (1 / 3) * a * (s2 - s1)
    for t in (0, 1):
        assert grad[:, t].sum().item() == pytest.approx(expected, rel=1e-12)
    assert abs(expected) > 1e-3
    # the same batch under grpo (token ratios equal on shared tokens) cancels exactly [eq. 9]
    loss, _ = losses.get("grpo")(
        old_log_prob=old, log_prob=new, advantages=adv, response_mask=torch.ones(2, 3, dtype=torch.bool)
    )
    assert grad_of(loss, new)[:, :2].sum(0).abs().max().item() < 1e-15


def test_three_trajectory_toy_appendix_a():
    """[D App. A]: rewards (0, 1, 1) give Â = (−2/3, 1/3, 1/3) [eq. 30]; with s2 ≠ s3 GSPO drifts the
    log-odds of the two equally-correct answers by η(Â2 s2 − Â3 s3)/G [eq. 41]; DFPO's min-replace
    gives them one weight and the drift vanishes."""
    rewards = torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64)
    gid = torch.zeros(3, dtype=torch.long)
    adv = losses.group_advantages(rewards, gid, std_normalize=False)
    torch.testing.assert_close(adv, torch.tensor([-2 / 3, 1 / 3, 1 / 3], dtype=torch.float64), rtol=0, atol=1e-15)
    std_adv = losses.group_advantages(rewards, gid)  # [D eq. 43]: divided by the unbiased std 1/sqrt(3)
    torch.testing.assert_close(std_adv, adv / (3**-0.5 + 1e-6))

    # τ1 "The answer is 25." (5 tokens), τ2 "The answer is 20." (5), τ3 "10+10=20." (4): surface forms differ
    lengths = torch.tensor([5, 5, 4])
    mask = torch.arange(5)[None, :] < lengths[:, None]
    old = torch.full((3, 5), -1.0, dtype=torch.float64)
    shifts = torch.tensor([[0.02] * 5, [0.03] * 5, [-0.04] * 5], dtype=torch.float64)
    new = (old + shifts).requires_grad_(True)
    adv_tok = adv[:, None].expand(3, 5)
    eta = 0.1

    def log_odds_drift(name, config=None):
        loss, _ = losses.get(name)(
            old_log_prob=old,
            log_prob=new,
            advantages=adv_tok,
            response_mask=mask,
            loss_agg_mode="seq-mean-token-mean",
            config=config,
            group_ids=gid,
        )
        grad = grad_of(loss, new)
        # one step on the token log-probs as free parameters: Δ log π(τ_i) = −η Σ_t dLoss/dlog π_{i,t}
        delta = -eta * (grad * mask).sum(-1)
        return (delta[1] - delta[2]).item()

    s = torch.exp(shifts[:, 0])  # length-normalised sequence ratios (constant shift per token)
    assert s[1] != s[2]
    expected = eta * (adv[1] * s[1] - adv[2] * s[2]).item() / 3
    assert log_odds_drift("gspo", losses.LossConfig(clip_ratio=0.5)) == pytest.approx(expected, rel=1e-9)
    assert abs(expected) > 1e-4
    assert log_odds_drift("dfpo", losses.LossConfig(clip_ratio=0.5)) == pytest.approx(0.0, abs=1e-15)
