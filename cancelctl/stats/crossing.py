"""Where a curve first reaches a threshold: Compute@Reward=κ [D Table 2] and Steps(Score ≥ κ)
[D eq. 19], with the optional trailing mean they may be asked for, and a ratio to the baseline's."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def moving_average(values: Sequence[float] | np.ndarray, window: int = 1) -> np.ndarray:
    """Trailing (causal) moving average; the first window−1 points average what exists so far.

    Causal so that a threshold crossing never uses rewards logged after the crossing step.
    """
    arr = np.asarray(values, dtype=float)
    if window < 1:
        raise ValueError("window must be >= 1")
    if window == 1 or arr.size == 0:
        return arr.copy()
    csum = np.cumsum(arr)
    out = csum.copy()
    out[window:] = csum[window:] - csum[:-window]
    counts = np.minimum(np.arange(1, arr.size + 1), window)
    return out / counts


def first_crossing(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    threshold: float,
    smooth_window: int = 1,
) -> float | None:
    """x at the first point (in x order) where y, optionally smoothed, is ≥ threshold; None if never.

    No interpolation between logged points: the answer is a compute that was actually logged.
    Points where y is NaN are skipped.
    """
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    if xs.shape != ys.shape:
        raise ValueError(f"x and y differ in shape: {xs.shape} vs {ys.shape}")
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], moving_average(ys[order], smooth_window)
    hits = np.flatnonzero(ys >= threshold)
    return float(xs[hits[0]]) if hits.size else None


def compute_at_reward(
    compute: Sequence[float] | np.ndarray,
    reward: Sequence[float] | np.ndarray,
    kappa: float,
    smooth_window: int = 1,
) -> float | None:
    """Compute@Reward=κ [D Table 2, docs/statistics.md#compute-to-reach-a-reward]: the cumulative compute at which the training
    reward first reaches κ; None when it never does (never a number for "not reached").

    Decision: the default `smooth_window=1` applies no smoothing, as [D] defines it ("first
    reaches"). A noisy curve can then cross early on one lucky batch; pass a window (trailing mean,
    see `moving_average`) to ask "first reaches κ on average over the last w steps" instead.
    """
    return first_crossing(compute, reward, kappa, smooth_window)


def steps_to_threshold(
    steps: Sequence[float] | np.ndarray,
    score: Sequence[float] | np.ndarray,
    kappa: float,
    smooth_window: int = 1,
) -> int | None:
    """Steps(Score ≥ κ) [D eq. 19]: the first step where the score reaches κ; None if never."""
    hit = first_crossing(steps, score, kappa, smooth_window)
    return None if hit is None else int(hit)


def ratio_to_baseline(value: float, baseline: float) -> float:
    """value / baseline; NaN (shown as "—"/"n/a") when the baseline is missing, 0 or not finite."""
    if baseline is None or not np.isfinite(baseline) or baseline == 0:
        return float("nan")
    return float(value) / float(baseline)
