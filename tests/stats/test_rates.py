"""Rates of an outcome over runs: the exact unconditional score test against values worked by hand and
against scipy's (`barnard_exact`, pooled), its level checked exactly; the interval that inverts it,
checked to agree with the test on every table and to cover exactly; the sign test with its
Clopper–Pearson interval; the planning numbers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from cancelctl.stats.rates import (
    compare_rates,
    runs_for_rate_difference,
    runs_for_share,
    share_test,
    wilson_interval,
)


def test_the_exact_test_on_tables_worked_by_hand():
    # 4/4 vs 0/4: the observed table is the only one as extreme, so the p is sup over π of
    # P(X_a = 4, X_b = 0) = π⁴(1 − π)⁴, at π = 1/2: 1/256
    assert compare_rates(4, 4, 0, 4).p_greater == pytest.approx(1 / 256, rel=1e-6)
    # 3/4 vs 0/4: as or more extreme by the score statistic (2.19, 2.19, 2.83) are (3, 0), (4, 1),
    # (4, 0); at π = 1/2 they weigh (4·1 + 1·4 + 1·1) / 256 = 9/256 (Fisher's conditional p is 5/70)
    three = compare_rates(3, 4, 0, 4)
    assert three.p_greater == pytest.approx(9 / 256, rel=1e-6) and three.p_less == 1.0
    assert three.difference == 0.75
    # the mirror table is the mirror test
    assert compare_rates(0, 4, 3, 4).p_less == pytest.approx(9 / 256, rel=1e-6)


def test_the_exact_test_is_scipys_pooled_barnard_test():
    """At δ0 = 0 the score statistic is the pooled Z: the test is Suissa & Shuster's, scipy's
    `barnard_exact(pooled=True)`; checked on every 5-vs-4 table, each way. One differs: 1/5 vs 2/4
    ties 4/5 vs 4/4 (Z = −0.3/√(2/9 · 0.45) = −0.2/√(8/81 · 0.45) = −0.9487), which scipy's floating
    point leaves out and "at least as extreme" counts in."""
    for k_a, k_b in itertools.product(range(6), range(5)):
        table = [[k_a, k_b], [5 - k_a, 4 - k_b]]
        test = compare_rates(k_a, 5, k_b, 4)
        for alternative, p in (("greater", test.p_greater), ("less", test.p_less)):
            want = stats.barnard_exact(table, alternative=alternative, pooled=True).pvalue
            if (k_a, k_b, alternative) == (1, 2, "less"):
                rates = np.linspace(0, 1, 1001)  # max(f + g) ≤ max f + max g, g the tied table's chance
                assert want < p <= want + (stats.binom.pmf(4, 5, rates) * stats.binom.pmf(4, 4, rates)).max()
                continue
            assert p == pytest.approx(want, abs=1e-6), (k_a, k_b, alternative)


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5, 0.8])
def test_the_exact_test_keeps_its_level_exactly(rate):
    """Under equal rates the chance of p < α, summed over every possible 5-vs-5 outcome, is ≤ α."""
    size = 0.0
    for k_a, k_b in itertools.product(range(6), repeat=2):
        if compare_rates(k_a, 5, k_b, 5).p_greater < 0.05:
            size += stats.binom.pmf(k_a, 5, rate) * stats.binom.pmf(k_b, 5, rate)
    assert 0 < size <= 0.05


def test_no_event_or_every_event_carries_no_evidence():
    for k in (0, 4):
        test = compare_rates(k, 4, k, 4)
        assert test.p_greater == test.p_less == 1.0 and test.difference == 0.0
        assert test.ci_lo < 0 < test.ci_hi


def test_the_interval_seen_beside_an_inconclusive_rate_now_reaches_0():
    """lab-claims-mismatch: 3/4 vs 0/4 read "inconclusive" (claim p 0.070) beside Newcombe's
    [+0.085, +0.954], an interval of another method that excluded 0."""
    test = compare_rates(3, 4, 0, 4)
    assert 2 * test.p_greater == pytest.approx(0.0703, abs=1e-4)
    assert test.ci_lo < 0 < test.ci_hi


@pytest.mark.parametrize("n_a,n_b", [(4, 4), (5, 5), (3, 6)])
def test_the_interval_excludes_0_exactly_when_the_test_rejects(n_a, n_b):
    """On every table: the 95% interval lies above 0 exactly when the claim p (twice the one-sided)
    of "rate a > rate b" is below 0.05, below 0 exactly when that of "rate a < rate b" is."""
    for k_a, k_b in itertools.product(range(n_a + 1), range(n_b + 1)):
        test = compare_rates(k_a, n_a, k_b, n_b)
        assert test.ci_lo <= test.difference <= test.ci_hi, (k_a, k_b)
        assert (test.ci_lo > 0) == (2 * test.p_greater < 0.05), (k_a, k_b, test)
        assert (test.ci_hi < 0) == (2 * test.p_less < 0.05), (k_a, k_b, test)


@pytest.mark.parametrize("n_a,n_b", [(4, 4), (5, 3)])
def test_the_interval_covers_at_least_95_percent_exactly(n_a, n_b):
    """Exact coverage (every table weighed by its probability) at 49 pairs of true rates: ≥ 95%."""
    intervals = {(k_a, k_b): (compare_rates(k_a, n_a, k_b, n_b).ci_lo, compare_rates(k_a, n_a, k_b, n_b).ci_hi)
                 for k_a, k_b in itertools.product(range(n_a + 1), range(n_b + 1))}
    worst = 1.0
    for p_a, p_b in itertools.product(np.linspace(0.05, 0.95, 7), repeat=2):
        covered = sum(stats.binom.pmf(k_a, n_a, p_a) * stats.binom.pmf(k_b, n_b, p_b)
                      for (k_a, k_b), (lo, hi) in intervals.items() if lo - 1e-9 <= p_a - p_b <= hi + 1e-9)
        worst = min(worst, covered)
    print(f"{n_a} vs {n_b}: worst coverage {worst:.4f}")
    assert worst >= 0.95


def test_wilson_interval_stays_inside_zero_one():
    assert wilson_interval(0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    lo, hi = wilson_interval(10, 10)
    assert hi == pytest.approx(1.0) and lo == pytest.approx(0.7225, abs=1e-4)


def test_sign_test_and_clopper_pearson():
    three = share_test(3, 3)
    assert three.p_greater == 0.125 and three.p_less == 1.0
    assert (three.ci_lo, three.ci_hi) == (pytest.approx(0.2924, abs=1e-4), 1.0)  # (α/2)^(1/3) = 0.2924
    eight = share_test(8, 10)
    assert eight.p_greater == pytest.approx(56 / 1024)  # P(X ≥ 8 | 10, 1/2) = (45 + 10 + 1)/1024
    assert eight.ci_lo == pytest.approx(stats.beta.ppf(0.025, 8, 3)) and eight.ci_hi == pytest.approx(stats.beta.ppf(0.975, 9, 2))


def test_planning_numbers():
    # Fleiss' formula by hand for 0.5 vs 0.2 at one-sided 5%, 80%: ((1.645·√(2·.35·.65) + 0.8416·√(.25+.16))/0.3)² = 30.2
    assert runs_for_rate_difference(0.5, 0.2) == 31
    assert runs_for_rate_difference(0.3, 0.3) is None
    # the sign test needs 5 runs at a true share of 1 (1/2⁵ < 0.05 ≤ 1/2⁴), and more at 0.8
    assert runs_for_share(1.0) == 5
    needed = runs_for_share(0.8)
    ks = np.arange(needed + 1)
    power = stats.binom.pmf(ks[stats.binom.sf(ks - 1, needed, 0.5) <= 0.05], needed, 0.8).sum()
    assert power >= 0.8 and runs_for_share(0.5) is None


@pytest.mark.parametrize("n", range(5, 13))
def test_the_sign_tests_interval_excludes_one_half_exactly_when_it_rejects(n):
    """Clopper–Pearson's interval inverts the two one-sided binomial tests at 2.5% each: an alert
    order's interval lies above 1/2 exactly when its claim p is below 0.05, below it likewise."""
    for k in range(n + 1):
        test = share_test(k, n)
        assert (test.ci_lo > 0.5) == (2 * test.p_greater < 0.05), (k, n)
        assert (test.ci_hi < 0.5) == (2 * test.p_less < 0.05), (k, n)
