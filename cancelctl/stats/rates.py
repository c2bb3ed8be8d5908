"""How often something happens in an arm's runs (a monitor rule collapsed them) and the comparison of
two such rates; the share of runs in which one thing came before another. Counts in, numbers out.

- Two rates, and the interval of their difference, from one test: the exact unconditional score
  test of "rate a − rate b ≤ δ0" (and ≥ δ0), whose statistic is Miettinen & Nurminen's score
  (1985, "Comparative analysis of two rates", Stat. Med. 4:213–226; the rates' restricted maximum
  likelihood in Farrington & Manning's closed form, 1990, Stat. Med. 9:1447–1454) and whose p is
  the chance of a table at least as extreme, maximised over the nuisance rate — exact (level ≤ α)
  at 4–5 runs an arm, where asymptotic tests are not. At δ0 = 0 it is Suissa & Shuster's pooled-Z
  test (1985, JRSS A 148:317–327), which with Boschloo's is the exact test Lydersen, Fagerland &
  Laake recommend (2009, Stat. Med. 28:1159–1175). The 95% interval is the δ0 neither one-sided
  test rejects at 2.5% (Chan & Zhang 1999, "Test-based exact confidence intervals for the
  difference of two binomial proportions", Biometrics 55:1202–1209): it excludes 0 exactly when
  the test at 0 rejects, so a verdict and the interval beside it never disagree (Newcombe's score
  interval shown before did: 3/4 vs 0/4 read [+0.085, +0.954] beside a claim p of 0.070). The runs
  of two arms are compared unpaired: a seed shared by the arms does not make their collapses a
  matched pair.
- One share against 1/2: the exact binomial (sign) test, with the Clopper–Pearson interval (Clopper
  & Pearson 1934, Biometrika 26:404–413).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats  # the binomial probabilities, test and normal / beta quantiles

CONFIDENCE = 0.95


@dataclass(frozen=True)
class RateComparison:
    """k_a of n_a runs vs k_b of n_b: the difference of the rates with its interval, and the exact
    one-sided p-values of "rate a > rate b" (p_greater) and "rate a < rate b" (p_less). The interval
    inverts these tests: ci_lo > 0 exactly when p_greater < (1 − confidence)/2, ci_hi < 0 exactly
    when p_less is."""

    k_a: int
    n_a: int
    k_b: int
    n_b: int
    difference: float
    ci_lo: float
    ci_hi: float
    p_greater: float
    p_less: float


NUISANCE_GRID = 1001  # common rates the exact p is maximised over (a smooth polynomial in them)


def compare_rates(k_a: int, n_a: int, k_b: int, n_b: int, confidence: float = CONFIDENCE) -> RateComparison:
    """The exact unconditional score test of two rates, each way, and the interval that inverts it
    (the module's docstring)."""
    for k, n, side in ((k_a, n_a, "a"), (k_b, n_b, "b")):
        if n < 1 or not 0 <= k <= n:
            raise ValueError(f"compare_rates: {k} of {n} runs on side {side}")
    lo, hi = score_interval(k_a, n_a, k_b, n_b, confidence)
    p_greater, p_less = _score_p(k_a, n_a, k_b, n_b, 0.0, "greater"), _score_p(k_a, n_a, k_b, n_b, 0.0, "less")
    return RateComparison(k_a, n_a, k_b, n_b, k_a / n_a - k_b / n_b, lo, hi, p_greater, p_less)


@functools.lru_cache(maxsize=4096)
def score_interval(k_a: int, n_a: int, k_b: int, n_b: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The differences δ0 that neither one-sided exact score test rejects at (1 − confidence)/2
    [Chan & Zhang 1999]. Each bound is searched on the side of 0 that the test at δ0 = 0 puts it,
    so the interval excludes 0 exactly when that test rejects, whatever the p's shape in δ0."""
    tail = (1.0 - confidence) / 2.0

    def bound(alternative: str) -> float:
        sign = 1.0 if alternative == "greater" else -1.0  # "greater" rejects δ0 below the lower bound

        def rejected(t: float) -> bool:  # t = sign · δ0
            return _score_p(k_a, n_a, k_b, n_b, sign * t, alternative) < tail

        inner, outer = (0.0, 1.0) if rejected(0.0) else (-1.0, 0.0)  # in -sign·δ: rejected at inner's side
        if inner == -1.0 and not rejected(-1.0):
            return -sign
        # bisect between a rejected δ0 (`inner`) and an accepted one (`outer`), in the flipped scale
        for _ in range(30):  # to ~1e-9
            mid = (inner + outer) / 2
            inner, outer = (mid, outer) if rejected(mid) else (inner, mid)
        return sign * outer  # the accepted end: the bound lies inside the interval

    return bound("greater"), bound("less")


def _score_p(k_a: int, n_a: int, k_b: int, n_b: int, delta: float, alternative: str) -> float:
    """One-sided exact p of H0 "rate a − rate b ≤ δ0" (alternative "greater") or "≥ δ0" ("less"):
    the chance, maximised over the common nuisance rate on the line p_a − p_b = δ0, of a table whose
    score statistic is at least as extreme as the observed one."""
    z = _score_statistics(n_a, n_b, delta)
    observed = z[k_a, k_b]
    extreme = z >= observed - 1e-9 if alternative == "greater" else z <= observed + 1e-9
    p_b = np.linspace(max(0.0, -delta), min(1.0, 1.0 - delta), NUISANCE_GRID)
    p_a = np.clip(p_b + delta, 0.0, 1.0)
    probs = np.einsum("gi,ij,gj->g", _pmf(n_a, p_a), extreme.astype(float), _pmf(n_b, p_b))
    return float(min(1.0, probs.max()))


def _pmf(n: int, p: np.ndarray) -> np.ndarray:
    """Binomial(n, p) probabilities of 0..n, one row per p."""
    return stats.binom.pmf(np.arange(n + 1)[None, :], n, p[:, None])


@functools.lru_cache(maxsize=1024)
def _score_statistics(n_a: int, n_b: int, delta: float) -> np.ndarray:
    """Z[k_a, k_b]: the score statistic of H0 p_a − p_b = δ0 for every table [Miettinen & Nurminen
    1985, without their n/(n − 1)], (p̂_a − p̂_b − δ0) / √(p̃_a q̃_a / n_a + p̃_b q̃_b / n_b) with p̃ the
    rates' maximum likelihood under H0, in closed form [Farrington & Manning 1990, eq. (4)]; 0 where
    the table sits on H0 with no spread to scale it (0/n vs 0/n at δ0 = 0)."""
    share_a = (np.arange(n_a + 1) / n_a)[:, None]
    share_b = (np.arange(n_b + 1) / n_b)[None, :]
    theta, d = n_b / n_a, delta
    a = 1.0 + theta
    b = -(1.0 + theta + share_a + theta * share_b + d * (theta + 2.0))
    c = d * d + d * (2.0 * share_a + theta + 1.0) + share_a + theta * share_b
    e = -share_a * d * (1.0 + d)
    v = b**3 / (27.0 * a**3) - b * c / (6.0 * a * a) + e / (2.0 * a)
    u = np.sign(v) * np.sqrt(np.maximum(b * b / (9.0 * a * a) - c / (3.0 * a), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        w = (np.pi + np.arccos(np.clip(np.where(u != 0, v / u**3, 0.0), -1.0, 1.0))) / 3.0
    rate_a = np.clip(np.where(u != 0, 2.0 * u * np.cos(w), 0.0) - b / (3.0 * a), max(0.0, d), min(1.0, 1.0 + d))
    rate_b = rate_a - d
    spread = np.sqrt(np.maximum(rate_a * (1 - rate_a) / n_a + rate_b * (1 - rate_b) / n_b, 0.0))
    gap = share_a - share_b - d
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(spread > 0, gap / np.where(spread > 0, spread, 1.0), np.sign(np.round(gap, 12)) * np.inf)
    z = np.where(np.isnan(z), 0.0, z)
    z.setflags(write=False)
    return z


def wilson_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson's score interval of k/n (Wilson 1927, JASA 22:209–212): the rates p with
    |k/n − p| ≤ z √(p(1 − p)/n), z the two-sided normal quantile."""
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    share = k / n
    center = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, center - half), min(1.0, center + half)


def runs_for_rate_difference(
    rate_a: float, rate_b: float, alpha: float = 0.05, power: float = 0.8, max_n: int = 100_000
) -> int | None:
    """Runs per arm for a one-sided test of two rates at level `alpha` to have `power` when the true
    rates are these (Fleiss, Levin & Paik 2003, "Statistical Methods for Rates and Proportions",
    eq. 4.14, without the continuity correction):
    n = (z_{1−α} √(2 p̄ q̄) + z_{1−β} √(p_a q_a + p_b q_b))² / (p_a − p_b)², p̄ the mean rate.
    A planning number for the exact test (close to it from ~10 runs an arm up). None when the rates
    are equal or more than `max_n` runs would be needed."""
    if not (np.isfinite(rate_a) and np.isfinite(rate_b)) or rate_a == rate_b:
        return None
    z_alpha, z_beta = float(stats.norm.ppf(1 - alpha)), float(stats.norm.ppf(power))
    mean = (rate_a + rate_b) / 2
    spread = z_alpha * math.sqrt(2 * mean * (1 - mean)) + z_beta * math.sqrt(
        rate_a * (1 - rate_a) + rate_b * (1 - rate_b)
    )
    n = math.ceil(spread**2 / (rate_a - rate_b) ** 2)
    return max(n, 2) if n <= max_n else None


@dataclass(frozen=True)
class ShareTest:
    """k of n (the share in which the predicted thing happened), its Clopper–Pearson interval, and
    the exact one-sided binomial p-values of "share > p0" (p_greater) and "share < p0" (p_less)."""

    k: int
    n: int
    share: float
    ci_lo: float
    ci_hi: float
    p_greater: float
    p_less: float


def share_test(k: int, n: int, p0: float = 0.5, confidence: float = CONFIDENCE) -> ShareTest:
    """Exact binomial test of k successes in n against p0 (the sign test when p0 = 1/2), each way,
    and the Clopper–Pearson interval of k/n."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"share_test: {k} of {n}")
    p_greater = stats.binomtest(k, n, p0, alternative="greater").pvalue
    p_less = stats.binomtest(k, n, p0, alternative="less").pvalue
    # the two-sided test's interval (a one-sided test's result gives a one-sided interval)
    ci = stats.binomtest(k, n, p0).proportion_ci(confidence_level=confidence, method="exact")
    return ShareTest(k, n, k / n, float(ci.low), float(ci.high), float(p_greater), float(p_less))


def runs_for_share(share: float, p0: float = 0.5, alpha: float = 0.05, power: float = 0.8, max_n: int = 2_000) -> int | None:
    """Smallest n at which the one-sided exact binomial test of p0 (in the direction of `share`) at
    level `alpha` has `power` when the true share is `share`; exact power, n counted up. None when
    share == p0 or more than `max_n` would be needed."""
    if not np.isfinite(share) or share == p0:
        return None
    for n in range(1, max_n + 1):
        ks = np.arange(n + 1)
        if share > p0:
            rejects = stats.binom.sf(ks - 1, n, p0) <= alpha  # P(X ≥ k) under p0
        else:
            rejects = stats.binom.cdf(ks, n, p0) <= alpha
        if float(stats.binom.pmf(ks[rejects], n, share).sum()) >= power:
            return n
    return None
