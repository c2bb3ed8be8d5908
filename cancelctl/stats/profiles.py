"""Performance profiles as rliable draws them (Agarwal et al. 2021, arXiv 2108.13264, §4.1: "score
distributions"): at each threshold τ the fraction of runs whose score exceeds τ, pooled over
benchmarks, with a pointwise bootstrap band.

The profile is the empirical survival function of the runs' scores, so it recovers the true one at the
Dvoretzky–Kiefer–Wolfowitz rate (tests/stats/test_profiles.py). The band resamples runs with
replacement and takes percentiles of the resampled fractions at each τ, as rliable's stratified
bootstrap; one difference: rliable resamples each benchmark's runs on their own (its benchmarks'
runs are separate), while a cancelctl run is evaluated on every benchmark, so a run is resampled
whole, all its benchmarks with it. A percentile band is a bootstrap's: at few runs it is too narrow
(a fraction of 4 runs resamples to at most 5 values, and 0 or 1 to itself); simulated pointwise
coverage of a nominal 95% at the quartiles of a normal is 93–96% at 30 runs, 91–96% at 10, and
68–88% at 4, as the report's note says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cancelctl.stats.samples import SeedLike

N_BOOT = 2_000  # rliable's default for profiles


@dataclass(frozen=True)
class Profile:
    """taus: the thresholds; fraction[i]: share of (run, benchmark) scores > taus[i], each benchmark
    weighted equally; lo, hi: the pointwise bootstrap band; n_runs runs on n_benchmarks benchmarks."""

    taus: np.ndarray
    fraction: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    n_runs: int
    n_benchmarks: int


def fraction_above(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Share of the scores (runs × benchmarks; leading axes resampled copies) above each τ, averaged
    over runs and benchmarks [Agarwal et al. 2021, §4.1, eq. 1: the run score distribution]."""
    return (scores[..., None] > taus).mean(axis=(-3, -2))


def performance_profile(
    scores: np.ndarray,
    taus: np.ndarray,
    confidence: float = 0.95,
    n_boot: int = N_BOOT,
    seed: SeedLike = 0,
) -> Profile:
    """The profile of `scores` (runs × benchmarks, finite; a 1-d array is one benchmark) at `taus`,
    with its percentile band from `n_boot` resamples of the runs (see the module docstring)."""
    arr = np.asarray(scores, dtype=float)
    arr = arr[:, None] if arr.ndim == 1 else arr
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"performance_profile: scores must be runs × benchmarks, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("performance_profile: scores must be finite (leave out runs without a score)")
    grid = np.asarray(taus, dtype=float).ravel()
    fraction = fraction_above(arr, grid)
    rng = np.random.default_rng(seed)
    resampled = arr[rng.integers(0, arr.shape[0], size=(n_boot, arr.shape[0]))]  # n_boot × runs × benchmarks
    boot = fraction_above(resampled, grid)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha], axis=0)
    return Profile(grid, fraction, lo, hi, arr.shape[0], arr.shape[1])
