"""The safe t-test's e-process (`cancelctl.stats.sequential`): its closed form against the integral it
stands for, mean 1 under the null, scale invariance, growth under an effect, the decision walk —
and, by simulation, the claim it exists for: however many looks, a true null is wrongly "supported"
at a rate ≤ α, where the fixed-n test repeated at every look exceeds α."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from cancelctl.stats.rates import wilson_interval
from cancelctl.stats.sequential import (
    PRIOR_VARIANCE,
    LookEvidence,
    e_value,
    first_decision,
    log_e_value,
    look_evidence,
    max_e_value,
)

ALPHA = 0.05
# the lab's seed-to-seed spread of a claim's paired differences: D-P1-steps (steps to κ, dfpo − gspo)
# on seeds 20–24, sd 43.3 steps (README Science; lab-claims-dfpo's claims table)
LAB_SD = 43.3
SWEEPS = 4000


def _half_normal_bayes_factor(t: float, n: int, g: float) -> float:
    """The e-value as its definition: the noncentral-t likelihood ratio of t, averaged over δ > 0 with a
    half-normal prior of variance g."""
    def integrand(delta: float) -> float:
        return stats.nct.pdf(t, n - 1, math.sqrt(n) * delta) * 2 * stats.norm.pdf(delta, scale=math.sqrt(g))

    return integrate.quad(integrand, 0, np.inf)[0] / stats.t.pdf(t, n - 1)


@pytest.mark.parametrize("n", [2, 3, 5, 12])
@pytest.mark.parametrize("t", [-2.0, 0.0, 1.0, 3.5])
def test_closed_form_is_the_half_normal_mixture_of_noncentral_t_ratios(n, t):
    assert float(np.exp(log_e_value(t, n, 1))) == pytest.approx(_half_normal_bayes_factor(t, n, PRIOR_VARIANCE), rel=1e-7)
    # the mirror side is the same integral over δ < 0
    assert float(np.exp(log_e_value(t, n, -1))) == pytest.approx(_half_normal_bayes_factor(-t, n, PRIOR_VARIANCE), rel=1e-7)


@pytest.mark.parametrize("n", [2, 3, 12, 40])
@pytest.mark.parametrize("g", [0.5, PRIOR_VARIANCE])
def test_the_e_value_has_mean_one_under_the_null_at_every_n(n, g):
    """Under δ = 0, t has the central t density: E[E_n] = 1 exactly (a likelihood ratio), so Markov's
    bound 1/α holds at every fixed n — and, the sequence being a martingale, at every stopping time."""
    mean = stats.t.expect(lambda t: float(np.exp(log_e_value(t, n, 1, g))), args=(n - 1,))
    assert mean == pytest.approx(1.0, abs=1e-7)


def test_by_simulation_the_e_value_averages_one_under_the_null_and_less_deeper_in_it():
    rng = np.random.default_rng(11)
    n, reps = 6, 100_000
    for delta, check in ((0.0, lambda m, se: abs(m - 1.0) < 4 * se), (-0.5, lambda m, se: m < 1.0 - 4 * se)):
        d = rng.standard_normal((reps, n)) + delta
        t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
        e = np.exp(log_e_value(t, n, 1))
        assert check(e.mean(), e.std() / math.sqrt(reps)), (delta, e.mean())


def test_invariant_to_the_scale_of_the_differences():
    d = np.array([3.0, -1.0, 4.0, 1.5, 5.0, 2.5])
    base = look_evidence(d.mean(), d.std(ddof=1), d.size, "higher")
    for scale in (1e-4, 43.3, 1e6):
        x = d * scale
        scaled = look_evidence(x.mean(), x.std(ddof=1), x.size, "higher")
        assert scaled.e_for[0] == pytest.approx(base.e_for[0], rel=1e-9)
        assert scaled.e_against == pytest.approx(base.e_against, rel=1e-9)


def test_grows_under_an_effect_and_shrinks_under_none():
    rng = np.random.default_rng(3)
    reps = 4000
    for delta, grows in ((1.0, True), (0.0, False)):
        d = rng.standard_normal((reps, 24)) + delta
        medians = []
        for n in (4, 8, 16, 24):
            t = d[:, :n].mean(1) / (d[:, :n].std(1, ddof=1) / math.sqrt(n))
            medians.append(float(np.median(log_e_value(t, n, 1))))
        assert (np.diff(medians) > 0).all() if grows else (np.diff(medians) < 0).all(), (delta, medians)


def test_limits_one_difference_and_equal_differences():
    assert e_value(0.3, math.nan, 1, 1) == 1.0  # one seed: nothing scale-free to learn from
    # every difference the same (sd 0): t is infinite, E its finite bound 2(1+ng)^((n−1)/2)·F_n(√(ng·n))
    assert e_value(0.2, 0.0, 5, 1) == pytest.approx(max_e_value(5))
    assert e_value(0.2, 0.0, 5, -1) < 1.0
    assert e_value(0.0, 0.0, 5, 1) == pytest.approx(float(np.exp(log_e_value(0.0, 5, 1))))
    assert max_e_value(5) > 160 > max_e_value(4)  # g = 2: 5 seeds can clear 8 claims' Bonferroni bar
    assert max_e_value(5, g=1.0) < 160


def test_directions_and_margins_shift_the_differences():
    d = np.array([0.05, 0.07, 0.02, 0.06, 0.04, 0.05])
    mean, sd, n = d.mean(), d.std(ddof=1), d.size
    lower = look_evidence(mean, sd, n, "lower")
    higher = look_evidence(mean, sd, n, "higher")
    assert lower.e_for == (higher.e_against,) and lower.e_against == higher.e_for[0]
    # not_higher with margin 0.1 is "lower" on d − 0.1; not_lower with margin m is "higher" on d + m
    assert look_evidence(mean, sd, n, "not_higher", 0.1).e_for[0] == pytest.approx(look_evidence(mean - 0.1, sd, n, "lower").e_for[0])
    assert look_evidence(mean, sd, n, "not_lower", 0.1).e_for[0] == pytest.approx(look_evidence(mean + 0.1, sd, n, "higher").e_for[0])
    similar = look_evidence(mean, sd, n, "similar", 0.1)
    assert len(similar.e_for) == 2 and min(similar.e_for) > 1
    assert look_evidence(mean, sd, n, "similar", 0.01).e_against > 20  # well outside ±0.01
    with pytest.raises(ValueError):
        look_evidence(mean, sd, n, "sideways")


def test_the_first_decision_stands_and_tost_needs_both_sides():
    looks = [LookEvidence(4, (3.0,), 1.0), LookEvidence(6, (25.0,), 1.0), LookEvidence(8, (2.0,), 30.0)]
    decision = first_decision(looks, level=0.05)
    assert (decision.status, decision.look, decision.n, decision.e_for) == ("supported", 2, 6, 25.0)
    assert decision.p_for == pytest.approx(0.04)
    assert first_decision(looks[:1], 0.05).status == "inconclusive"
    assert first_decision([LookEvidence(4, (1.0,), 40.0)], 0.05).status == "contradicted"
    # TOST: both sides at one look (then the interval shown at that look lies inside both margins):
    # one side crossed at look 1 and the other at look 2 is not yet a decision
    tost = [LookEvidence(4, (30.0, 2.0), 0.1), LookEvidence(6, (5.0, 21.0), 0.1), LookEvidence(8, (22.0, 25.0), 0.1)]
    assert first_decision(tost[:2], 0.05).status == "inconclusive"
    decided = first_decision(tost, 0.05)
    assert (decided.status, decided.look, decided.e_for) == ("supported", 3, 22.0)
    # a Bonferroni share of α raises the bar
    assert first_decision(looks, level=0.05 / 8).status == "inconclusive"


def _t_at_looks(d: np.ndarray, looks: list[int]) -> list[np.ndarray]:
    return [d[:, :n].mean(1) / (d[:, :n].std(1, ddof=1) / math.sqrt(n)) for n in looks]


def _rate(hits: np.ndarray) -> tuple[float, float, float]:
    k, n = int(hits.sum()), hits.size
    lo, hi = wilson_interval(k, n)
    return k / n, lo, hi


@pytest.mark.parametrize("looks", [[3, 5, 7, 9, 11], [5, 7, 9, 11, 12]])
def test_simulated_null_sweeps_the_sequential_test_keeps_alpha_where_repeated_fixed_n_tests_do_not(looks):
    """4,000 simulated sweeps of one claim under a true null, the differences with the lab's spread:
    the chance of any false "supported" over all looks stays ≤ α (the Wilson 95% interval's upper end),
    while the one-sided paired t-test at α repeated at every look exceeds α (its interval's lower end).
    The one-sided t-test at α is the fixed-n verdict's test at twice its level (the report's verdict
    takes each side at α/2); benchmarks/bench_sequential.py also runs the bootstrap-t it replaced."""
    rng = np.random.default_rng(2023)
    d = rng.normal(0.0, LAB_SD, size=(SWEEPS, looks[-1]))
    sequential = np.zeros(SWEEPS, bool)
    naive = np.zeros(SWEEPS, bool)
    for n, t in zip(looks, _t_at_looks(d, looks)):
        sequential |= log_e_value(t, n, 1) >= math.log(1 / ALPHA)
        naive |= stats.t.sf(t, n - 1) < ALPHA
    seq_rate, _, seq_hi = _rate(sequential)
    naive_rate, naive_lo, _ = _rate(naive)
    print(f"looks {looks}: sequential {seq_rate:.4f} (≤ {seq_hi:.4f}), repeated fixed-n {naive_rate:.4f} (≥ {naive_lo:.4f})")
    assert seq_hi <= ALPHA
    assert naive_lo > ALPHA


def test_simulated_null_sweeps_of_eight_claims_keep_the_family_wise_error():
    """Eight null claims a sweep (as lab-claims-dfpo), each at α/8 (Bonferroni on e-values), looks at
    5, 7, 9, 11, 12 seeds; heavy-tailed differences (t, 3 df) too: no false "supported" in any claim
    at any look at a rate ≤ α. A directional null deeper than δ = 0 (δ = −0.3) crosses less often."""
    rng = np.random.default_rng(7)
    looks, claims = [5, 7, 9, 11, 12], 8
    for draw in (lambda size: rng.normal(0.0, LAB_SD, size), lambda size: rng.standard_t(3, size)):
        d = draw((SWEEPS, claims, looks[-1]))
        any_false = np.zeros(SWEEPS, bool)
        for n in looks:
            t = d[..., :n].mean(-1) / (d[..., :n].std(-1, ddof=1) / math.sqrt(n))
            any_false |= (log_e_value(t, n, 1) >= math.log(claims / ALPHA)).any(axis=1)
        assert _rate(any_false)[2] <= ALPHA
    at_zero, deeper = (rng.normal(delta, 1.0, size=(SWEEPS, looks[-1])) for delta in (0.0, -0.3))
    crossed = []
    for d in (at_zero, deeper):
        hits = np.zeros(SWEEPS, bool)
        for n, t in zip(looks, _t_at_looks(d, looks)):
            hits |= log_e_value(t, n, 1) >= math.log(1 / ALPHA)
        crossed.append(hits.mean())
    assert crossed[1] <= crossed[0] <= ALPHA
