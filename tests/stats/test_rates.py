"""Rates of an outcome over runs: Boschloo's exact test against values worked by hand and against
Fisher's (scipy), its level checked exactly; Newcombe's interval against the paper's own table; the
sign test with its Clopper–Pearson interval; the planning numbers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from cancelctl.stats.rates import (
    compare_rates,
    newcombe_interval,
    runs_for_rate_difference,
    runs_for_share,
    share_test,
    wilson_interval,
)


def test_boschloo_on_tables_worked_by_hand():
    # 4/4 vs 0/4: the observed table is the only one as extreme (Fisher p 1/70), so Boschloo's p is
    # sup over π of P(X_a = 4, X_b = 0) = π⁴(1 − π)⁴, at π = 1/2: 1/256
    assert compare_rates(4, 4, 0, 4).p_greater == pytest.approx(1 / 256, rel=1e-6)
    # 3/4 vs 0/4: as or more extreme by Fisher's p are (3, 0), (4, 0), (4, 1); at π = 1/2 they weigh
    # (4·1 + 1·1 + 1·4) / 256 = 9/256 (Fisher's conditional p is 5/70 = 0.071)
    three = compare_rates(3, 4, 0, 4)
    assert three.p_greater == pytest.approx(9 / 256, rel=1e-6) and three.p_less == 1.0
    assert three.difference == 0.75
    # the mirror table is the mirror test
    assert compare_rates(0, 4, 3, 4).p_less == pytest.approx(9 / 256, rel=1e-6)


def test_boschloo_is_never_above_fishers_p():
    """Boschloo's test is uniformly more powerful than Fisher's exact test (it uses Fisher's p as
    its statistic and maximises over the nuisance rate); checked on every 5-vs-5 table."""
    for k_a, k_b in itertools.product(range(6), repeat=2):
        if k_a + k_b in (0, 10):
            continue
        fisher = stats.fisher_exact([[k_a, k_b], [5 - k_a, 5 - k_b]], alternative="greater").pvalue
        assert compare_rates(k_a, 5, k_b, 5).p_greater <= fisher + 1e-9, (k_a, k_b)


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5, 0.8])
def test_boschloo_keeps_its_level_exactly(rate):
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


@pytest.mark.parametrize(
    "counts,expected",
    [  # Newcombe 1998, Stat. Med. 17:873–890, Table II, method 10 (hybrid score, no continuity correction)
        ((56, 70, 48, 80), (0.0524, 0.3339)),
        ((9, 10, 3, 10), (0.1705, 0.8090)),
        ((5, 56, 0, 29), (-0.0381, 0.1926)),
        ((0, 10, 0, 20), (-0.1611, 0.2775)),
        ((10, 10, 0, 20), (0.6791, 1.0000)),
    ],
)
def test_newcombe_interval_matches_the_papers_table(counts, expected):
    lo, hi = newcombe_interval(*counts)
    assert (round(lo, 4), round(hi, 4)) == expected


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
