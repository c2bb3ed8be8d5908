"""Compute-scaling fits [ScaleRL, arXiv 2510.13786]: known A, B, C_mid recovered from noisy curves,
a fit that cannot be made says why, and the per-seed Student's t intervals' coverage (simulated)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cancelctl.stats.intervals import student_t_ci
from cancelctl.stats.scaling import (
    EARLY_FRACTION,
    ComputeCurve,
    ComputeCurveError,
    curve_intervals,
    fit_compute_curve,
    mean_curve,
    sigmoid_reward,
)

R0 = 0.1
NOISE = 0.02  # per-point reward noise: a lab step's batch mean of ~64 rollouts has sd ~0.06, its eval less
COMPUTE = np.linspace(0.0, 2e6, 41)  # step 0 (the initial policy: R0 + noise) to 2M generated tokens


def noisy(asymptote: float, efficiency: float, midpoint: float, seed: int, compute=COMPUTE) -> np.ndarray:
    return sigmoid_reward(compute, R0, asymptote, efficiency, midpoint) + np.random.default_rng(seed).normal(
        0.0, NOISE, np.size(compute))


def test_the_equation():
    """R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B): R0 at C = 0, half the rise at C_mid, A far out."""
    r = sigmoid_reward([0.0, 2e5, 2e5 * 1e6, 4e5], R0, 0.8, 1.5, 2e5)
    assert r[0] == R0 and r[1] == pytest.approx(0.45) and r[2] == pytest.approx(0.8, abs=1e-8)
    assert r[3] == pytest.approx(R0 + 0.7 / (1 + 0.5**1.5))
    curve = ComputeCurve(0.8, 1.5, 2e5, R0)
    np.testing.assert_allclose(curve(COMPUTE), sigmoid_reward(COMPUTE, R0, 0.8, 1.5, 2e5))


def test_a_noiseless_curve_is_recovered_exactly_in_any_compute_unit():
    fit = fit_compute_curve(COMPUTE, sigmoid_reward(COMPUTE, R0, 0.8, 1.5, 2e5))
    assert (fit.asymptote, fit.efficiency, fit.midpoint, fit.r0) == pytest.approx((0.8, 1.5, 2e5, R0), rel=1e-6)
    assert fit.n_points == int(np.sum(COMPUTE >= EARLY_FRACTION * COMPUTE[-1])) and fit.rmse < 1e-8
    hours = fit_compute_curve(COMPUTE / 3.6e6, sigmoid_reward(COMPUTE, R0, 0.8, 1.5, 2e5))  # another unit
    assert (hours.asymptote, hours.efficiency, hours.midpoint) == pytest.approx((0.8, 1.5, 2e5 / 3.6e6), rel=1e-6)


# (A, B, C_mid) planted; tolerance per fit (A absolute, B and C_mid relative) and on the mean of the
# 20 fits (bias). Measured over 200 noise draws: the largest error of one fit is A 0.050, B 32%, C_mid
# 14% for the first curve (midpoint early: the fit sees the bend and the plateau) and A 0.11, B 25%,
# C_mid 11% for the second (midpoint at 40% of the compute: the plateau is extrapolated); mean errors
# over 20 draws below 0.005, 2%, 2%.
RECOVERY = [
    ((0.8, 1.5, 2e5), (0.06, 0.35, 0.20)),
    ((0.8, 2.5, 8e5), (0.08, 0.35, 0.20)),
]


@pytest.mark.parametrize("planted,tolerance", RECOVERY, ids=["midpoint-early", "midpoint-late"])
def test_known_parameters_are_recovered_from_noisy_curves(planted, tolerance):
    """20 noisy curves (sd 0.02 per point, 41 points, R0 from the noisy first point): every fit within
    the tolerance, the mean of the 20 within A ±0.015, B and C_mid ±6%."""
    a, b, c_mid = planted
    fits = [fit_compute_curve(COMPUTE, noisy(a, b, c_mid, seed)) for seed in range(20)]
    errors = np.array([(f.asymptote - a, f.efficiency / b - 1, f.midpoint / c_mid - 1) for f in fits])
    assert np.all(np.abs(errors) <= tolerance), np.abs(errors).max(axis=0)
    assert abs(errors[:, 0].mean()) <= 0.015 and np.all(np.abs(errors[:, 1:].mean(axis=0)) <= 0.06)


def test_the_earliest_compute_is_left_out():
    """Points below EARLY_FRACTION of the last compute do not move the fit (R0 still the first point)."""
    y = noisy(0.8, 1.5, 2e5, seed=3)
    early = COMPUTE < EARLY_FRACTION * COMPUTE[-1]
    garbage = y.copy()
    garbage[early & (COMPUTE > 0)] = 5.0
    a, b = fit_compute_curve(COMPUTE, y), fit_compute_curve(COMPUTE, garbage)
    assert (a.asymptote, a.efficiency, a.midpoint) == (b.asymptote, b.efficiency, b.midpoint)
    given = fit_compute_curve(COMPUTE, y, r0=R0)
    assert given.r0 == R0 and a.r0 == y[0]
    order = np.random.default_rng(0).permutation(COMPUTE.size)  # points in any order
    assert fit_compute_curve(COMPUTE[order], y[order]).asymptote == pytest.approx(a.asymptote)


FLAT = 0.3 + np.random.default_rng(1).normal(0, NOISE, COMPUTE.size)
CANNOT = [
    ("flat", COMPUTE, FLAT, "no rise: the curve's late mean"),
    ("falling", COMPUTE, 0.5 - 0.3 * COMPUTE / COMPUTE[-1], "no rise"),
    # the whole rise before the fitted compute: a plateau in noise, nothing to fit B or C_mid to
    ("plateau", COMPUTE, sigmoid_reward(COMPUTE, R0, 0.8, 3.0, 2e4) + FLAT - 0.3,
     r"no rise over the fitted compute: the curve's slope on log compute is .*one-sided p"),
    ("linear", COMPUTE, 0.1 + 0.5 * COMPUTE / COMPUTE[-1], "asymptote reached its bound .* has not bent over"),
    ("step", COMPUTE, np.where(COMPUTE > 1e6, 0.8, 0.1), "efficiency B reached its bound 20 .*a step"),
    ("too few", COMPUTE[:6], np.linspace(0.1, 0.5, 6), r"too few points: 5 after leaving out the earliest 10% .*need ≥ 6"),
    ("nan", [0.0, 1.0, np.nan], [0.1, 0.2, 0.3], "non-finite values at 1 point"),
    ("lengths", [0.0, 1.0], [0.1, 0.2, 0.3], "differ in length: 2 vs 3"),
    ("negative", [-1.0, 1.0, 2.0], [0.1, 0.2, 0.3], "negative compute"),
    ("no compute", [0.0, 0.0], [0.1, 0.2], "no compute"),
]


@pytest.mark.parametrize("compute,reward,why", [c[1:] for c in CANNOT], ids=[c[0] for c in CANNOT])
def test_a_fit_that_cannot_be_made_says_why(compute, reward, why):
    with pytest.raises(ComputeCurveError, match=why) as caught:
        fit_compute_curve(compute, reward)
    assert isinstance(caught.value, ValueError) and caught.value.reason == str(caught.value)


def test_intervals_over_seeds_are_student_t_per_parameter():
    fits = [fit_compute_curve(COMPUTE, noisy(0.8, 1.5, 2e5, seed)) for seed in range(4)]
    intervals = curve_intervals(fits)
    assert tuple(intervals["asymptote"]) == pytest.approx(tuple(student_t_ci([f.asymptote for f in fits])))
    assert tuple(intervals["efficiency"]) == pytest.approx(tuple(student_t_ci([f.efficiency for f in fits])))
    log_mid = student_t_ci([math.log(f.midpoint) for f in fits])  # C_mid: on log scale, a geometric mean
    assert tuple(intervals["midpoint"]) == pytest.approx(tuple(math.exp(v) for v in log_mid))
    typical = mean_curve(fits)
    assert typical.midpoint == pytest.approx(intervals["midpoint"].mean)
    assert typical.asymptote == pytest.approx(intervals["asymptote"].mean) and intervals["asymptote"].n == 4
    one = curve_intervals(fits[:1])["asymptote"]
    assert one.degenerate and math.isnan(one.lo)


def test_per_seed_t_intervals_cover_the_arms_parameters():
    """The report's interval (a fit per seed, Student's t over the seeds) on simulated arms of 3 seeds,
    the fewest a report shows intervals for in practice: each seed's own A ~ N(0.8, 0.03),
    B ~ N(1.5, 0.2), C_mid = 2e5·e^N(0, 0.15), then noise 0.02 per point. 200 arms (Monte Carlo se
    1.5%): each interval holds the arm's A, B and C_mid (geometric) in ≥ 90% of them. Measured with
    2,000 arms: A / B / C_mid 95.3 / 94.7 / 95.1% at 3 seeds, 95.6 / 94.5 / 95.2% at 4, 95.6 / 95.9 /
    95.5% at 5."""
    rng = np.random.default_rng(2024)
    trials, n = 200, 3
    covered = np.zeros(3)
    for _ in range(trials):
        fits = []
        for _ in range(n):
            a, b, c_mid = rng.normal(0.8, 0.03), rng.normal(1.5, 0.2), 2e5 * math.exp(rng.normal(0.0, 0.15))
            reward = sigmoid_reward(COMPUTE, R0, a, b, c_mid) + rng.normal(0.0, NOISE, COMPUTE.size)
            fits.append(fit_compute_curve(COMPUTE, reward))
        iv = curve_intervals(fits)
        covered += [iv["asymptote"].lo <= 0.8 <= iv["asymptote"].hi, iv["efficiency"].lo <= 1.5 <= iv["efficiency"].hi,
                    iv["midpoint"].lo <= 2e5 <= iv["midpoint"].hi]
    assert np.all(covered / trials >= 0.90), covered / trials
