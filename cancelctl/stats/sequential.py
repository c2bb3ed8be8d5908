"""Anytime-valid decisions on paired per-seed differences: the e-process of the safe one-sample
t-test, and the first look at which it decides a claim. Arrays and numbers in, numbers out.

The test. The differences d = arm − versus of n seeds are taken as N(μ, σ²) with σ unknown; the
standardized effect is δ = μ/σ. The e-value for "δ > 0" against "δ = 0" is the Bayes factor with
the right-Haar prior 1/σ on the scale and a half-normal prior of variance g on δ > 0. It depends on
the data through n and t = √n·mean(d)/sd(d) only (ν = n − 1, F_k the Student-t cdf with k degrees
of freedom):

    E_n = 2 · (1+ng)^(-1/2) · [(1 + t²/((1+ng)ν)) / (1 + t²/ν)]^(-(ν+1)/2) · F_{ν+1}(√(ng) · t · √((ν+1)/(t² + (1+ng)ν)))

The first factors are the one-sample t-test's Bayes factor at fixed g (Rouder, Speckman, Sun,
Morey & Iverson 2009, Psychon. Bull. Rev. 16:225–237, the integrand of eq. 1; Gönen, Johnson, Lu &
Westfall 2005); the cdf factor is the posterior mass of δ > 0 over its prior mass ½ (t/√(1+ng) is
then skew-t, Azzalini & Capitanio 2003). "δ < 0" is the mirror image, F_{ν+1}(−·).

Why it is anytime-valid. With the right-Haar prior on the scale the Bayes factor is the likelihood
ratio of the scale-invariant part of the data (d / |d_1|, the maximal invariant of the scale
group), so under δ = 0 the sequence E_2, E_3, … is a nonnegative martingale of mean 1 (Pérez-Ortiz,
Lardy, de Heide & Grünwald 2024, "E-statistics, group invariance and anytime-valid testing", Ann.
Statist. 52:1410–1432; the safe t-test of Grünwald, de Heide & Koolen 2024, "Safe testing",
JRSS-B 86:1091–1128). Ville's inequality, P(sup_n E_n ≥ 1/α) ≤ α, then bounds the chance that the
claim is ever wrongly decided, however many looks are taken and whatever decides when to stop or
to add seeds: reject at the first look where E ≥ 1/α. It holds at any n ≥ 2 (no minimum number of
seeds, unlike the bootstrap-t of `paired`), and E_1 = 1 (one difference carries no scale-free
information). The null "δ ≤ 0" of a directional claim is composite: δ = 0 is its least favourable
point — at every fixed n E_δ'[E_n] ≤ 1 for δ' < 0 (the noncentral t has monotone likelihood ratio,
so the likelihood ratios for δ > 0 and δ' < 0 are negatively associated) — and the simulation in
tests/stats/test_sequential.py shows the crossing rate falling below the δ = 0 rate there.

Margins and two-sided claims follow `evidence`: not_higher / not_lower shift the differences by the
margin (t of d − m, or of d + m); `similar` is TOST as an intersection–union test — supported once
the smaller of the two one-sided e-values of one look has crossed (under either half of the null
it is at most that half's e-value, so it crosses with chance ≤ α; both at the same look, so the
fixed-n interval shown at that look lies inside both margins, as for every other decision: the
smallest t an e-value crosses at is above the 95% interval's t quantile at every n), contradicted
by the mean of the two outside e-processes (a mean of e-processes is one). Family-wise error across a sweep's claims: e-values
make Bonferroni valid at any looks — each claim at level α/m (`first_decision(..., level)`), so the
chance that any of the m claims is ever wrongly "supported" is ≤ α; "contradicted" likewise.

The prior variance g = 2 (sd √2 ≈ 1.4 of δ) is a design choice made on the lab: the shipped claims
showed |δ| from ~0.3 to ~18 (README Science), and at n seeds E can never exceed 2(1+ng)^((n−1)/2):
with g = 2 five seeds can reach 242, above the 160 = m/α of eight claims, so an overwhelming effect
is decided at the first look of a 5-seed sweep (with g = 1, 72: not before 7 seeds);
benchmarks/bench_sequential.py compares g from 0.25 to 10 at the lab's effects.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from cancelctl.spec.directions import bounds_of

PRIOR_VARIANCE = 2.0  # g: variance of the half-normal prior on the standardized effect (see above)


def log_e_value(t: float | np.ndarray, n: int | np.ndarray, side: int, g: float = PRIOR_VARIANCE) -> np.ndarray:
    """log E_n of the one-sided safe t-test (the equation above) for "δ > 0" (side +1) or "δ < 0"
    (side −1) against δ = 0, from the t statistic of n differences; ±inf t (differences all equal,
    not zero) gives the finite limit 2(1+ng)^(ν/2) F_{ν+1}(±√(ng(ν+1))). n < 2 gives log 1 = 0."""
    if side not in (1, -1):
        raise ValueError(f"side must be +1 or -1, got {side!r}")
    if g <= 0:
        raise ValueError(f"prior variance g must be > 0, got {g!r}")
    t, n = np.broadcast_arrays(np.asarray(t, float), np.asarray(n, float))
    nu = np.maximum(n - 1.0, 1.0)  # n < 2 is masked below
    b = 1.0 + n * g
    t2 = np.square(t)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        # log of the two-sided fixed-g factor, written to stay finite for t → ±inf:
        # −½ log b − (ν+1)/2 · [log(1 + t²/(bν)) − log(1 + t²/ν)] = −½ log b + (ν+1)/2 · [log b − log1p((b−1)ν/(ν+t²))]
        log_two_sided = -0.5 * np.log(b) + 0.5 * (nu + 1.0) * (np.log(b) - np.log1p((b - 1.0) * nu / (nu + t2)))
        ratio = np.where(np.isinf(t), np.sign(t), t / np.sqrt(t2 + b * nu))
        skew = side * np.sqrt(n * g * (nu + 1.0)) * ratio
    out = math.log(2.0) + log_two_sided + stats.t.logcdf(skew, nu + 1.0)
    return np.where(n < 2, 0.0, out)


def t_statistic(effect: float, sd: float, n: int, shift: float = 0.0) -> float:
    """√n (mean − shift) / sd; ±inf when sd is 0 and the mean is not the shift, 0 when both are."""
    centered = effect - shift
    if sd == 0.0:
        return 0.0 if centered == 0.0 else math.copysign(math.inf, centered)
    return math.sqrt(n) * centered / sd


def e_value(effect: float, sd: float, n: int, side: int, shift: float = 0.0, g: float = PRIOR_VARIANCE) -> float:
    """E_n for "mean − shift > 0" (side +1) or "< 0" (side −1) from the mean and sd of n differences."""
    if n < 2 or not (math.isfinite(effect) and math.isfinite(sd)):
        return 1.0
    return float(np.exp(log_e_value(t_statistic(effect, sd, n, shift), n, side, g)))


@dataclass(frozen=True)
class LookEvidence:
    """One claim at one look: n seeds, the e-values whose rejections together support the claim (one;
    TOST's two for `similar`, which must both reject at one look) and the e-value whose rejection
    contradicts it."""

    n: int
    e_for: tuple[float, ...]
    e_against: float


def look_evidence(
    effect: float, sd: float, n: int, direction: str, margin: float = 0.0, g: float = PRIOR_VARIANCE
) -> LookEvidence:
    """The e-values of a claim's `direction` from the mean and sd of its n paired differences
    (arm − versus); `margin` as `evidence.paired_evidence` uses it (absolute, > 0)."""
    bounds = bounds_of(direction)
    m = float(margin) if any(b.margins for b in bounds) else 0.0

    def e(side: int, shift: float) -> float:
        return e_value(effect, sd, n, side, shift, g)

    # for: the effect beyond each bound (TOST's two for `similar`); against: short of one, the mean
    # of the e-processes when there are two (`similar`'s outside: beyond either margin)
    against = [e(-b.side, b.at(m)) for b in bounds]
    return LookEvidence(n, tuple(e(b.side, b.at(m)) for b in bounds), against[0] if len(against) == 1 else 0.5 * sum(against))


@dataclass(frozen=True)
class SequentialDecision:
    """The first look that decided a claim (1-based index into the looks), or None; the running
    maxima of its e-values there (at the last look when undecided). e_for is the running maximum of
    the smaller of TOST's two e-values at a look."""

    status: str  # supported | contradicted | inconclusive
    look: int | None
    n: int
    e_for: float
    e_against: float

    @property
    def p_for(self) -> float:
        """Anytime-valid p-value of the supporting test: 1 / its running maximum (capped at 1)."""
        return min(1.0, 1.0 / self.e_for)

    @property
    def p_against(self) -> float:
        return min(1.0, 1.0 / self.e_against)


def first_decision(looks: Sequence[LookEvidence], level: float) -> SequentialDecision:
    """Walk the looks in order: "supported" at the first look where every supporting e-value of that
    look has reached 1/level, "contradicted" where the contradicting one has;
    the first decision stands (later looks cannot undo it). `level` is the claim's share of α
    (α/m for m claims: Bonferroni, valid for e-values at any looks)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if not looks:
        return SequentialDecision("inconclusive", None, 0, 1.0, 1.0)
    bar = 1.0 / level
    best_for = best_against = 1.0
    for index, look in enumerate(looks, start=1):
        best_for = max(best_for, min(look.e_for))
        best_against = max(best_against, look.e_against)
        if best_for >= bar:
            return SequentialDecision("supported", index, look.n, best_for, best_against)
        if best_against >= bar:
            return SequentialDecision("contradicted", index, look.n, best_for, best_against)
    return SequentialDecision("inconclusive", None, looks[-1].n, best_for, best_against)


def max_e_value(n: int, g: float = PRIOR_VARIANCE) -> float:
    """The largest E_n any data can give at n seeds (all differences equal): 2(1+ng)^((n−1)/2) F_n(√(ng·n)).
    A claim at level α/m cannot be decided before the n where this reaches m/α."""
    return float(np.exp(log_e_value(math.inf, n, 1, g)))
