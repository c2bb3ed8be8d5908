"""The tidy metrics frame (run_id, step, key, value) as the statistics read it: split once per key,
each run's last value, and a metric put on a compute axis. Frames in, frames out; nothing is read
from disk here."""

from __future__ import annotations

import numpy as np
import pandas as pd

# compute axis name -> cumulative metric key logged by every backend (docs/metrics.md#compute)
COMPUTE_KEYS = {
    "tokens": "compute/gen_tokens_cum",
    "updates": "compute/update_steps_cum",
    "hours": "compute/hours_cum",
}
COMPUTE_LABELS = {"tokens": "generated tokens", "updates": "optimizer update steps", "hours": "GPU-hours"}


def split_by_key(metrics: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The tidy metrics frame split once per key, each part sorted by (run_id, step).

    Non-finite values (NaN, ±inf: a diverged step) are dropped here, so every statistic downstream
    sees finite numbers. Splitting once is what keeps a 100-run × 20-key × 500-step report fast.
    """
    finite = np.isfinite(metrics["value"].to_numpy(dtype=float))
    clean = metrics.loc[finite, ["run_id", "step", "key", "value"]]
    clean = clean.sort_values(["key", "run_id", "step"], kind="stable")
    return {str(key): part.drop(columns="key").reset_index(drop=True) for key, part in clean.groupby("key", sort=False)}


def last_values(series: pd.DataFrame) -> pd.Series:
    """run_id -> value at the run's last logged step (frame: run_id, step, value)."""
    return series.sort_values("step", kind="stable").groupby("run_id")["value"].last()


def on_compute_axis(metric: pd.DataFrame, compute: pd.DataFrame) -> pd.DataFrame:
    """Attach the cumulative compute to every point of a metric (frames: run_id, step, value).

    A metric point at step s gets the compute logged at step s; if compute was not logged at s, the
    next logged compute (never the previous one: an arm is never credited with less compute than it
    had spent). Returns run_id, step, compute, value; points with no compute after them are dropped.
    """
    left = metric.sort_values("step", kind="stable")
    right = compute.rename(columns={"value": "compute"}).sort_values("step", kind="stable")
    merged = pd.merge_asof(left, right, on="step", by="run_id", direction="forward")
    merged = merged.dropna(subset=["compute"])
    return merged[["run_id", "step", "compute", "value"]].sort_values(["run_id", "step"], kind="stable")


def group_order(runs: pd.DataFrame) -> list[str]:
    """The runs' comparison groups ordered by their axis.* values, numerically where numeric (G=4
    before G=16), then by name: the order of the report's tables and of the claims' rows."""

    def rank(value: object) -> tuple:
        try:
            return (0, float(value), "")
        except (TypeError, ValueError):
            return (1, 0.0, str(value))

    axes = [c for c in runs.columns if c.startswith("axis.")]
    firsts = runs.groupby("group", sort=False).first()
    return sorted(firsts.index, key=lambda g: tuple(rank(firsts.at[g, c]) for c in axes) + (str(g),))
