"""The paired evidence for one claim on one comparison group, before multiplicity correction: the
effect arm − versus over seeds with its Student's t CI, and the p-values of the test that would
support the claim and of the one that would contradict it, per direction (higher / lower,
non-inferiority, equivalence by TOST). Arrays in, numbers out. The decisions behind them are stated
in `cancelctl.stats.verdicts`.

One test gives the verdict and the interval shown beside it: the paired t-test (`paired_t_test`),
whose inversion is the 95% Student's t interval (`student_t_ci`). A 95% two-sided interval bounds
each side at 2.5%, so each one-sided test is taken at α/2 and its p is reported doubled:

    p = min(1, 2 · p_one-sided)                                                    (claim p)

and p < α = 0.05 exactly when the 95% interval lies wholly on that side of the boundary (0, or the
margin). Holm's adjustment only raises p, so a supported claim's interval never reaches its
boundary and a contradicted one's never reaches into the predicted side. The price: a true null is
wrongly supported at ≤ α/2 per claim (docs/claims.md#claims: "at most α/2 of the time"), and a one-sided claim needs the
seeds of a two-sided test (`paired.seeds_for_power` at α/2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from cancelctl.spec.directions import bounds_of
from cancelctl.stats.intervals import student_t_ci
from cancelctl.stats.paired import paired_t_test

ALPHA = 0.05
POWER = 0.8
CONFIDENCE = 0.95
MIN_VERDICT_SEEDS = 4
Status = Literal["supported", "contradicted", "inconclusive", "cannot judge"]


@dataclass(frozen=True)
class Evidence:
    """The paired statistics of one comparison, before multiplicity correction.

    effect = mean over seeds of d = arm − versus, with its Student's t CI (the tables' interval); p_for
    is the p-value (claim p, doubled one-sided) of the test whose rejection supports the claim,
    p_against of the one whose rejection contradicts it.
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
) -> Evidence:
    """Test `direction` of x − versus (paired by position = seed) by the paired t-test, each side at
    α/2 (claim p). Needs ≥ 2 pairs for p-values."""
    xs, base = np.asarray(x, float), np.asarray(versus, float)
    d = xs - base
    ci = student_t_ci(d, confidence=CONFIDENCE)
    # equal differences have sd 0 exactly (np.std can give ~1e-17 for them, by CPU)
    sd = (0.0 if np.ptp(d) == 0.0 else float(d.std(ddof=1))) if d.size > 1 else float("nan")

    def p(shift: float, alternative: str) -> float:  # claim p of H1: mean(d) > shift ("greater") / < shift
        return doubled(paired_t_test(xs, base, alternative=alternative, shift=shift).p)

    m = float(margin)
    bounds = bounds_of(direction)  # the claim: the effect beyond each bound; against it: short of one
    p_for = _nan_or(max, [p(b.at(m), "greater" if b.side > 0 else "less") for b in bounds])
    p_against = _nan_or(min, [p(b.at(m), "less" if b.side > 0 else "greater") for b in bounds])
    distance = min(b.side * (ci.mean - b.at(m)) for b in bounds)
    if d.size < 2:  # no test (the t-test's p is NaN; max/min would hide it)
        p_for = p_against = math.nan
    return Evidence(int(d.size), ci.mean, ci.lo, ci.hi, sd, m, distance, p_for, p_against)


def doubled(p_one_sided: float) -> float:
    """Claim p (the equation above): a one-sided p at the level of one tail of a 95% interval."""
    return min(1.0, 2.0 * p_one_sided) if math.isfinite(p_one_sided) else math.nan


def decide(p_for_holm: float, p_against_holm: float, alpha: float = ALPHA) -> Status:
    if p_for_holm < alpha:
        return "supported"
    if p_against_holm < alpha:
        return "contradicted"
    return "inconclusive"


def _nan_or(pick, values: list[float]) -> float:
    """max / min of the p-values, NaN when any is NaN (a test that could not be run decides nothing)."""
    return math.nan if any(math.isnan(v) for v in values) else pick(values)


def interval_agrees(status: Status, ci_lo: float, ci_hi: float, predicted: tuple[float, float]) -> bool:
    """Whether the 95% interval shown beside a verdict says the same: a supported claim's interval lies
    wholly inside the predicted range, a contradicted one's wholly outside it; an inconclusive (or
    unjudged) row agrees with any interval."""
    lo, hi = predicted
    if status == "supported":
        return lo < ci_lo and ci_hi < hi
    if status == "contradicted":
        return ci_hi < lo or ci_lo > hi
    return True
