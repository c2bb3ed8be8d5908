"""The threshold tables: Compute@Reward=κ [D Table 2] and Steps(reward ≥ κ) [D eq. 19], per run and
per arm normalised to the baseline, and the default κ when none is given. Each crossing is the
equation's own function in `cancelctl.stats.crossing` (`compute_at_reward`, `steps_to_threshold`)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from cancelctl.errors import ArgumentError
from cancelctl.report.formatting import fmt_number, fmt_ratio
from cancelctl.report.prepared import PreparedSweep, ReportTable
from cancelctl.stats import crossing, frames
from cancelctl.stats.frames import COMPUTE_KEYS, COMPUTE_LABELS

# default κ: this fraction of the way from the baseline's first to its peak seed-mean reward
DEFAULT_KAPPA_FRACTION = 0.9

# (x, reward, κ, smooth_window) -> first x where the reward reaches κ, None if never
Crossing = Callable[[np.ndarray, np.ndarray, float, int], "float | None"]


def default_kappa(sweep: PreparedSweep, metric: str) -> tuple[float | None, str]:
    """κ when none is given: DEFAULT_KAPPA_FRACTION of the way from the baseline's first to its
    peak seed-mean reward, the lowest over groups — so the baseline reaches it in every group and
    every arm's Compute@Reward can be normalised. A group whose baseline never rises above its first
    value gives none (κ would be that first value, which every run "reaches" at its first point): with
    no group left, no threshold can be set and the note says so."""
    if not sweep.has(metric):
        return None, f"no κ: {metric} not logged"
    points = sweep.by_key[metric].join(sweep.runs[["group", "arm"]], on="run_id")
    base = points[points["arm"] == sweep.baseline]
    candidates, flat = [], []
    for group, part in base.groupby("group"):
        mean_curve = part.groupby("step")["value"].mean().sort_index()
        first, peak = float(mean_curve.iloc[0]), float(mean_curve.max())
        if peak > first:
            candidates.append(first + DEFAULT_KAPPA_FRACTION * (peak - first))
        else:
            flat.append(f"{group} (flat at {first:.4g})" if group else f"flat at {first:.4g}")
    no_rise = (f"no rise: the baseline's seed-mean {metric} never goes above its first value "
               f"({'; '.join(flat)}), where every run would reach κ at its first point") if flat else ""
    if not candidates:
        if flat:
            return None, f"no κ: {no_rise}; no threshold can be set (give one with --kappa)"
        return None, f"no κ: the baseline logged no {metric}"
    kappa = min(candidates)
    note = (
        f"κ = {kappa:.4g} (default: {DEFAULT_KAPPA_FRACTION:.0%} of the way from the baseline's first to its peak "
        f"seed-mean {metric}, lowest over groups; set it with --kappa)"
    ) + (f"; groups left out, {no_rise}" if flat else "")
    return kappa, note


def check_threshold(kappa: float, sweep: PreparedSweep, metric: str) -> None:
    """A κ given (--kappa) that lies outside every value of `metric` in the sweep is a mistake
    (exit 2), not a table: below them every run "reaches" it at its first point, above them none ever
    does. Rewards may be negative (a -1/+1 reward): a negative κ inside the range is fine."""
    if not sweep.has(metric):
        return
    values = sweep.by_key[metric]["value"].to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    if not len(values):
        return
    low, high = float(values.min()), float(values.max())
    if low <= kappa <= high:
        return
    where = "below" if kappa < low else "above"
    means = "every run reaches it at its first point" if kappa < low else "no run ever reaches it"
    raise ArgumentError(f"--kappa {kappa:g} is {where} every value of {metric} in this sweep "
                        f"({low:.4g} … {high:.4g}): {means}; give a κ in that range, or none for the default")


def compute_at_reward_tables(
    sweep: PreparedSweep, metric: str, compute: str, kappa: float | None, smooth_window: int
) -> list[ReportTable]:
    """[D Table 2]: compute at which the training reward first reaches κ."""
    title = f"Compute@Reward={'κ' if kappa is None else f'{kappa:.4g}'} ({COMPUTE_LABELS[compute]})"
    compute_key = COMPUTE_KEYS[compute]
    if kappa is None or not sweep.has(metric) or not sweep.has(compute_key):
        return [_no_table(sweep, "compute_at_reward", title, metric, compute_key)]
    points = frames.on_compute_axis(sweep.by_key[metric], sweep.by_key[compute_key]).rename(columns={"compute": "x"})
    unit = COMPUTE_LABELS[compute]
    return list(
        _threshold_tables(
            sweep, points, crossing.compute_at_reward, kappa, smooth_window, "compute_at_reward", title, unit
        )
    )


def steps_to_threshold_tables(
    sweep: PreparedSweep, metric: str, kappa: float | None, smooth_window: int
) -> list[ReportTable]:
    """[D eq. 19] Steps(reward ≥ κ) on the training reward."""
    title = f"Steps to reward ≥ {'κ' if kappa is None else f'{kappa:.4g}'}"
    if kappa is None or not sweep.has(metric):
        return [_no_table(sweep, "steps_to_threshold", title, metric)]
    points = sweep.by_key[metric].assign(x=lambda f: f["step"].astype(float))
    return list(
        _threshold_tables(
            sweep, points, crossing.steps_to_threshold, kappa, smooth_window, "steps_to_threshold", title, "steps"
        )
    )


def _no_table(sweep: PreparedSweep, name: str, title: str, metric: str, *more: str) -> ReportTable:
    """The section of a threshold table that has no κ: the keys not logged, else why there is no κ."""
    missing = [key for key in (metric, *more) if not sweep.has(key)]
    if missing:
        return ReportTable.not_logged(name, title, *missing)
    return ReportTable(name, title, pd.DataFrame(), pd.DataFrame(), [default_kappa(sweep, metric)[1]])


def _threshold_tables(
    sweep: PreparedSweep,
    points: pd.DataFrame,
    first_reach: Crossing,
    kappa: float,
    smooth_window: int,
    name: str,
    title: str,
    unit: str,
) -> tuple[ReportTable, ReportTable]:
    """Per run `first_reach` (the first x where the reward reaches κ), and per arm the mean (a number
    only when every seed reached κ), normalised to the baseline of the same group.
    `points`: run_id, x, value."""
    reached_at = {
        run_id: first_reach(part["x"].to_numpy(), part["value"].to_numpy(), kappa, smooth_window)
        for run_id, part in points.groupby("run_id", sort=False)
    }
    per_run = sweep.runs.loc[sweep.runs.index.isin(reached_at.keys()), ["group", "arm", "seed", "name"]].copy()
    per_run["value"] = [float(reached_at[r]) if reached_at[r] is not None else np.nan for r in per_run.index]
    per_run["reached"] = per_run["value"].notna()
    run_data = per_run.reset_index().rename(columns={"value": name})
    run_data = run_data[["group", "arm", "seed", "run_id", "name", name, "reached"]]
    run_data = run_data.sort_values(["group", "arm", "seed"], key=sweep.sort_key(), kind="stable")
    arm_rows = []
    for group in sweep.groups:
        in_group = per_run[per_run["group"] == group]
        for arm in sweep.arms:
            part = in_group[in_group["arm"] == arm].sort_values("seed")
            if part.empty:
                continue
            reached_all = bool(part["reached"].all())
            arm_rows.append({
                "group": group, "arm": arm, "n_seeds": len(part), "n_reached": int(part["reached"].sum()),
                "mean": float(part["value"].mean()) if reached_all else np.nan,
                "per_run": " · ".join(f"s{s}: {_reached_text(v)}" for s, v in zip(part["seed"], part["value"])),
            })
    data = pd.DataFrame(arm_rows)
    base_mean = data[data["arm"] == sweep.baseline].set_index("group")["mean"]
    data["normalised"] = [crossing.ratio_to_baseline(m, base_mean.get(g)) for g, m in zip(data["group"], data["mean"])]
    display = pd.DataFrame({
        "group": data["group"],
        "arm": data["arm"],
        "per run": data["per_run"],
        f"mean ({unit})": [
            fmt_number(m) if np.isfinite(m) else f"not reached ({k}/{n} seeds reached κ)"
            for m, k, n in zip(data["mean"], data["n_reached"], data["n_seeds"])
        ],
        f"vs {sweep.baseline}": [_normalised_text(m, r) for m, r in zip(data["mean"], data["normalised"])],
    })
    data = data.drop(columns="per_run")
    notes = [
        f"κ = {kappa:.4g}; first logged point where the reward"
        + (f" (trailing mean over {smooth_window} steps)" if smooth_window > 1 else "")
        + " is ≥ κ. An arm gets a number only if every seed reached κ; the baseline is 1.00×."
    ]
    arm_table = ReportTable(name, title, data, sweep.readable(display), notes)
    run_table = ReportTable(f"{name}_runs", f"{title} — per run", run_data, pd.DataFrame(), [], shown=False)
    return arm_table, run_table


def _reached_text(value: float) -> str:
    return fmt_number(value) if np.isfinite(value) else "not reached"


def _normalised_text(mean: float, ratio: float) -> str:
    if not np.isfinite(mean):
        return "not reached"
    if np.isfinite(ratio):
        return fmt_ratio(ratio)
    return "n/a (baseline not reached)"
