"""DFPO group transforms [D App. B.4] on randomised groups of mixed sizes (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

import losses

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def grouped_weights(draw, max_groups: int = 8, max_size: int = 10, positive: bool = True):
    """Rows of several groups of mixed sizes, shuffled, with non-contiguous ids; weights s̄ > 0 like
    post-clip sequence ratios (some tied), advantages from rewards (ties and constant groups included)."""
    sizes = draw(st.lists(st.integers(1, max_size), min_size=1, max_size=max_groups))
    ids = np.repeat(np.array(draw(st.permutations(range(100, 100 + 13 * len(sizes), 13)))), sizes)
    n = len(ids)
    low = 0.01 if positive else -2.0
    weights = draw(st.lists(st.sampled_from([0.5, 1.0, 1.2]) | st.floats(low, 5.0), min_size=n, max_size=n))
    # rewards on a 0.01 grid: distinct rewards differ by a realistic amount (no subnormal advantages)
    rewards = draw(
        st.lists(st.sampled_from([0.0, 1.0]) | st.integers(-300, 300).map(lambda k: k / 100), min_size=n, max_size=n)
    )
    perm = np.array(draw(st.permutations(range(n))))
    gid = torch.as_tensor(ids[perm])
    rew = torch.tensor(rewards, dtype=torch.float64)[perm]
    return torch.tensor(weights, dtype=torch.float64)[perm], losses.group_advantages(rew, gid), gid


def per_group(gid: torch.Tensor):
    for g in gid.unique():
        yield gid == g


@pytest.mark.parametrize("name", losses.TRANSFORMS)
@SETTINGS
@given(data=grouped_weights())
def test_every_transform_is_orthogonal_to_advantages(name, data):
    weights, adv, gid = data
    out = losses.transform(name, weights, adv, gid)
    assert out.shape == weights.shape and out.dtype == weights.dtype
    for rows in per_group(gid):
        assert abs((adv[rows] * out[rows]).sum().item()) < 1e-6
        if (adv[rows] == 0).all():  # ‖Â‖ = 0: left unchanged (docs/losses.md#group-transformations)
            assert torch.equal(out[rows], weights[rows])


@SETTINGS
@given(data=grouped_weights())
def test_min_replace_keeps_the_sign_of_every_update_and_only_shrinks(data):
    """Theorem C.1 / K.1: s̃_i = min_j s̄_j, so Â_i s̃_i has Â_i's sign and |s̃_i| ≤ s̄_i."""
    weights, adv, gid = data
    out = losses.transform("min_replace", weights, adv, gid)
    assert torch.equal(torch.sign(adv * out), torch.sign(adv))
    assert (out <= weights).all()
    for rows in per_group(gid):
        if (adv[rows] != 0).any():
            assert torch.equal(out[rows], weights[rows].min().expand(int(rows.sum())))


def qp_reference(w: np.ndarray, a: np.ndarray) -> np.ndarray:
    """[D eq. 51] by a general solver: argmin ½‖v − w‖² s.t. aᵀv = 0, v ≥ 0."""
    res = minimize(
        lambda v: 0.5 * np.sum((v - w) ** 2),
        np.maximum(w, 0.0),
        jac=lambda v: v - w,
        method="SLSQP",
        bounds=[(0.0, None)] * len(w),
        constraints=[{"type": "eq", "fun": lambda v: a @ v, "jac": lambda v: a}],
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    assert res.success, res.message
    return res.x


@settings(max_examples=40, deadline=None)
@given(data=grouped_weights(max_groups=5, max_size=8, positive=False))
def test_pos_orth_qp_matches_a_qp_solver(data):
    weights, adv, gid = data
    out = losses.transform("pos_orth_qp", weights, adv, gid)
    for rows in per_group(gid):
        w, a = weights[rows].numpy(), adv[rows].numpy()
        if not np.any(a):
            continue  # Â ≡ 0: s̄ kept as is, even negative (docs/losses.md#group-transformations)
        assert (out[rows] >= 0).all()
        np.testing.assert_allclose(out[rows].numpy(), qp_reference(w, a), atol=1e-6, rtol=0)


def test_pos_orth_qp_worked_example():
    # a = (1, −1), s̄ = (2, 1): v = max(s̄ − λa, 0) with λ = 1/2 → (1.5, 1.5)
    out = losses.transform("pos_orth_qp", torch.tensor([2.0, 1.0]), torch.tensor([1.0, -1.0]), torch.tensor([0, 0]))
    torch.testing.assert_close(out, torch.tensor([1.5, 1.5]))
    # a negative entry is truncated at 0 and the rest rebalanced: (0, 0.5, 0.5)... checked against the QP
    w, a = np.array([0.1, 3.0, 1.0]), np.array([2.0, -1.0, -1.0])
    out = losses.transform("pos_orth_qp", torch.tensor(w), torch.tensor(a), torch.zeros(3, dtype=torch.long))
    np.testing.assert_allclose(out.numpy(), qp_reference(w, a), atol=1e-7)


@SETTINGS
@given(data=grouped_weights(), eps1=st.sampled_from([0.01, 0.05, 0.3]))
def test_trunc_rebalance_scales_one_side_by_a_coefficient_in_0_1(data, eps1):
    """[D eq. 52-55] with the sign fix for β of docs/losses.md#group-transformations: s⁺ = max(s̄, ε₁); one side × α or β ∈ (0, 1]; the
    other side untouched (≥ ε₁); everything > 0."""
    weights, adv, gid = data
    out = losses.transform("trunc_rebalance", weights, adv, gid, eps1=eps1)
    s_plus = weights.clamp(min=eps1)
    assert (out > 0).all()
    for rows in per_group(gid):
        a, s, o = adv[rows], s_plus[rows], out[rows]
        pos, neg = a > 0, a < 0
        if not pos.any() or not neg.any():
            continue
        assert torch.equal(o[a == 0], s[a == 0])
        # one side is left exactly as s⁺; with δ = Âᵀs⁺ clearly non-zero it is the side δ says
        pos_kept, neg_kept = torch.equal(o[pos], s[pos]), torch.equal(o[neg], s[neg])
        assert pos_kept or neg_kept
        scaled, kept = (neg, pos) if pos_kept else (pos, neg)
        delta = (a * s).sum().item()
        if abs(delta) > 1e-9:
            assert (delta > 0) == (scaled is pos)
        assert (o[kept] >= eps1).all()
        coef = o[scaled] / s[scaled]
        torch.testing.assert_close(coef, coef[:1].expand_as(coef), rtol=1e-12, atol=0)
        assert 0 < coef[0] <= 1
        expected = (-(a[kept] * s[kept]).sum() / (a[scaled] * s[scaled]).sum()).item()  # α or β, both positive
        assert coef[0].item() == pytest.approx(expected, rel=1e-12)


def test_trunc_rebalance_scaled_side_can_fall_below_eps1():
    """The paper's "s̃ ⪰ ε₁" (after eq. 55) does not survive the rescale: α·ε₁ < ε₁."""
    adv = torch.tensor([1.0, 1.0, -2.0], dtype=torch.float64)
    out = losses.transform(
        "trunc_rebalance",
        torch.tensor([0.01, 3.0, 1.0], dtype=torch.float64),
        adv,
        torch.zeros(3, dtype=torch.long),
        eps1=0.05,
    )
    alpha = 2.0 / 3.05
    torch.testing.assert_close(out, torch.tensor([0.05 * alpha, 3.0 * alpha, 1.0], dtype=torch.float64))
    assert out[0] < 0.05


def test_orth_proj_is_the_projection_eq18():
    w, a = torch.tensor([1.2, 0.8, 1.0]), torch.tensor([1.0, -0.5, -0.5])
    out = losses.transform("orth_proj", w, a, torch.tensor([5, 5, 5]))
    torch.testing.assert_close(out, w - (a @ w) / (a @ a) * a)


def test_transform_inputs_are_validated():
    w, a, g = torch.ones(4), torch.tensor([1.0, -1.0, 1.0, -1.0]), torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError, match="unknown DFPO transform 'nope'"):
        losses.transform("nope", w, a, g)
    with pytest.raises(TypeError, match="takes no options"):
        losses.transform("min_replace", w, a, g, eps1=0.1)
    with pytest.raises(ValueError, match="1-D"):
        losses.transform("orth_proj", w[None], a[None], g)
    with pytest.raises(ValueError, match="group_ids has 3"):
        losses.transform("orth_proj", w, a, g[:3])


@pytest.mark.parametrize("name", losses.TRANSFORMS)
def test_transforms_keep_fp32_and_upcast_bf16(name):
    w, a, g = (
        torch.rand(8) + 0.5,
        losses.group_advantages(torch.arange(8.0) % 3, torch.arange(8) // 4),
        torch.arange(8) // 4,
    )
    assert losses.transform(name, w, a, g).dtype == torch.float32
    out = losses.transform(name, w.bfloat16(), a.bfloat16(), g)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
