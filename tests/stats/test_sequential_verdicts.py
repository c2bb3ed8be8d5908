"""A sweep's claims judged at every look (`cancelctl.stats.sequential_verdicts`): the first crossing
stands, looks count where a row's seeds grew, Bonferroni over the rows, outcome claims judged once."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from cancelctl.stats.sequential import max_e_value
from cancelctl.stats.sequential_verdicts import SEQUENTIAL_TEST, judge_looks
from cancelctl.stats.verdicts import Verdict


def row(claim: str, n: int, effect: float, sd: float, *, status: str = "inconclusive", kind: str = "mean", **extra) -> Verdict:
    return Verdict(claim, "src", "statement", "metric", "key", "key", extra.pop("direction", "higher"), "a", "b", "",
                   status, n_seeds=n, effect=effect, sd=sd, kind=kind, **extra)


def test_each_row_is_decided_at_its_first_crossing_and_keeps_that_looks_numbers():
    # claim x: all differences equal (sd 0) — E is max_e_value(n): 54 at 4 seeds, 242 at 5 (bar: 2 rows / 0.05 = 40)
    looks = [
        [row("x", 3, 1.0, 0.0), row("y", 3, 0.1, 1.0)],
        [row("x", 4, 1.0, 0.0, ci_lo=0.9), row("y", 5, 0.1, 1.0)],
        [row("x", 5, -1.0, 0.5), row("y", 7, 0.05, 1.0)],  # x's later data would contradict: too late
    ]
    x, y = judge_looks(looks)
    assert (x.verdict.status, x.decided_at, x.looks, x.verdict.n_seeds) == ("supported", 2, 2, 4)
    assert x.verdict.ci_lo == 0.9 and x.verdict.test == SEQUENTIAL_TEST and x.level == pytest.approx(0.025)
    assert x.e_for == pytest.approx(max_e_value(4)) and x.verdict.p == pytest.approx(1 / max_e_value(4))
    assert x.verdict.p_holm == pytest.approx(2 / max_e_value(4))
    assert not x.wants_seeds
    assert (y.verdict.status, y.decided_at, y.looks, y.verdict.n_seeds) == ("inconclusive", None, 3, 7)
    assert y.wants_seeds


def test_a_look_that_added_no_seeds_to_a_row_is_not_another_look_at_it():
    looks = [[row("x", 4, 0.1, 1.0)], [row("x", 4, 0.1, 1.0)], [row("x", 6, 0.1, 1.0)]]
    (x,) = judge_looks(looks)
    assert x.looks == 2 and x.decided_at is None


def test_rows_without_two_seeds_or_numbers_cannot_be_judged_and_want_no_seeds():
    missing = row("m", 0, math.nan, math.nan, status="cannot judge", reason="not logged: key")
    (m,) = judge_looks([[missing], [missing]])
    assert m.verdict.status == "cannot judge" and m.verdict.reason == "not logged: key"
    assert (m.looks, m.decided_at, m.wants_seeds) == (0, None, False)
    # 2 and 3 seeds: the fixed-n verdict would not judge them ("a verdict needs ≥ 4"); the e-process does
    few = row("f", 3, 1.0, 0.0, status="cannot judge", reason="3 shared seeds; a verdict needs ≥ 4")
    (f,) = judge_looks([[few]], alpha=0.1)
    assert f.verdict.status == "supported" and f.verdict.reason == ""  # E(3) = 13.8 ≥ 1/0.1


def test_outcome_claims_are_judged_once_at_the_last_look_with_bonferroni():
    rate = row("c", 8, 0.5, math.nan, kind="collapse_rate", p=0.004, p_against=1.0, test="Boschloo exact", n_versus=8,
               ci_lo=0.1, ci_hi=0.8)
    paired = row("p", 8, 0.0, 1.0)
    judged = judge_looks([[replace(rate, p=0.5), paired], [rate, paired]])
    c = judged[0]
    assert not c.sequential and c.verdict.test == "Boschloo exact" and not c.wants_seeds
    assert c.verdict.p_holm == pytest.approx(0.008) and c.verdict.status == "supported" and c.decided_at == 2
    # among 16 rows the same p is not enough: 16 × 0.004 = 0.064
    assert judge_looks([[rate] + [paired] * 15])[0].verdict.status == "inconclusive"


def test_tost_needs_both_margins_and_margins_shift_the_differences():
    inside = row("s", 6, 0.0, 0.0, direction="similar", margin=0.1)  # all differences 0, margin ±0.1
    (s,) = judge_looks([[inside]])
    assert s.verdict.status == "supported"
    lower = row("n", 6, 0.2, 0.0, direction="not_higher", margin=0.1)  # 0.2 > margin: contradicted
    (n,) = judge_looks([[lower]])
    assert n.verdict.status == "contradicted"
