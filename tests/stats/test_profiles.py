"""Performance profiles: the fraction of runs above each threshold as rliable computes it, its recovery
of the true survival function (Dvoretzky–Kiefer–Wolfowitz), and the bootstrap band's simulated
pointwise coverage (good at 30 runs, short at 4, as documented)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from cancelctl.stats.profiles import performance_profile


def test_fraction_above_each_threshold_pooled_over_benchmarks():
    scores = np.array([[0.1, 0.5], [0.4, 0.9], [0.8, 0.2]])  # 3 runs × 2 benchmarks
    profile = performance_profile(scores, [0.0, 0.3, 0.5, 0.95], n_boot=200)
    np.testing.assert_allclose(profile.fraction, [1.0, 4 / 6, 2 / 6, 0.0])  # strictly above τ, as rliable
    assert (profile.n_runs, profile.n_benchmarks) == (3, 2)
    assert np.all(profile.lo <= profile.fraction + 1e-12) and np.all(profile.fraction <= profile.hi + 1e-12)
    one = performance_profile(np.array([0.2, 0.6]), [0.5], n_boot=100)
    assert one.fraction.tolist() == [0.5] and one.n_benchmarks == 1


def test_profile_recovers_the_survival_function():
    """sup_τ |profile − (1 − F)| ≤ ε with probability ≥ 1 − 2·exp(−2nε²) (DKW); at n = 400 and
    ε = 0.068 that is 95%: check the bound holds in ≥ 93% of 200 simulated sweeps."""
    rng = np.random.default_rng(0)
    taus = np.linspace(-3, 3, 121)
    eps = np.sqrt(np.log(2 / 0.05) / (2 * 400))
    within = [
        np.max(np.abs(performance_profile(rng.normal(size=400), taus, n_boot=10).fraction - stats.norm.sf(taus))) <= eps
        for _ in range(200)
    ]
    assert np.mean(within) >= 0.93


@pytest.mark.parametrize("n,promise", [(30, 0.88), (4, 0.5)])
def test_bootstrap_band_pointwise_coverage(n, promise):
    """At the quartiles of N(0, 1) (2,000 sweeps): measured 93–96% at 30 runs, 91–96% at 10; at 4 runs
    68% at the outer quartiles, 88% at the median (a fraction of 4 runs resamples to 5 values at
    most), which the report's note says."""
    rng = np.random.default_rng(n)
    taus = stats.norm.ppf([0.25, 0.5, 0.75])
    held = np.array([
        [lo <= t <= hi for lo, hi, t in zip(p.lo, p.hi, stats.norm.sf(taus))]
        for p in (performance_profile(rng.normal(size=n), taus, n_boot=400, seed=rng) for _ in range(400))
    ]).mean(axis=0)
    assert np.all(held >= promise), held
    if n == 4:
        assert held.min() < 0.8, held  # the band is a bootstrap's: short at few runs


def test_bad_scores_are_refused():
    with pytest.raises(ValueError, match="finite"):
        performance_profile(np.array([0.1, np.nan]), [0.5])
    with pytest.raises(ValueError, match="runs × benchmarks"):
        performance_profile(np.zeros((2, 2, 2)), [0.5])
