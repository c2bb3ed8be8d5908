"""How often something happens in an arm's runs (a monitor rule collapsed them) and the comparison of
two such rates; the share of runs in which one thing came before another. Counts in, numbers out.

- Two rates: Boschloo's exact unconditional test (Boschloo 1970, "Raised conditional level of
  significance for the 2×2-table when testing the equality of two probabilities", Statistica
  Neerlandica 24:1–35): Fisher's exact p as the statistic, its p-value maximised over the common
  rate. Uniformly more powerful than Fisher's conditional test, and still exact (level ≤ α) — which
  matters at 4–5 runs an arm, where Fisher's is very conservative (Lydersen, Fagerland & Laake 2009,
  "Recommended tests for association in 2×2 tables", Stat. Med. 28:1159–1175). The runs of two arms
  are compared unpaired: a seed shared by the arms does not make their collapses a matched pair.
- Their difference: Newcombe's hybrid score interval (Newcombe 1998, "Interval estimation for the
  difference between independent proportions: comparison of eleven methods", Stat. Med. 17:873–890,
  method 10), built from the two Wilson intervals (Wilson 1927); it stays inside [−1, 1] and keeps
  its coverage at 0/n and n/n, where the Wald interval collapses to a point.
- One share against 1/2: the exact binomial (sign) test, with the Clopper–Pearson interval (Clopper
  & Pearson 1934, Biometrika 26:404–413).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats  # Boschloo's test, the binomial test and the normal / beta quantiles

CONFIDENCE = 0.95


@dataclass(frozen=True)
class RateComparison:
    """k_a of n_a runs vs k_b of n_b: the difference of the rates with its interval, and the exact
    one-sided p-values of "rate a > rate b" (p_greater) and "rate a < rate b" (p_less)."""

    k_a: int
    n_a: int
    k_b: int
    n_b: int
    difference: float
    ci_lo: float
    ci_hi: float
    p_greater: float
    p_less: float


def compare_rates(k_a: int, n_a: int, k_b: int, n_b: int, confidence: float = CONFIDENCE) -> RateComparison:
    """Boschloo's exact test of two rates, each way, and Newcombe's interval of their difference."""
    for k, n, side in ((k_a, n_a, "a"), (k_b, n_b, "b")):
        if n < 1 or not 0 <= k <= n:
            raise ValueError(f"compare_rates: {k} of {n} runs on side {side}")
    lo, hi = newcombe_interval(k_a, n_a, k_b, n_b, confidence)
    if k_a + k_b in (0, n_a + n_b):  # nobody or everybody: the table carries no evidence either way
        p_greater = p_less = 1.0
    else:
        # scipy's table: columns are the two samples, the first row their counts of the event
        table = [[k_a, k_b], [n_a - k_a, n_b - k_b]]
        p_greater = float(stats.boschloo_exact(table, alternative="greater").pvalue)
        p_less = float(stats.boschloo_exact(table, alternative="less").pvalue)
    return RateComparison(k_a, n_a, k_b, n_b, k_a / n_a - k_b / n_b, lo, hi, min(p_greater, 1.0), min(p_less, 1.0))


def wilson_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson's score interval of k/n (Wilson 1927, JASA 22:209–212): the rates p with
    |k/n − p| ≤ z √(p(1 − p)/n), z the two-sided normal quantile."""
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    share = k / n
    center = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, center - half), min(1.0, center + half)


def newcombe_interval(k_a: int, n_a: int, k_b: int, n_b: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Newcombe's hybrid score interval of k_a/n_a − k_b/n_b [Newcombe 1998, method 10]:
    δ − √((p_a − l_a)² + (u_b − p_b)²) to δ + √((u_a − p_a)² + (p_b − l_b)²), (l, u) the Wilson
    intervals of the two rates."""
    p_a, p_b = k_a / n_a, k_b / n_b
    l_a, u_a = wilson_interval(k_a, n_a, confidence)
    l_b, u_b = wilson_interval(k_b, n_b, confidence)
    delta = p_a - p_b
    return delta - math.hypot(p_a - l_a, u_b - p_b), delta + math.hypot(u_a - p_a, p_b - l_b)


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
