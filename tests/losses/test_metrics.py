"""Batch-tensor metrics of docs/metrics.md: mismatch/*, hacking/J, dfpo/asym, dfpo/ortho_residual."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

import losses
from losses.groups import group_index


def test_mismatch_metrics_against_numpy_and_scipy():
    g = torch.Generator().manual_seed(0)
    train = -torch.rand(6, 9, generator=g, dtype=torch.float64) * 4
    infer = train + 0.1 * torch.randn(6, 9, generator=g, dtype=torch.float64)
    mask = torch.arange(9)[None, :] < torch.tensor([9, 4, 1, 7, 9, 2])[:, None]
    infer[~mask] = 50.0  # padding must be ignored
    m = losses.mismatch_metrics(train, infer, mask)
    t, i = train[mask].numpy(), infer[mask].numpy()
    rho = np.exp(t - i)
    assert m["mismatch/rho_std"] == pytest.approx(rho.std(ddof=1), rel=1e-12)
    assert m["mismatch/rho_max"] == pytest.approx(rho.max(), rel=1e-12)
    assert m["mismatch/pcc"] == pytest.approx(stats.pearsonr(np.exp(t), np.exp(i)).statistic, rel=1e-10)
    same = losses.mismatch_metrics(train, train, mask)
    assert same["mismatch/rho_std"] == 0.0 and same["mismatch/rho_max"] == 1.0
    assert same["mismatch/pcc"] == pytest.approx(1.0)


def test_hacking_j_by_hand():
    """[H eq. 23]: J = Σ Â (φ − 1); φ = δ where π_train(θ_old) < π_low."""
    probs = torch.tensor([[0.05, 0.5, 0.09], [0.2, 0.01, 0.7]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    adv = torch.tensor([1.5, -0.5], dtype=torch.float64)
    # low tokens: (0,0), (0,2), (1,1); δ = 2 → φ − 1 = 1 there
    assert losses.hacking_j(adv, probs.log(), mask) == pytest.approx(1.5 + 1.5 - 0.5)
    assert losses.hacking_j(adv[:, None].expand(2, 3), probs.log(), mask, delta=3.0) == pytest.approx(
        2 * (1.5 + 1.5 - 0.5)
    )
    assert losses.hacking_j(adv, probs.log(), mask, delta=2.0, p_low=0.001) == 0.0


def test_dfpo_asym_and_ortho_residual_by_hand():
    w = torch.tensor([1.0, 2.0, 1.0, 1.0, 1.0])
    a = torch.tensor([1.0, -1.0, 0.5, 0.5, -1.0])
    gid = torch.tensor([0, 0, 1, 1, 1])
    # group 0: w·a = (1, −2): var 2.25, |Σ| = 1; group 1: (0.5, 0.5, −1): var 0.5, |Σ| = 0
    assert losses.dfpo_asym(w, a, gid) == pytest.approx((2.25 + 0.5) / 2)
    assert losses.dfpo_ortho_residual(w, a, gid) == pytest.approx(0.5)
    assert math.isfinite(losses.dfpo_asym(torch.ones(1), torch.ones(1), torch.zeros(1, dtype=torch.long)))


def test_weight_dispersion_is_the_mean_over_groups_of_std_over_mean():
    """`dfpo/weight_dispersion` (docs/metrics.md#dfpo): mean_g std_i(w)/mean_i(w) (population std); scale-free; 0 for
    one weight per group (min_replace), where `asym` still reads w²·Var(Â)."""
    from losses.metrics import group_asymmetry, weight_dispersion

    w = torch.tensor([1.0, 3.0, 2.0, 2.0, 0.5, 0.5, 0.5, 0.5], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    gid = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    expected = (math.sqrt(0.5) / 2.0 + 0.0) / 2  # group 0: mean 2, population var 0.5; group 1: 0
    assert weight_dispersion(w, adv, gid).item() == pytest.approx(expected, rel=1e-12)
    assert weight_dispersion(5 * w, adv, gid).item() == pytest.approx(expected, rel=1e-12)
    assert group_asymmetry(w, adv, gid).item() > 0
    assert weight_dispersion(torch.full((8,), 0.7, dtype=torch.float64), adv, gid).item() == 0.0


def test_groups_whose_advantages_are_all_zero_are_left_out():
    """docs/metrics.md#dfpo: both group means run over the groups with a non-zero Â. A dead group keeps whatever
    weights it had (min_replace transforms nothing there): counting it would read > 0 under min_replace."""
    from losses.metrics import group_asymmetry, live_groups, weight_dispersion
    from losses.transforms import transform

    s = torch.tensor([1.0, 3.0, 2.0, 2.0, 0.9, 1.1, 1.3, 0.7], dtype=torch.float64)  # raw sequence weights
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)  # group 1 dead
    gid = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    assert live_groups(adv, group_index(gid)).tolist() == [True, False]
    w = transform("min_replace", s, adv, gid)
    assert weight_dispersion(w, adv, gid).item() == 0.0  # exactly: one weight in the one live group
    assert weight_dispersion(s, adv, gid).item() == pytest.approx(math.sqrt(0.5) / 2.0, rel=1e-12)  # group 0 only
    assert group_asymmetry(s, adv, gid).item() == pytest.approx(group_asymmetry(s[:4], adv[:4], gid[:4]).item())
    assert weight_dispersion(s, torch.zeros(8, dtype=torch.float64), gid).item() == 0.0  # no live group: 0
