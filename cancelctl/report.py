"""Sweep report: compute-matched tables, bootstrap statistics, Compute@Reward, Jitter2, plots.

`build_report(runs, metrics, ...)` takes the two frames of `cancelctl.tracking` `collect` and writes
`report.md`, a self-contained `report.html`, every table as CSV and JSON (`tables/`) and the plots
(`plots/`) into `out_dir`; it prints the tables to a rich console when one is given. The numbers
come from `cancelctl.analysis`; this module only selects, groups, formats and writes.
What each table means: SPEC.md "Reports" and [D] §4.5, §5, Tables 1–4.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal

import numpy as np
import pandas as pd

from cancelctl import analysis
from cancelctl.analysis import COMPUTE_KEYS, COMPUTE_LABELS, ComputeViolation
from cancelctl.errors import SpecError, SpecIssue
from cancelctl.errors import UnmatchedArmsError as _PlanUnmatchedArmsError

if TYPE_CHECKING:
    from rich.console import Console

ComputeAxis = Literal["tokens", "updates", "hours"]

REWARD_KEY = "critic/score/mean"
ENTROPY_KEY = "actor/entropy"
# verl's validation keys, '@' sanitised for MLflow: val-core/<benchmark>/acc/mean_at_<k>
EVAL_KEY = re.compile(r"^val-core/(?P<benchmark>.+)/acc/mean_at_(?P<k>\d+)$")
ENERGY_KEY = re.compile(r"^cancel/energy_b(?P<bucket>\d+)$")
G_AXIS = "axis.rollout.G"
# default κ: this fraction of the way from the baseline's first to its peak seed-mean reward
DEFAULT_KAPPA_FRACTION = 0.9
MATCHED_STATES = ("FINISHED",)
NOT_MATCHED = "NOT compute-matched"
CANNOT = "cannot build the report"


class UnmatchedArmsError(_PlanUnmatchedArmsError):
    """Arms in a comparison group differ in logged compute; the report refuses (exit code 2).

    A subclass of the plan-time error, so the CLI's SpecError handling prints it the same way.
    """

    def __init__(self, violations: list[ComputeViolation]):
        self.violations = list(violations)
        super().__init__([SpecIssue(None, "", str(v)) for v in self.violations])
        self.title = "arms are not compute-matched in logged compute (pass --allow-unmatched to report anyway)"


@dataclass
class ReportTable:
    """One table: numbers for CSV/JSON (`data`), strings for terminal/Markdown/HTML (`display`)."""

    name: str  # file stem under tables/
    title: str
    data: pd.DataFrame
    display: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)  # keys of Report.plots shown with this table
    shown: bool = True  # False: written as CSV/JSON only (per-run detail)

    @property
    def empty(self) -> bool:
        return self.display.empty


@dataclass
class Report:
    sweep: str
    out_dir: Path
    baseline: str
    metric: str
    compute: str
    kappa: float | None
    kappa_note: str
    violations: list[ComputeViolation]
    tables: list[ReportTable]
    plots: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    @property
    def compute_matched(self) -> bool:
        return not self.violations

    def table(self, name: str) -> ReportTable:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(f"no table {name!r}; tables: {', '.join(t.name for t in self.tables)}")


# ---------------------------------------------------------------- formatting


def fmt_number(value: float | None, digits: int = 4) -> str:
    """Compact, unit-free: 0.8253, 12.3k, 1.25M; missing as an em dash."""
    if value is None or not np.isfinite(value):
        return "—"
    magnitude = abs(value)
    for threshold, scale, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if magnitude >= threshold:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.{digits}g}"


def fmt_interval(mean: float, lo: float, hi: float, n: int) -> str:
    text = f"{fmt_number(mean, 3)} [{fmt_number(lo, 3)}, {fmt_number(hi, 3)}]"
    return text + " (1 seed)" if n == 1 else text


def fmt_p(p: float, n_paired: int) -> str:
    if n_paired == 0:
        return "no shared seeds"
    if not np.isfinite(p):
        return f"n/a ({n_paired} shared seed{'s' if n_paired != 1 else ''})"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_delta(delta: float) -> str:
    return "—" if not np.isfinite(delta) else ("+" if delta >= 0 else "") + fmt_number(delta)


def fmt_ratio(ratio: float) -> str:
    return f"{ratio:.2f}×"


# ---------------------------------------------------------------- the input, prepared once


@dataclass
class _Sweep:
    """Selected runs indexed by run_id, metrics split by key, and the comparison order."""

    runs: pd.DataFrame
    by_key: dict[str, pd.DataFrame]
    baseline: str
    groups: list[str]
    arms: list[str]
    n_boot: int
    seed: int

    def has(self, key: str) -> bool:
        return key in self.by_key

    def with_meta(self, per_run: pd.Series, name: str = "value") -> pd.DataFrame:
        """run_id -> value, joined with group, arm, seed; runs without a value dropped."""
        frame = self.runs[["group", "arm", "seed"]].join(per_run.rename(name), how="inner")
        return frame.dropna(subset=[name])

    def per_run(self, key: str, reduce: Callable[[pd.DataFrame], float]) -> pd.Series:
        """run_id -> reduce(points of that run for `key`), where reduce sees (step, value) sorted by step."""
        series = self.by_key[key]
        out = {}
        for run_id, part in series.groupby("run_id", sort=False):
            try:
                out[run_id] = reduce(part)
            except ValueError:  # too few points for this statistic: leave the run out
                continue
        return pd.Series(out, dtype=float)


def _order_key(value: object) -> tuple:
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def _group_order(runs: pd.DataFrame) -> list[str]:
    """Groups ordered by their axis values, numerically where numeric (G=4 before G=16)."""
    axis_columns = [c for c in runs.columns if c.startswith("axis.")]
    firsts = runs.groupby("group", sort=False).first()
    return sorted(firsts.index, key=lambda g: tuple(_order_key(firsts.at[g, c]) for c in axis_columns) + (str(g),))


def _prepare(
    runs: pd.DataFrame, metrics: pd.DataFrame, baseline: str, include_unfinished: bool, n_boot: int, seed: int
) -> tuple[_Sweep, list[str]]:
    missing = [c for c in ("run_id", "arm", "group", "seed", "G") if c not in runs.columns]
    if missing:
        raise SpecError(f"runs frame lacks columns: {', '.join(missing)}", title=CANNOT)
    if runs.empty:
        raise SpecError("no runs in this sweep", title=CANNOT)
    notes = []
    selected = runs.copy()
    selected["group"] = selected["group"].fillna("").astype(str)
    if "state" in selected.columns and not include_unfinished:
        finished = selected["state"].isin(MATCHED_STATES)
        if (~finished).any():
            left_out = selected.loc[~finished]
            counts = ", ".join(f"{state}: {n}" for state, n in left_out["state"].fillna("?").value_counts().items())
            notes.append(
                f"{len(left_out)} run(s) left out because they are not FINISHED ({counts}): "
                + ", ".join(left_out["name"].fillna(left_out["run_id"]).astype(str).head(12))
                + (" ..." if len(left_out) > 12 else "")
                + " — pass include_unfinished to use them."
            )
        selected = selected.loc[finished]
    if selected.empty:
        raise SpecError("no FINISHED runs in this sweep (see the run states)", title=CANNOT)
    arms_present = sorted(selected["arm"].astype(str).unique())
    if baseline not in arms_present:
        raise SpecError(
            f"baseline arm {baseline!r} has no runs to report; arms: {', '.join(arms_present)}",
            title=CANNOT,
        )
    selected = selected.set_index("run_id", drop=False)
    wanted = metrics[metrics["run_id"].isin(selected.index)]
    sweep = _Sweep(
        runs=selected,
        by_key=analysis.split_by_key(wanted),
        baseline=baseline,
        groups=_group_order(selected),
        arms=[baseline] + [a for a in arms_present if a != baseline],
        n_boot=n_boot,
        seed=seed,
    )
    return sweep, notes


# ---------------------------------------------------------------- arm statistics


def _arm_summary(sweep: _Sweep, values: pd.DataFrame, compare: bool = True) -> pd.DataFrame:
    """Per (group, arm): n seeds, mean with bootstrap CI over seeds and, vs the baseline of the same
    group, the paired difference and its p-value over shared seeds. `values`: group, arm, seed,
    value; repeated runs of one seed are averaged first."""
    per_seed = values.groupby(["group", "arm", "seed"])["value"].mean()
    rows = []
    for group in sweep.groups:
        if group not in per_seed.index.get_level_values(0):
            continue
        in_group = per_seed.loc[group]
        base = in_group.loc[sweep.baseline] if sweep.baseline in in_group.index.get_level_values(0) else None
        for arm in sweep.arms:
            if arm not in in_group.index.get_level_values(0):
                continue
            seeds = in_group.loc[arm]
            interval = analysis.bootstrap_ci(seeds.to_numpy(), n_boot=sweep.n_boot, seed=sweep.seed)
            row = {"group": group, "arm": arm, "n_seeds": interval.n}
            row.update(mean=interval.mean, ci_lo=interval.lo, ci_hi=interval.hi)
            if compare:
                row.update(delta_vs_baseline=np.nan, p_value=np.nan, n_paired=0)
                if base is not None and arm != sweep.baseline:
                    shared = seeds.index.intersection(base.index)
                    if len(shared):
                        x, x_base = seeds.loc[shared].to_numpy(), base.loc[shared].to_numpy()
                        test = analysis.paired_bootstrap_test(x, x_base, n_boot=sweep.n_boot, seed=sweep.seed)
                        row.update(delta_vs_baseline=test.delta, p_value=test.p, n_paired=test.n)
            rows.append(row)
    return pd.DataFrame(rows)


SUMMARY_COLUMNS = ["n_seeds", "mean", "ci_lo", "ci_hi", "delta_vs_baseline", "p_value", "n_paired"]


def _p_texts(sweep: _Sweep, data: pd.DataFrame) -> list[str]:
    return [
        "—" if arm == sweep.baseline else fmt_p(p, n)
        for arm, p, n in zip(data["arm"], data["p_value"], data["n_paired"])
    ]


def _with_group_column(sweep: _Sweep, display: pd.DataFrame) -> pd.DataFrame:
    """Without a grid every group is "": drop the column from what people read."""
    if "group" in display.columns and sweep.groups == [""]:
        return display.drop(columns="group")
    return display


def _not_logged(name: str, title: str, *keys: str) -> ReportTable:
    return ReportTable(name, title, pd.DataFrame(), pd.DataFrame(), [f"not logged: {', '.join(keys)}"])


# ---------------------------------------------------------------- tables


def compute_match_table(sweep: _Sweep, violations: list[ComputeViolation], tol: float) -> ReportTable:
    """Logged compute per arm and group: the evidence for (or against) the compute-matched protocol."""
    totals = analysis.compute_totals(sweep.runs.reset_index(drop=True), sweep.by_key)
    bad_groups = {v.group for v in violations}
    rows, shown = [], []
    for group in sweep.groups:
        for arm in sweep.arms:
            part = totals[(totals["group"] == group) & (totals["arm"] == arm)]
            if part.empty:
                continue
            tokens, updates, g = part["gen_tokens_total"], part["update_steps"], part["G"]
            rows.append({
                "group": group, "arm": arm, "n_runs": len(part),
                "gen_tokens_mean": tokens.mean(), "gen_tokens_min": tokens.min(), "gen_tokens_max": tokens.max(),
                "update_steps_min": updates.min(), "update_steps_max": updates.max(),
                "G_min": g.min(), "G_max": g.max(), "compute_matched": group not in bad_groups,
            })
            shown.append({
                "group": group, "arm": arm, "runs": str(len(part)),
                "generated tokens (mean)": "not logged" if tokens.isna().all() else fmt_number(tokens.mean()),
                "update steps": "not logged" if updates.isna().all() else _range_text(updates),
                "G": _range_text(g.astype(float)),
                "matched": "yes" if group not in bad_groups else NOT_MATCHED,
            })
    notes = [
        f"Compute-matched protocol [D §5]: within a group, arms must match on update steps and G exactly and on "
        f"total generated tokens within {tol:.0%} (arm means over seeds)."
    ]
    for key in ("compute/gen_tokens_cum", "compute/update_steps_cum"):
        if not sweep.has(key) and not (key == "compute/gen_tokens_cum" and sweep.has("compute/gen_tokens")):
            notes.append(f"not logged: {key} — that part of the check was skipped")
    notes += [f"{NOT_MATCHED}: {v}" for v in violations]
    display = _with_group_column(sweep, pd.DataFrame(shown))
    return ReportTable("compute_match", "Compute matching (logged)", pd.DataFrame(rows), display, notes)


def _range_text(values: pd.Series) -> str:
    values = values.dropna()
    if values.empty:
        return "—"
    lo, hi = values.min(), values.max()
    return f"{lo:,.0f}" if lo == hi else f"{lo:,.0f}–{hi:,.0f}"


def eval_benchmarks(by_key: dict[str, pd.DataFrame]) -> list[tuple[str, str]]:
    """(metric key, label) of every logged eval benchmark, label "<benchmark> avg@k"."""
    found = []
    for key in sorted(by_key):
        match = EVAL_KEY.match(key)
        if match:
            found.append((int(match["k"]), match["benchmark"], key))
    return [(key, f"{bench} avg@{k}") for k, bench, key in sorted(found, key=lambda t: (t[1], t[0]))]


def final_score_table(sweep: _Sweep) -> ReportTable:
    """[D Table 1]: final eval per arm × benchmark, mean [95% CI] over seeds, Δ and paired p."""
    title = "Final scores (last evaluation)"
    benchmarks = eval_benchmarks(sweep.by_key)
    if not benchmarks:
        return _not_logged("final_scores", title, "val-core/<benchmark>/acc/mean_at_<k>")
    parts = []
    for key, label in benchmarks:
        summary = _arm_summary(sweep, sweep.with_meta(analysis.last_values(sweep.by_key[key])))
        if not summary.empty:
            parts.append(summary.assign(benchmark=label, key=key))
    if not parts:
        return _not_logged("final_scores", title, *(key for key, _ in benchmarks))
    data = pd.concat(parts, ignore_index=True)
    data = data[["group", "benchmark", "key", "arm", *SUMMARY_COLUMNS]]
    display = pd.DataFrame({
        "group": data["group"],
        "benchmark": data["benchmark"],
        "arm": data["arm"],
        "n": data["n_seeds"].astype(str),
        "mean [95% CI]": [fmt_interval(r.mean, r.ci_lo, r.ci_hi, r.n_seeds) for r in data.itertuples()],
        f"Δ vs {sweep.baseline}": [fmt_delta(d) for d in data["delta_vs_baseline"]],
        "p (paired)": _p_texts(sweep, data),
    })
    notes = [
        "95% CI: expanded-percentile bootstrap over seeds; "
        "p: two-sided paired bootstrap-t over seeds shared with the baseline."
    ]
    return ReportTable("final_scores", title, data, _with_group_column(sweep, display), notes)


def default_kappa(sweep: _Sweep, metric: str) -> tuple[float | None, str]:
    """κ when none is given: DEFAULT_KAPPA_FRACTION of the way from the baseline's first to its
    peak seed-mean reward, the lowest over groups — so the baseline reaches it in every group and
    every arm's Compute@Reward can be normalised."""
    if not sweep.has(metric):
        return None, f"no κ: {metric} not logged"
    points = sweep.by_key[metric].join(sweep.runs[["group", "arm"]], on="run_id")
    base = points[points["arm"] == sweep.baseline]
    candidates = []
    for _, part in base.groupby("group"):
        mean_curve = part.groupby("step")["value"].mean().sort_index()
        first, peak = float(mean_curve.iloc[0]), float(mean_curve.max())
        candidates.append(first + DEFAULT_KAPPA_FRACTION * (peak - first))
    if not candidates:
        return None, f"no κ: the baseline logged no {metric}"
    kappa = min(candidates)
    note = (
        f"κ = {kappa:.4g} (default: {DEFAULT_KAPPA_FRACTION:.0%} of the way from the baseline's first to its peak "
        f"seed-mean {metric}, lowest over groups; set it with --threshold)"
    )
    return kappa, note


def _threshold_tables(
    sweep: _Sweep, points: pd.DataFrame, kappa: float, smooth_window: int, name: str, title: str, unit: str
) -> tuple[ReportTable, ReportTable]:
    """Per run the first x where the reward reaches κ, and per arm the mean (a number only when every
    seed reached κ), normalised to the baseline of the same group. `points`: run_id, x, value."""
    crossing = {
        run_id: analysis.first_crossing(part["x"].to_numpy(), part["value"].to_numpy(), kappa, smooth_window)
        for run_id, part in points.groupby("run_id", sort=False)
    }
    per_run = sweep.runs.loc[sweep.runs.index.isin(crossing.keys()), ["group", "arm", "seed", "name"]].copy()
    per_run["value"] = [crossing[r] if crossing[r] is not None else np.nan for r in per_run.index]
    per_run["reached"] = per_run["value"].notna()
    run_data = per_run.reset_index().rename(columns={"value": name})
    run_data = run_data[["group", "arm", "seed", "run_id", "name", name, "reached"]]
    run_data = run_data.sort_values(["group", "arm", "seed"], key=_sort_key(sweep), kind="stable")
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
    data["normalised"] = [analysis.ratio_to_baseline(m, base_mean.get(g)) for g, m in zip(data["group"], data["mean"])]
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
    arm_table = ReportTable(name, title, data, _with_group_column(sweep, display), notes)
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


def _sort_key(sweep: _Sweep):
    group_rank = {g: i for i, g in enumerate(sweep.groups)}
    arm_rank = {a: i for i, a in enumerate(sweep.arms)}

    def key(column: pd.Series) -> pd.Series:
        if column.name == "group":
            return column.map(group_rank)
        if column.name == "arm":
            return column.map(arm_rank)
        return column

    return key


def compute_at_reward_tables(
    sweep: _Sweep, metric: str, compute: str, kappa: float | None, smooth_window: int
) -> list[ReportTable]:
    """[D Table 2, eq. 19]: compute at which the training reward first reaches κ."""
    title = f"Compute@Reward={'κ' if kappa is None else f'{kappa:.4g}'} ({COMPUTE_LABELS[compute]})"
    compute_key = COMPUTE_KEYS[compute]
    if kappa is None or not sweep.has(metric) or not sweep.has(compute_key):
        missing = [k for k in (metric, compute_key) if not sweep.has(k)] or ["κ"]
        return [_not_logged("compute_at_reward", title, *missing)]
    points = analysis.on_compute_axis(sweep.by_key[metric], sweep.by_key[compute_key]).rename(columns={"compute": "x"})
    unit = COMPUTE_LABELS[compute]
    return list(_threshold_tables(sweep, points, kappa, smooth_window, "compute_at_reward", title, unit))


def steps_to_threshold_tables(
    sweep: _Sweep, metric: str, kappa: float | None, smooth_window: int
) -> list[ReportTable]:
    """[D eq. 19] Steps(reward ≥ κ) on the training reward."""
    title = f"Steps to reward ≥ {'κ' if kappa is None else f'{kappa:.4g}'}"
    if kappa is None or not sweep.has(metric):
        return [_not_logged("steps_to_threshold", title, metric)]
    points = sweep.by_key[metric].assign(x=lambda f: f["step"].astype(float))
    return list(_threshold_tables(sweep, points, kappa, smooth_window, "steps_to_threshold", title, "steps"))


def jitter2_table(sweep: _Sweep, keys: list[str]) -> ReportTable:
    """[D eq. 20, 21]: Jitter2 of each run's curve (per step), mean [CI] per arm, ratio to baseline."""
    title = "Jitter2 (second-difference jitter, lower = smoother)"
    logged = [k for k in keys if sweep.has(k)]
    if not logged:
        return _not_logged("jitter2", title, *keys)
    parts = []
    for key in logged:
        per_run = sweep.per_run(key, lambda part: analysis.jitter2(part["value"].to_numpy()))
        summary = _arm_summary(sweep, sweep.with_meta(per_run), compare=True)
        if not summary.empty:
            parts.append(summary.assign(metric=key))
    if not parts:
        return _not_logged("jitter2", title, *(f"{k} (≥ 3 steps)" for k in keys))
    data = pd.concat(parts, ignore_index=True)
    base = data[data["arm"] == sweep.baseline].set_index(["metric", "group"])["mean"]
    data["ratio_vs_baseline"] = [
        analysis.ratio_to_baseline(m, base.get((k, g))) for k, g, m in zip(data["metric"], data["group"], data["mean"])
    ]
    data = data[["group", "metric", "arm", "ratio_vs_baseline", *SUMMARY_COLUMNS]]
    display = pd.DataFrame({
        "group": data["group"], "metric": data["metric"], "arm": data["arm"], "n": data["n_seeds"].astype(str),
        "Jitter2 [95% CI]": [fmt_interval(r.mean, r.ci_lo, r.ci_hi, r.n_seeds) for r in data.itertuples()],
        f"vs {sweep.baseline}": [fmt_ratio(r) if np.isfinite(r) else "—" for r in data["ratio_vs_baseline"]],
        "p (paired)": _p_texts(sweep, data),
    })
    notes = [f"not logged: {k}" for k in keys if k not in logged]
    return ReportTable("jitter2", title, data, _with_group_column(sweep, display), notes)


def delta_per_g_table(sweep: _Sweep, final_scores: ReportTable) -> ReportTable:
    """[D Table 4]: Δ(arm − baseline) of the final score per group size G, when G is a sweep axis."""
    title = f"Δ vs {sweep.baseline} per group size G"
    g_values = sweep.runs[G_AXIS].dropna().unique() if G_AXIS in sweep.runs.columns else []
    if len(g_values) < 2:
        note = "G is not a sweep axis (rollout.G): no table"
        return ReportTable("delta_per_G", title, pd.DataFrame(), pd.DataFrame(), [note])
    if final_scores.data.empty:
        return _not_logged("delta_per_G", title, "val-core/<benchmark>/acc/mean_at_<k>")
    other_axes = [c for c in sweep.runs.columns if c.startswith("axis.") and c != G_AXIS]
    per_group = sweep.runs.groupby("group").first()
    rows = final_scores.data[final_scores.data["arm"] != sweep.baseline].copy()
    rows["G"] = [int(per_group.at[g, G_AXIS]) for g in rows["group"]]
    rows["other_axes"] = [",".join(f"{c[5:]}={per_group.at[g, c]}" for c in other_axes) for g in rows["group"]]
    data = rows[["other_axes", "benchmark", "arm", "G", "delta_vs_baseline", "p_value", "n_paired"]].sort_values(
        ["other_axes", "benchmark", "arm", "G"], kind="stable"
    )
    cell = {(o, b, a, g): f"{fmt_delta(d)} (p {fmt_p(p, n)})" for o, b, a, g, d, p, n in data.itertuples(index=False)}
    g_sorted = sorted(data["G"].unique())
    display_rows = []
    for (o, b, a), _ in data.groupby(["other_axes", "benchmark", "arm"], sort=False):
        row = {"other axes": o, "benchmark": b, "arm": a}
        row.update({f"G={g}": cell.get((o, b, a, g), "—") for g in g_sorted})
        display_rows.append(row)
    display = pd.DataFrame(display_rows)
    if not other_axes:
        display = display.drop(columns="other axes")
    notes = ["Δ = arm − baseline, mean over shared seeds."]
    return ReportTable("delta_per_G", title, data.reset_index(drop=True), display, notes)


@dataclass(frozen=True)
class Mechanism:
    label: str
    key: str
    reduce: Callable[[pd.DataFrame], float]
    source: str


def _mean_over_steps(part: pd.DataFrame) -> float:
    return float(part["value"].mean())


def _slope_per_step(part: pd.DataFrame) -> float:
    return analysis.slope(part["step"].to_numpy(float), part["value"].to_numpy())


def mechanisms(by_key: dict[str, pd.DataFrame]) -> list[Mechanism]:
    """What the mechanism summary reports; the highest-frequency energy bucket is found from the keys."""
    buckets = sorted(int(m["bucket"]) for m in map(ENERGY_KEY.match, by_key) if m)
    energy_key = f"cancel/energy_b{buckets[-1]}" if buckets else "cancel/energy_b{K-1}"
    return [
        Mechanism("asym (mean)", "dfpo/asym", _mean_over_steps, "[D eq. 23]"),
        Mechanism("ρ std growth (slope/step)", "mismatch/rho_std", _slope_per_step, "[H §2]"),
        Mechanism("J (mean)", "hacking/J", _mean_over_steps, "[H eq. 23]"),
        Mechanism("high-freq energy share (mean)", energy_key, _mean_over_steps, "[D eq. 24], last bucket"),
        Mechanism("flip rate Â>0 (mean)", "cancel/flip_pos", _mean_over_steps, "[C App. C]"),
        Mechanism("flip rate Â<0 (mean)", "cancel/flip_neg", _mean_over_steps, "[C App. C]"),
    ]


def mechanism_table(sweep: _Sweep) -> ReportTable:
    """[D §6.1]: per arm the mechanism metrics, each a per-run reduction then mean [CI] over seeds."""
    title = "Mechanism summary"
    parts, logged, missing = [], [], []
    for mech in mechanisms(sweep.by_key):
        if not sweep.has(mech.key):
            missing.append(mech.key)
            continue
        summary = _arm_summary(sweep, sweep.with_meta(sweep.per_run(mech.key, mech.reduce)), compare=False)
        if summary.empty:
            missing.append(mech.key)
            continue
        logged.append(mech)
        parts.append(summary.assign(quantity=mech.label, key=mech.key))
    if not parts:
        return _not_logged("mechanisms", title, *missing)
    data = pd.concat(parts, ignore_index=True)[["group", "arm", "quantity", "key", "n_seeds", "mean", "ci_lo", "ci_hi"]]
    cells = {(r.group, r.arm, r.quantity): fmt_interval(r.mean, r.ci_lo, r.ci_hi, r.n_seeds) for r in data.itertuples()}
    display_rows = []
    for group in sweep.groups:
        for arm in sweep.arms:
            if not ((data["group"] == group) & (data["arm"] == arm)).any():
                continue
            row = {"group": group, "arm": arm}
            row.update({m.label: cells.get((group, arm, m.label), "—") for m in logged})
            display_rows.append(row)
    notes = [", ".join(f"{m.label} = {m.key} {m.source}" for m in logged) + "; mean [95% CI] over seeds."]
    notes += [f"not logged: {key}" for key in missing]
    return ReportTable("mechanisms", title, data, _with_group_column(sweep, pd.DataFrame(display_rows)), notes)


def _mark_unmatched(tables: list[ReportTable], violations: list[ComputeViolation]) -> None:
    """Every table says which groups are not compute-matched (and so does every CSV/JSON row)."""
    bad = sorted({v.group for v in violations})
    for table in tables:
        if "group" in table.data.columns:
            table.data["compute_matched"] = ~table.data["group"].isin(bad)
        if bad and table.name != "compute_match":
            where = ", ".join(repr(g) for g in bad) if bad != [""] else "the sweep"
            table.notes.insert(0, f"⚠ {NOT_MATCHED}: {where} (reported with --allow-unmatched; see Compute matching)")


# ---------------------------------------------------------------- entry point


def build_report(
    runs: pd.DataFrame,
    metrics: pd.DataFrame,
    *,
    sweep: str,
    baseline: str,
    threshold: float | None = None,
    compute: ComputeAxis = "tokens",
    metric: str = REWARD_KEY,
    out_dir: Path,
    allow_unmatched: bool = False,
    console: Console | None = None,
    smooth_window: int = 1,
    token_tol: float = 0.10,
    include_unfinished: bool = False,
    n_boot: int = 10_000,
    seed: int = 0,
    plots: bool = True,
) -> Report:
    """Build the sweep report and write it to `out_dir` (the report folder itself, e.g.
    results/<sweep>; see `default_report_dir`).

    Raises UnmatchedArmsError (exit 2) when arms of a group differ in logged compute, unless
    `allow_unmatched`; then every table says which groups are not matched. Raises SpecError on bad
    arguments (unknown baseline, compute axis). `threshold` is κ for Compute@Reward and steps to
    threshold; None picks `default_kappa` and the report states it. Only FINISHED runs are used
    unless `include_unfinished`. `console`: a rich Console to print the tables on, or None.
    """
    if compute not in COMPUTE_KEYS:
        raise SpecError(f"--compute must be one of {', '.join(COMPUTE_KEYS)}, got {compute!r}", title=CANNOT)
    if smooth_window < 1:
        raise SpecError(f"smooth_window must be >= 1, got {smooth_window}", title=CANNOT)
    prepared, notes = _prepare(runs, metrics, baseline, include_unfinished, n_boot, seed)
    violations = analysis.check_compute_matched(prepared.runs.reset_index(drop=True), prepared.by_key, tol=token_tol)
    if violations and not allow_unmatched:
        raise UnmatchedArmsError(violations)

    if threshold is None:
        kappa, kappa_note = default_kappa(prepared, metric)
    else:
        kappa, kappa_note = float(threshold), f"κ = {threshold:.4g} (given)"

    final_scores = final_score_table(prepared)
    tables = [compute_match_table(prepared, violations, token_tol), final_scores]
    tables += compute_at_reward_tables(prepared, metric, compute, kappa, smooth_window)
    tables += steps_to_threshold_tables(prepared, metric, kappa, smooth_window)
    tables += [
        jitter2_table(prepared, [metric, ENTROPY_KEY]),
        delta_per_g_table(prepared, final_scores),
        mechanism_table(prepared),
    ]
    _mark_unmatched(tables, violations)

    report = Report(
        sweep=sweep, out_dir=Path(out_dir), baseline=baseline, metric=metric, compute=compute,
        kappa=kappa, kappa_note=kappa_note, violations=violations, tables=tables, notes=notes,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if plots:
        report.plots = draw_plots(prepared, report, out / "plots")
        _attach_plots(report)
    write_report(report)
    if console is not None:
        print_report(report, console)
    return report


def default_report_dir(sweep: str, root: Path = Path("results")) -> Path:
    return Path(root) / sweep


def _attach_plots(report: Report) -> None:
    where = {
        "reward_vs_compute": "compute_at_reward",
        "compute_at_reward": "compute_at_reward",
        "mechanisms_vs_step": "mechanisms",
    }
    names = {t.name for t in report.tables}
    for plot in report.plots:
        target = where.get(plot)
        table = report.table(target if target in names else "compute_match")
        table.plots.append(plot)


# ---------------------------------------------------------------- plots
# matplotlib's object API (Figure, no pyplot): Agg canvas, no global backend state, thread-safe.


def _arm_colors(sweep: _Sweep) -> dict[str, str]:
    return {arm: f"C{i % 10}" for i, arm in enumerate(sweep.arms)}


def _grid_of_axes(n_panels: int, n_cols: int, width: float, height: float):
    from matplotlib.figure import Figure

    n_rows = max(1, -(-n_panels // n_cols))
    fig = Figure(figsize=(width * n_cols, height * n_rows), layout="constrained")
    return fig, fig.subplots(n_rows, n_cols, squeeze=False)


def _band(ax, sweep: _Sweep, points: pd.DataFrame, arm: str, color: str, n_grid: int) -> bool:
    """Mean across the arm's seeds with the bootstrap band; points: run_id, x, value (one group)."""
    curves = [(p["x"].to_numpy(float), p["value"].to_numpy(float)) for _, p in points.groupby("run_id", sort=False)]
    if not curves:
        return False
    try:
        grid, mean, lo, hi = analysis.band_on_grid(curves, n_grid=n_grid, n_boot=1_000, seed=sweep.seed)
    except ValueError:
        return False
    ax.plot(grid, mean, color=color, lw=1.6, label=f"{arm} (n={len(curves)})")
    ax.fill_between(grid, lo, hi, color=color, alpha=0.18, lw=0)
    return True


def plot_reward_vs_compute(sweep: _Sweep, report: Report, path: Path) -> Path | None:
    """Training reward vs cumulative compute, mean and 95% bootstrap band across seeds, per group."""
    compute_key = COMPUTE_KEYS[report.compute]
    if not (sweep.has(report.metric) and sweep.has(compute_key)):
        return None
    points = analysis.on_compute_axis(sweep.by_key[report.metric], sweep.by_key[compute_key])
    points = points.rename(columns={"compute": "x"}).join(sweep.runs[["group", "arm"]], on="run_id")
    colors = _arm_colors(sweep)
    fig, axes = _grid_of_axes(len(sweep.groups), min(3, len(sweep.groups)), 5.4, 3.6)
    for ax, group in zip(axes.flat, sweep.groups):
        in_group = points[points["group"] == group]
        for arm in sweep.arms:
            _band(ax, sweep, in_group[in_group["arm"] == arm], arm, colors[arm], 120)
        if report.kappa is not None:
            ax.axhline(report.kappa, color="0.4", ls="--", lw=1, label=f"κ = {report.kappa:.3g}")
        ax.set(title=group or report.sweep, xlabel=COMPUTE_LABELS[report.compute], ylabel=report.metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(sweep.groups):]:
        ax.set_visible(False)
    fig.suptitle("Training reward vs compute (mean, 95% bootstrap band over seeds)", fontsize=10)
    fig.savefig(path, dpi=100)
    return path


MECHANISM_CURVES = ("mismatch/rho_std", ENTROPY_KEY, "dfpo/asym")


def plot_mechanisms_vs_step(sweep: _Sweep, report: Report, path: Path) -> Path | None:
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
                _band(ax, sweep, in_group[in_group["arm"] == arm], arm, colors[arm], n_steps)
            ax.set(title=f"{key}" + (f" — {group}" if group else ""), xlabel="step")
            ax.title.set_fontsize(9)
            ax.grid(alpha=0.3)
            if row == 0 and col == 0:
                ax.legend(fontsize=7)
    fig.savefig(path, dpi=100)
    return path


def plot_compute_at_reward(sweep: _Sweep, report: Report, path: Path) -> Path | None:
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
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=100)
    return path


def draw_plots(sweep: _Sweep, report: Report, plots_dir: Path) -> dict[str, Path]:
    plots_dir.mkdir(parents=True, exist_ok=True)
    drawn = {}
    for name, draw in (
        ("reward_vs_compute", plot_reward_vs_compute),
        ("compute_at_reward", plot_compute_at_reward),
        ("mechanisms_vs_step", plot_mechanisms_vs_step),
    ):
        path = draw(sweep, report, plots_dir / f"{name}.png")
        if path is not None:
            drawn[name] = path
    return drawn


# ---------------------------------------------------------------- outputs


def write_report(report: Report) -> None:
    """tables/<name>.csv and .json, report.md, report.html in report.out_dir."""
    from cancelctl.report_html import render_html

    tables_dir = report.out_dir / "tables"
    tables_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for table in report.tables:
        csv_path, json_path = tables_dir / f"{table.name}.csv", tables_dir / f"{table.name}.json"
        if table.data.columns.empty:  # a "not logged" section: no header to write
            csv_path.write_text("")
        else:
            table.data.to_csv(csv_path, index=False)
        rows = json.loads(table.data.to_json(orient="records")) if not table.data.empty else []
        payload = {"title": table.title, "notes": table.notes, "compute_matched": report.compute_matched, "rows": rows}
        json_path.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n")
        files += [csv_path, json_path]
    md_path, html_path = report.out_dir / "report.md", report.out_dir / "report.html"
    md_path.write_text(render_markdown(report))
    html_path.write_text(render_html(report))
    report.files = files + [md_path, html_path] + list(report.plots.values())


def header_lines(report: Report) -> list[str]:
    status = "yes"
    if not report.compute_matched:
        status = f"**{NOT_MATCHED}** ({len(report.violations)} violation(s), reported anyway)"
    return [
        f"baseline: {report.baseline}",
        f"training reward: {report.metric}; "
        f"compute axis: {COMPUTE_LABELS[report.compute]} ({COMPUTE_KEYS[report.compute]})",
        report.kappa_note,
        f"compute-matched: {status}",
        *report.notes,
    ]


def _md_cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(_md_cell(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def render_markdown(report: Report) -> str:
    lines = [f"# Sweep report: {report.sweep}", ""]
    lines += [f"- {line}" for line in header_lines(report)] + [""]
    for table in report.tables:
        if not table.shown:
            continue
        lines += [f"## {table.title}", ""]
        lines += [f"- {'**' + note + '**' if NOT_MATCHED in note else note}" for note in table.notes]
        if table.notes:
            lines.append("")
        if not table.display.empty:
            lines += [markdown_table(table.display), ""]
        for plot in table.plots:
            lines += [f"![{plot}](plots/{report.plots[plot].name})", ""]
    return "\n".join(lines)


def print_report(report: Report, console: Console) -> None:
    """The tables on a rich console, each with its notes under it."""
    from rich.table import Table

    console.rule(f"[bold]Sweep report: {report.sweep}")
    for line in header_lines(report):
        console.print(line.replace("**", ""), highlight=False, markup=False)
    for table in report.tables:
        if not table.shown:
            continue
        rich_table = Table(title=table.title, title_justify="left", show_lines=False)
        for column in table.display.columns:
            rich_table.add_column(str(column), overflow="fold")
        for row in table.display.itertuples(index=False):
            rich_table.add_row(*(str(v) for v in row))
        if not table.display.empty:
            console.print(rich_table)
        else:
            console.print(f"[bold]{table.title}[/]", highlight=False)
        for note in table.notes:
            style = "bold red" if NOT_MATCHED in note else "dim"
            console.print(note, style=style, highlight=False, markup=False)
    console.print(f"written: {report.out_dir}/report.md, report.html, tables/*.csv|json", highlight=False, markup=False)
