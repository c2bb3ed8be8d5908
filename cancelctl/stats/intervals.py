"""Confidence intervals of a mean over seeds [D Table 1: mean ± 95% CI], and the pointwise band of a
mean curve the report's plots draw.

The report's intervals are Student's t interval on the seed values (`student_t_ci`): with normal
seeds its coverage is exact at every n ≥ 2. A percentile bootstrap over the 3–5 seeds of a typical RL
sweep cannot keep a 95% promise (Colas et al. 2018, "How many random seeds?"): its interval never
leaves [min, max] of the seeds, which holds the mean of a symmetric seed distribution with
probability 1 − 2^(1−n), 75% at n = 3. Coverage of both, simulated at the seed spreads of the lab, is
tested in tests/stats/test_intervals.py and printed by benchmarks/bench_intervals.py; `bootstrap_ci`
stays for that comparison. Reports show n next to every interval.

A score known to lie in [0, 1] (an accuracy, pass@k) gets `unit_interval_ci` instead, Wilson's score
interval with the seeds' dispersion: Student's interval is symmetric and leaves [0, 1] near the bounds
(0.722 [0.37, 1.07] at 4 seeds), where it also under-covers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats  # a dependency of mlflow; used for the t and normal quantiles only

from cancelctl.stats.samples import SeedLike, finite_1d


@dataclass(frozen=True)
class Interval:
    """Mean over n seeds and its confidence interval; unpacks as (mean, lo, hi).

    `degenerate` flags n == 1: there is no spread to measure; Student's interval (t with 0 degrees
    of freedom) is undefined there, so `student_t_ci` gives lo = hi = NaN, never a zero-width interval.
    """

    mean: float
    lo: float
    hi: float
    n: int

    @property
    def degenerate(self) -> bool:
        return self.n < 2

    def __iter__(self) -> Iterator[float]:
        return iter((self.mean, self.lo, self.hi))


def t_half_width(sd: float | np.ndarray, n: int, confidence: float = 0.95) -> float | np.ndarray:
    """t_{(1+c)/2, n−1} · sd/√n: half the width of Student's interval for the mean of n values whose
    sample sd (ddof 1) is `sd`. The one place the report's interval is computed."""
    return stats.t.ppf((1.0 + confidence) / 2.0, n - 1) * sd / np.sqrt(n)


def student_t_ci(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> Interval:
    """Mean over seeds with Student's t interval [D Table 1: mean ± 95% CI] (Student 1908, "The
    probable error of a mean", Biometrika 6(1)): mean ± `t_half_width`.

    Its coverage is exact for normal seeds at every n ≥ 2, which is why the report uses it. Simulated
    at the lab's seed spreads (tests/stats/test_intervals.py, benchmarks/bench_intervals.py) a nominal
    95% covers 94–95% at n = 3..10 for normal and for beta (bounded, like an accuracy) seeds, and
    96% for heavy symmetric tails (t with 3 df). Skewed seeds are its weak side: lognormal seeds at
    the lab demo's largest relative sd (0.37, skewness 1.2) cover 93.2–93.6% at n = 3..10, and at
    0.42, the largest in the lab-claims sweeps, 92.7–93.3%. The lab's seeds show no such skew (final
    scores of 15 lab-claims arms, 87 runs, standardized and pooled: skewness −0.17), so no skew
    correction is made; a bootstrap one (BCa) stays inside the seeds' range and under-covers at
    these n like the percentile interval.
    n == 1 gives lo = hi = NaN (t with 0 degrees of freedom is undefined), flagged by
    `Interval.degenerate`; n seeds of one value give a zero-width interval (sd 0, measured).
    """
    arr = finite_1d(values, "student_t_ci")
    mean = float(arr.mean())
    if arr.size == 1:
        return Interval(mean, float("nan"), float("nan"), 1)
    # equal values have sd 0 exactly (np.std can give ~1e-17 for them)
    half = 0.0 if np.ptp(arr) == 0.0 else float(t_half_width(arr.std(ddof=1), arr.size, confidence))
    return Interval(mean, mean - half, mean + half, int(arr.size))


def unit_interval_ci(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> Interval:
    """Mean over seeds of a score known to lie in [0, 1] (an accuracy, pass@k) with an interval that
    stays inside [0, 1]: Wilson's score interval (Wilson 1927, "Probable inference, the law of
    succession, and statistical inference", JASA 22(158)) under the quasi-binomial variance
    Var = φ·μ(1 − μ), φ estimated from the seeds and t in place of z.

    With x̄ and s the seeds' mean and sd (ddof 1), c = t²_{(1+c)/2, n−1} · φ̂ / n, φ̂ = s² / (x̄(1 − x̄)):
    the μ with (x̄ − μ)² ≤ c·μ(1 − μ), i.e. [2x̄ + c ∓ √(c² + 4c·x̄(1 − x̄))] / (2(1 + c)). Away from the
    bounds (c small) it is `student_t_ci`'s mean ± t·s/√n; near them the variance shrinks with
    μ(1 − μ), as an accuracy's does, so the interval bends inward instead of leaving [0, 1]. Why not a
    logit-t interval: a seed at exactly 0 or 1 (pass@k often is) has no logit. Simulated coverage
    (tests/stats/test_intervals.py): 94–95% for beta seeds at the lab's spreads and at mean 0.72 / sd
    0.2, 93–94% at mean 0.9–0.95, 92–94% at mean 0.98–0.99, where Student's t covers 88–92% and its
    upper end passes 1 in most seed sets at n ≤ 5.
    n == 1: lo = hi = NaN (no spread to measure), as `student_t_ci`; seeds of one value (all 1.0, say)
    a zero-width interval.
    """
    arr = finite_1d(values, "unit_interval_ci")
    if arr.min() < 0.0 or arr.max() > 1.0:
        raise ValueError(f"unit_interval_ci: values must lie in [0, 1], got {arr.min():.6g}..{arr.max():.6g}")
    mean = float(arr.mean())
    if arr.size == 1:
        return Interval(mean, float("nan"), float("nan"), 1)
    if np.ptp(arr) == 0.0:
        return Interval(mean, mean, mean, int(arr.size))
    # x̄(1 − x̄) > 0 here: values in [0, 1] that are not all equal have a mean strictly inside
    t = stats.t.ppf((1.0 + confidence) / 2.0, arr.size - 1)
    c = t * t * arr.var(ddof=1) / (arr.size * mean * (1.0 - mean))
    root = np.sqrt(c * c + 4.0 * c * mean * (1.0 - mean))
    lo, hi = (2.0 * mean + c - root) / (2.0 * (1.0 + c)), (2.0 * mean + c + root) / (2.0 * (1.0 + c))
    return Interval(mean, float(max(lo, 0.0)), float(min(hi, 1.0)), int(arr.size))  # max/min: rounding only


def expanded_alpha(alpha: float, n: int) -> float:
    """Tail level for the expanded percentile interval (Hesterberg 2015, "What teachers should know
    about the bootstrap", Am. Stat. 69(4)): Φ(−√(n/(n−1)) · t_{1−α, n−1}).

    The plain percentile interval is too narrow for small n (resampled means have variance
    s²(n−1)/n² and normal, not t, tails) and covers short of a nominal 95% even at n = 10; widening
    the quantile levels this way brings it close (benchmarks/bench_intervals.py prints both). For
    n ≤ 5 no percentile interval can reach 95%: the resampled means never leave [min, max] of the seeds.
    """
    t_quantile = stats.t.ppf(1.0 - alpha, n - 1)
    return float(stats.norm.cdf(-np.sqrt(n / (n - 1)) * t_quantile))


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    n_boot: int = 10_000,
    seed: SeedLike = 0,
    method: str = "expanded",
) -> Interval:
    """Mean over seeds with a percentile-bootstrap confidence interval, kept to compare with
    `student_t_ci` (benchmarks/bench_intervals.py): at n ≤ 5 seeds it cannot cover 95% (see the
    module docstring), so the report does not use it.

    Resamples the seeds with replacement `n_boot` times and takes quantiles of the resampled means:
    at (1−c)/2 and (1+c)/2 for `method="percentile"` (Efron's interval, as rliable), or at the
    expanded levels of `expanded_alpha` for `method="expanded"` (default; see there why).
    n == 1 gives lo == hi == the value, flagged by `Interval.degenerate`.
    """
    arr = finite_1d(values, "bootstrap_ci")
    mean = float(arr.mean())
    if arr.size == 1:
        return Interval(mean, mean, mean, 1)
    alpha = (1.0 - confidence) / 2.0
    if method == "expanded":
        alpha = expanded_alpha(alpha, arr.size)
    elif method != "percentile":
        raise ValueError(f"method must be 'expanded' or 'percentile', got {method!r}")
    rng = np.random.default_rng(seed)
    resampled_means = arr[rng.integers(0, arr.size, size=(n_boot, arr.size))].mean(axis=1)
    lo, hi = np.quantile(resampled_means, [alpha, 1.0 - alpha])
    return Interval(mean, float(lo), float(hi), int(arr.size))


def band_on_grid(
    curves: Sequence[tuple[np.ndarray, np.ndarray]],
    n_grid: int = 100,
    confidence: float = 0.95,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean curve across seeds with a pointwise Student-t band (the tables' interval at each grid
    point), on a common x grid.

    Each seed's (x, y) is linearly interpolated onto `n_grid` points spanning the x range that every
    seed covers (no extrapolation). Returns (grid, mean, lo, hi); with one seed lo and hi are NaN
    (no band: `student_t_ci`).
    """
    usable = [(np.asarray(x, float), np.asarray(y, float)) for x, y in curves]
    usable = [(x[np.isfinite(x) & np.isfinite(y)], y[np.isfinite(x) & np.isfinite(y)]) for x, y in usable]
    usable = [(x[np.argsort(x, kind="stable")], y[np.argsort(x, kind="stable")]) for x, y in usable if x.size]
    if not usable:
        raise ValueError("band_on_grid: no finite points")
    start = max(float(x[0]) for x, _ in usable)
    stop = min(float(x[-1]) for x, _ in usable)
    if stop < start:
        raise ValueError("band_on_grid: the seeds' x ranges do not overlap")
    grid = np.linspace(start, stop, n_grid) if stop > start else np.array([start])
    values = np.stack([np.interp(grid, x, y) for x, y in usable])  # seeds × grid
    mean = values.mean(axis=0)
    if len(usable) == 1:
        return grid, mean, np.full_like(mean, np.nan), np.full_like(mean, np.nan)
    half = t_half_width(values.std(axis=0, ddof=1), len(usable), confidence)
    return grid, mean, mean - half, mean + half
