"""The report's plots: reward vs compute with 95% bands and each arm's fitted compute-scaling curve,
Compute@Reward bars, mechanisms vs step, the performance profiles of the last evaluation (rliable).

matplotlib's object API (Figure, no pyplot): Agg canvas, no global backend state, thread-safe.
Bands come from `cancelctl.stats.intervals.band_on_grid` (pointwise Student's t, the tables' interval); the bars
read the Compute@Reward tables, the fitted curves the compute-scaling table (`cancelctl.report.scaling`),
the profiles the performance-profile table (`cancelctl.report.improvement`).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from cancelctl.report.formatting import fmt_ratio
from cancelctl.report.prepared import ENTROPY_KEY, PreparedSweep, Report
from cancelctl.stats import frames, intervals, scaling
from cancelctl.stats.frames import COMPUTE_KEYS, COMPUTE_LABELS

# plot -> the table it is shown with (a table that is absent: shown with compute_match)
PLOT_TABLE = {
    "reward_vs_compute": "compute_scaling",
    "compute_at_reward": "compute_at_reward",
    "mechanisms_vs_step": "mechanisms",
    "performance_profile": "improvement",
}


def _arm_colors(sweep: PreparedSweep) -> dict[str, str]:
    return {arm: f"C{i % 10}" for i, arm in enumerate(sweep.arms)}


def _grid_of_axes(n_panels: int, n_cols: int, width: float, height: float):
    from matplotlib.figure import Figure

    n_rows = max(1, -(-n_panels // n_cols))
    fig = Figure(figsize=(width * n_cols, height * n_rows), layout="constrained")
    return fig, fig.subplots(n_rows, n_cols, squeeze=False)


def _finish(fig, title: str, path: Path, legend_axes=()) -> Path:
    """Title wrapped to the figure's width (a one-panel figure is narrower than its title), one legend
    below the panels instead of one over each panel's curves — every label any panel drew, once (an arm
    may have no curve in the first panel) — and the saved image cut to what was drawn, so nothing is
    clipped at any width."""
    entries: dict[str, object] = {}
    for ax in legend_axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncols=min(4, len(entries)),
                   fontsize=8, frameon=False)
    title_size = 10
    chars_per_line = max(30, int(fig.get_figwidth() * 72 / (0.55 * title_size)))  # ~0.55 em per character
    fig.suptitle("\n".join(textwrap.wrap(title, chars_per_line)), fontsize=title_size)
    fig.savefig(path, dpi=100, bbox_inches="tight", pad_inches=0.1)
    return path


def _band(ax, points: pd.DataFrame, arm: str, color: str, n_grid: int) -> bool:
    """Mean across the arm's seeds with the Student's t band; points: run_id, x, value (one group)."""
    curves = [(p["x"].to_numpy(float), p["value"].to_numpy(float)) for _, p in points.groupby("run_id", sort=False)]
    if not curves:
        return False
    try:
        grid, mean, lo, hi = intervals.band_on_grid(curves, n_grid=n_grid)
    except ValueError:
        return False
    ax.plot(grid, mean, color=color, lw=1.6, label=arm)  # one legend for every panel: the seeds are the tables' n
    ax.fill_between(grid, lo, hi, color=color, alpha=0.18, lw=0)
    return True


def _fitted_curves(report: Report) -> dict[tuple[str, str], scaling.ComputeCurve]:
    """(group, arm) -> the curve of the mean fitted parameters over seeds, for the report's reward."""
    table = next((t for t in report.tables if t.name == "compute_scaling"), None)
    if table is None or table.data.empty or "key" not in table.data.columns:
        return {}
    rows = table.data[(table.data["key"] == report.metric) & (table.data["n_fitted"] > 0)]
    return {
        (r.group, r.arm): scaling.ComputeCurve(r.asymptote_mean, r.efficiency_mean, r.midpoint_mean, r.r0_mean)
        for r in rows.itertuples()
    }


FIT_LABEL = "dashed: ScaleRL fit (A, B, C_mid in the compute-scaling table)"


def _fit_overlay(ax, points: pd.DataFrame, curve: scaling.ComputeCurve | None, color: str) -> None:
    """The arm's fitted curve (mean parameters), dashed, over the compute its fits used (one legend
    entry for all fits: the arm is its colour, its parameters are in the table above the plot)."""
    if curve is None or points.empty:
        return
    top = float(points["x"].max())
    x = np.linspace(scaling.EARLY_FRACTION * top, top, 120)
    if FIT_LABEL not in ax.get_legend_handles_labels()[1]:
        ax.plot([], [], color="0.35", lw=1.1, ls="--", label=FIT_LABEL)  # the legend's entry: no one arm's colour
    ax.plot(x, curve(x), color=color, lw=1.1, ls="--")


def plot_reward_vs_compute(sweep: PreparedSweep, report: Report, path: Path) -> Path | None:
    """Training reward vs cumulative compute, mean and pointwise 95% Student's t band across seeds, per group;
    dashed over it each arm's fitted compute-scaling curve (mean parameters over seeds)."""
    compute_key = COMPUTE_KEYS[report.compute]
    if not (sweep.has(report.metric) and sweep.has(compute_key)):
        return None
    points = frames.on_compute_axis(sweep.by_key[report.metric], sweep.by_key[compute_key])
    points = points.rename(columns={"compute": "x"}).join(sweep.runs[["group", "arm"]], on="run_id")
    colors = _arm_colors(sweep)
    fits = _fitted_curves(report)
    fig, axes = _grid_of_axes(len(sweep.groups), min(3, len(sweep.groups)), 5.4, 3.6)
    for ax, group in zip(axes.flat, sweep.groups):
        in_group = points[points["group"] == group]
        for arm in sweep.arms:
            _band(ax, in_group[in_group["arm"] == arm], arm, colors[arm], 120)
            _fit_overlay(ax, in_group[in_group["arm"] == arm], fits.get((group, arm)), colors[arm])
        if report.kappa is not None:
            ax.axhline(report.kappa, color="0.4", ls="--", lw=1, label=f"κ = {report.kappa:.3g}")
        ax.set(title=group or report.sweep, xlabel=COMPUTE_LABELS[report.compute], ylabel=report.metric)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(sweep.groups):]:
        ax.set_visible(False)
    return _finish(fig, "Training reward vs compute (mean, 95% t band; dashed: ScaleRL fit)", path, axes.flat)


MECHANISM_CURVES = ("mismatch/rho_std", ENTROPY_KEY, "dfpo/asym")


def plot_mechanisms_vs_step(sweep: PreparedSweep, report: Report, path: Path) -> Path | None:
    """Mismatch, entropy and asym vs step: one row per group, one column per logged key."""
    keys = [k for k in MECHANISM_CURVES if sweep.has(k)]
    if not keys:
        return None
    colors = _arm_colors(sweep)
    fig, axes = _grid_of_axes(len(sweep.groups) * len(keys), len(keys), 4.6, 3.0)
    meta = sweep.runs[["group", "arm"]]
    points = {key: sweep.by_key[key].join(meta, on="run_id").assign(x=lambda f: f["step"]) for key in keys}
    for row, group in enumerate(sweep.groups):
        for col, key in enumerate(keys):
            ax = axes[row, col]
            in_group = points[key][points[key]["group"] == group]
            n_steps = max(3, min(200, in_group["step"].nunique()))
            for arm in sweep.arms:
                _band(ax, in_group[in_group["arm"] == arm], arm, colors[arm], n_steps)
            ax.set(title=f"{key}" + (f" — {group}" if group else ""), xlabel="step")
            ax.title.set_fontsize(9)
            ax.grid(alpha=0.3)
    title = "Mechanism metrics vs step (mean, pointwise 95% Student's t band over seeds)"
    return _finish(fig, title, path, axes.flat)


def plot_compute_at_reward(sweep: PreparedSweep, report: Report, path: Path) -> Path | None:
    """Bars: arm mean Compute@Reward (only when every seed reached κ), dots: each run, text: ×baseline."""
    tables = {t.name: t for t in report.tables}
    arm_table, run_table = tables.get("compute_at_reward"), tables.get("compute_at_reward_runs")
    if arm_table is None or run_table is None or arm_table.data.empty:
        return None
    colors = _arm_colors(sweep)
    fig, axes = _grid_of_axes(len(sweep.groups), min(3, len(sweep.groups)), 5.0, 3.4)
    for ax, group in zip(axes.flat, sweep.groups):
        arms = arm_table.data[arm_table.data["group"] == group].reset_index(drop=True)
        runs = run_table.data[run_table.data["group"] == group]
        top = np.nanmax(runs["compute_at_reward"].to_numpy(float), initial=0.0) or 1.0
        for i, row in arms.iterrows():
            reached = runs[(runs["arm"] == row["arm"]) & runs["reached"]]["compute_at_reward"]
            if np.isfinite(row["mean"]):
                ax.bar(i, row["mean"], color=colors[row["arm"]], alpha=0.75)
                label = fmt_ratio(row["normalised"]) if np.isfinite(row["normalised"]) else "n/a"
                ax.text(i, max(row["mean"], reached.max()) + 0.03 * top, label, ha="center", fontsize=8)
            else:
                label = f"not reached\n({row['n_reached']}/{row['n_seeds']} seeds)"
                ax.text(i, 0.05 * top, label, ha="center", fontsize=7, color="0.3")
            ax.scatter(np.full(len(reached), i), reached, color="k", s=10, zorder=3)
        ax.set_xticks(range(len(arms)), arms["arm"], rotation=20, fontsize=8)
        ax.set(title=group or report.sweep, ylabel=f"{COMPUTE_LABELS[report.compute]} to κ", ylim=(0, 1.15 * top))
        ax.grid(alpha=0.3, axis="y")
    for ax in list(axes.flat)[len(sweep.groups):]:
        ax.set_visible(False)
    title = f"Compute@Reward={report.kappa:.3g} (bars: arm mean, dots: runs, text: × {report.baseline})"
    return _finish(fig, title, path)


def plot_performance_profile(sweep: PreparedSweep, report: Report, path: Path) -> Path | None:
    """Per group, each arm's fraction of runs whose last evaluation exceeds τ (a step curve) with its
    95% bootstrap band, runs pooled over benchmarks [rliable §4.1]."""
    table = next((t for t in report.tables if t.name == "performance_profile"), None)
    if table is None or table.data.empty:
        return None
    colors = _arm_colors(sweep)
    groups = [g for g in sweep.groups if (table.data["group"] == g).any()]
    fig, axes = _grid_of_axes(len(groups), min(3, len(groups)), 5.0, 3.4)
    for ax, group in zip(axes.flat, groups):
        in_group = table.data[table.data["group"] == group]
        for arm in sweep.arms:
            points = in_group[in_group["arm"] == arm]
            if points.empty:
                continue
            label = f"{arm} ({int(points['n_runs'].iloc[0])} runs)"
            ax.step(points["tau"], points["fraction"], where="post", color=colors[arm], lw=1.6, label=label)
            ax.fill_between(points["tau"], points["lo"], points["hi"], step="post", color=colors[arm], alpha=0.1, lw=0)
        ax.set(title=group or report.sweep, xlabel="last evaluation score τ", ylabel="fraction of runs > τ",
               ylim=(-0.03, 1.03))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    title = "Performance profiles: fraction of runs whose last evaluation exceeds τ (95% bootstrap band over runs)"
    return _finish(fig, title, path, axes.flat)


def draw_plots(sweep: PreparedSweep, report: Report, plots_dir: Path) -> dict[str, Path]:
    plots_dir.mkdir(parents=True, exist_ok=True)
    drawn = {}
    for name, draw in (
        ("reward_vs_compute", plot_reward_vs_compute),
        ("compute_at_reward", plot_compute_at_reward),
        ("mechanisms_vs_step", plot_mechanisms_vs_step),
        ("performance_profile", plot_performance_profile),
    ):
        path = draw(sweep, report, plots_dir / f"{name}.png")
        if path is not None:
            drawn[name] = path
    return drawn



def attach_plots(report: Report) -> None:
    """List each drawn plot with the table it illustrates (`ReportTable.plots`)."""
    names = {t.name for t in report.tables}
    for plot in report.plots:
        target = PLOT_TABLE.get(plot)
        table = report.table(target if target in names else "compute_match")
        table.plots.append(plot)
