"""Time to an event: the log-rank test against a textbook example with a known p-value, its exact
permutation form, the restricted mean time and its Kaplan–Meier variance."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from cancelctl.stats.survival import compare_times, logrank_test, restricted_mean, runs_for_logrank

# Freireich et al. (1963), Blood 21:699–716, as tabulated by Gehan (1965), Biometrika 52:203–223:
# weeks in remission of 42 leukaemia patients, 6-MP vs placebo (1 = relapse, 0 = censored).
SIX_MP = [6, 6, 6, 6, 7, 9, 10, 10, 11, 13, 16, 17, 19, 20, 22, 23, 25, 32, 32, 34, 35]
SIX_MP_RELAPSED = [1, 1, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]
PLACEBO = [1, 1, 2, 2, 3, 4, 4, 5, 5, 8, 8, 8, 8, 11, 11, 12, 12, 15, 17, 22, 23]


def test_logrank_on_the_textbook_example():
    """Kleinbaum & Klein, "Survival Analysis: A Self-Learning Text" (3rd ed. 2012), ch. 2 on this
    data: O − E = −10.25 for 6-MP (9 relapses observed, 19.25 expected), Var = 6.2570, log-rank
    chi-square = 16.79 on 1 df, P = 0.0000 (4.2e-5; R's survdiff: Chisq = 16.8, p = 4e-05)."""
    test = logrank_test(SIX_MP, SIX_MP_RELAPSED, PLACEBO, [1] * 21)
    assert not test.exact  # C(42, 21) relabellings: the normal approximation
    assert test.observed == 9 and test.expected == pytest.approx(19.25, abs=0.01)
    assert test.variance == pytest.approx(6.2570, abs=1e-4)
    assert test.chi2 == pytest.approx(16.79, abs=0.01)
    two_sided = 2 * min(test.p_sooner, test.p_later)
    assert two_sided == pytest.approx(4.17e-5, rel=0.01) and two_sided == pytest.approx(stats.chi2.sf(test.chi2, 1), rel=1e-9)
    assert test.z < 0 and test.p_later < 1e-4  # 6-MP relapses later


def test_logrank_agrees_with_scipy():
    rng = np.random.default_rng(3)
    for _ in range(5):
        ta, tb = rng.integers(1, 60, 12).astype(float), rng.integers(1, 60, 15).astype(float)
        ea, eb = rng.random(12) < 0.7, rng.random(15) < 0.5
        ours = logrank_test(ta, ea, tb, eb, max_permutations=0)
        theirs = stats.logrank(stats.CensoredData(uncensored=ta[ea], right=ta[~ea]),
                               stats.CensoredData(uncensored=tb[eb], right=tb[~eb]))
        assert ours.z == pytest.approx(theirs.statistic, rel=1e-9)


def _brute_force_p(ta, ea, tb, eb) -> float:
    pooled_t, pooled_e = list(ta) + list(tb), list(ea) + list(eb)
    observed = logrank_test(ta, ea, tb, eb, max_permutations=0).z
    zs = []
    for chosen in itertools.combinations(range(len(pooled_t)), len(ta)):
        rest = [i for i in range(len(pooled_t)) if i not in chosen]
        zs.append(logrank_test([pooled_t[i] for i in chosen], [pooled_e[i] for i in chosen],
                               [pooled_t[i] for i in rest], [pooled_e[i] for i in rest], max_permutations=0).z)
    return float(np.mean(np.asarray(zs) >= observed - 1e-9))


def test_exact_permutation_p_at_four_runs_an_arm():
    """3 of 4 runs collapse (steps 190, 283, 300), none of 4 in the other arm, budget 300: only the
    relabellings putting all three collapses in the arm are as extreme — 5 of C(8, 4) = 70."""
    test = logrank_test([190, 283, 300, 300], [1, 1, 1, 0], [300] * 4, [0] * 4)
    assert test.exact and test.p_sooner == pytest.approx(5 / 70) and test.p_later == 1.0
    assert test.p_sooner > stats.norm.sf(test.z)  # the normal approximation would claim more
    ta, ea, tb, eb = [40, 90, 100, 100], [1, 1, 0, 0], [70, 100, 100, 100], [1, 0, 0, 0]
    assert logrank_test(ta, ea, tb, eb).p_sooner == pytest.approx(_brute_force_p(ta, ea, tb, eb))


def test_no_events_no_evidence():
    test = logrank_test([100, 100], [0, 0], [100, 100], [0, 0])
    assert test.p_sooner == test.p_later == 1.0 and test.z == 0.0


def test_restricted_mean():
    # no censoring: the mean of min(t, τ)
    assert restricted_mean([2, 4, 6, 8], [1, 1, 1, 1], 5).mean == pytest.approx((2 + 4 + 5 + 5) / 4)
    # placebo of the example: every relapse by week 23, so RMST(23) = the mean time 182/21
    assert restricted_mean(PLACEBO, [1] * 21, 23).mean == pytest.approx(182 / 21)
    # nobody has the event: τ exactly, with no variance
    none = restricted_mean([300, 300], [0, 0], 300)
    assert (none.mean, none.variance) == (300.0, 0.0)
    # one event of two at t = 1, the other run censored at 2, τ = 2: S = 1 on [0,1), 1/2 on [1,2):
    # area 1.5; A_1 = 0.5, variance 0.5² · 1 / (2 · 1) = 0.125 [Klein & Moeschberger §4.5]
    one = restricted_mean([1, 2], [1, 0], 2)
    assert one.mean == pytest.approx(1.5) and one.variance == pytest.approx(0.125)


def test_compare_times_sign_and_horizon():
    soon = compare_times([50, 60, 70, 100], [1, 1, 1, 0], [100] * 4, [0] * 4)
    assert soon.horizon == 100 and soon.difference == pytest.approx(-(50 + 40 + 30) / 4)
    assert soon.ci_lo < soon.difference < soon.ci_hi and soon.logrank.z > 0


def test_runs_for_logrank():
    # Schoenfeld: 4 (1.645 + 0.8416)² / (ln 2)² = 51.5 events for HR 2; at half the runs having one: 52 runs an arm
    assert runs_for_logrank(np.log(2), 0.5) == 52
    assert runs_for_logrank(0.0, 0.5) is None and runs_for_logrank(1.0, 0.0) is None
