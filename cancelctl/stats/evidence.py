"""The paired evidence for one claim on one comparison group, before multiplicity correction: the
effect arm − versus over seeds with its Student's t CI, and the one-sided p-values of the test that
would support the claim and of the one that would contradict it, per direction (higher / lower,
non-inferiority, equivalence by TOST). Arrays in, numbers out. The decisions behind them are stated
in `cancelctl.stats.verdicts`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from cancelctl.stats.intervals import student_t_ci
from cancelctl.stats.paired import MIN_PAIRED_SEEDS, paired_bootstrap_test
from cancelctl.stats.samples import SeedLike

ALPHA = 0.05
POWER = 0.8
CONFIDENCE = 0.95
MIN_VERDICT_SEEDS = 4
Status = Literal["supported", "contradicted", "inconclusive", "cannot judge"]


@dataclass(frozen=True)
class Evidence:
    """The paired statistics of one comparison, before multiplicity correction.

    effect = mean over seeds of d = arm − versus, with its Student's t CI (the tables' interval); p_for
    is the p-value of the test whose rejection supports the claim, p_against of the one whose
    rejection contradicts it.
    """

    n: int
    effect: float
    ci_lo: float
    ci_hi: float
    sd: float
    margin: float
    distance: float  # of the effect from the decision boundary (signed: > 0 is the claim's side)
    p_for: float
    p_against: float


def paired_evidence(
    x: Sequence[float] | np.ndarray,
    versus: Sequence[float] | np.ndarray,
    direction: str,
    margin: float = 0.0,
    *,
    n_boot: int = 10_000,
    seed: SeedLike = 0,
) -> Evidence:
    """Test `direction` of x − versus (paired by position = seed). Needs ≥ 3 pairs for p-values."""
    xs, base = np.asarray(x, float), np.asarray(versus, float)
    d = xs - base
    ci = student_t_ci(d, confidence=CONFIDENCE)
    # equal differences have sd 0 exactly (np.std can give ~1e-17 for them, by CPU)
    sd = (0.0 if np.ptp(d) == 0.0 else float(d.std(ddof=1))) if d.size > 1 else float("nan")

    def p(shift: float, alternative: str) -> float:  # H1: mean(d − shift) > 0 ("greater") / < 0
        return paired_bootstrap_test(xs - shift, base, n_boot=n_boot, seed=seed, alternative=alternative).p

    m = float(margin)
    if direction == "higher":
        p_for, p_against, distance = p(0.0, "greater"), p(0.0, "less"), ci.mean
    elif direction == "lower":
        p_for, p_against, distance = p(0.0, "less"), p(0.0, "greater"), -ci.mean
    elif direction == "not_higher":  # non-inferiority, mirrored: effect < m
        p_for, p_against, distance = p(m, "less"), p(m, "greater"), m - ci.mean
    elif direction == "not_lower":  # non-inferiority: effect > −m
        p_for, p_against, distance = p(-m, "greater"), p(-m, "less"), ci.mean + m
    elif direction == "similar":  # TOST: −m < effect < m; outside either side (Bonferroni over the two)
        p_for = max(p(-m, "greater"), p(m, "less"))
        p_against = min(1.0, 2.0 * min(p(m, "greater"), p(-m, "less")))
        distance = m - abs(ci.mean)
    else:
        raise ValueError(f"unknown direction {direction!r}")
    if d.size < MIN_PAIRED_SEEDS:  # no test (the paired test's p is NaN; max/min would hide it)
        p_for = p_against = math.nan
    return Evidence(int(d.size), ci.mean, ci.lo, ci.hi, sd, m, distance, p_for, p_against)


def decide(p_for_holm: float, p_against_holm: float, alpha: float = ALPHA) -> Status:
    if p_for_holm < alpha:
        return "supported"
    if p_against_holm < alpha:
        return "contradicted"
    return "inconclusive"
