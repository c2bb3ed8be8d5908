"""The report's tables other than the threshold ones (those: `thresholds.py`): logged compute
matching [D §5], final scores [D Table 1], pass@k where logged [Chen et al. 2021], (via
`improvement.py`) rliable's IQM, probability of improvement and performance profiles, the held-out gain
over training, (via `scaling.py`) the compute-scaling fits [ScaleRL], Jitter2 [D eq. 20, 21], Δ per
group size [D Table 4] and the mechanism summary [D §6.1], and `build_tables`, which makes every
table in report order.

Each number is computed by the function of `cancelctl.stats` named after it (student_t_ci,
unit_interval_ci, paired_t_test, jitter2, slope, ratio_to_baseline); this module selects, groups and formats.

Length: one function per table, in the order the report shows them, sharing `arm_summary`; the tables
that stand on their own statistics live beside it (thresholds.py, improvement.py, scaling.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from cancelctl.report.formatting import (
    CI_NOTE,
    UNIT_CI_NOTE,
    fmt_delta,
    fmt_interval,
    fmt_number,
    fmt_p,
    fmt_ratio,
)
from cancelctl.report.improvement import improvement_table, profile_table
from cancelctl.report.prepared import (
    ENERGY_KEY,
    ENTROPY_KEY,
    G_AXIS,
    NOT_MATCHED,
    PreparedSweep,
    ReportTable,
    eval_benchmarks,
    in_unit_interval,
    pass_at_k_keys,
)
from cancelctl.report.scaling import compute_scaling_tables
from cancelctl.report.thresholds import (
    compute_at_reward_tables,
    steps_to_threshold_tables,
)
from cancelctl.stats import compute_match, crossing, curves, frames, hardware_match, intervals, paired
from cancelctl.stats.compute_match import ComputeViolation

SUMMARY_COLUMNS = ["n_seeds", "mean", "ci_lo", "ci_hi", "delta_vs_baseline", "p_value", "n_paired"]
P_NOTE = "p: two-sided paired t-test over seeds shared with the baseline."
PAIRED_NOTE = f"{CI_NOTE}; {P_NOTE}"
UNIT_PAIRED_NOTE = f"{UNIT_CI_NOTE}; {P_NOTE}"  # the tables of scores in [0, 1]


def build_tables(
    sweep: PreparedSweep,
    violations: list[ComputeViolation],
    *,
    metric: str,
    compute: str,
    kappa: float | None,
    smooth_window: int,
    token_tol: float,
) -> list[ReportTable]:
    """Every table of the report, in report order, each marked where groups are not compute-matched."""
    final_scores = final_score_table(sweep)
    tables = [compute_match_table(sweep, violations, token_tol), final_scores, *pass_at_k_tables(sweep)]
    tables += [improvement_table(sweep), profile_table(sweep)]
    tables += [eval_gain_table(sweep)]
    tables += compute_at_reward_tables(sweep, metric, compute, kappa, smooth_window)
    tables += steps_to_threshold_tables(sweep, metric, kappa, smooth_window)
    tables += compute_scaling_tables(sweep, metric, compute)
    tables += [
        jitter2_table(sweep, [metric, ENTROPY_KEY]),
        delta_per_g_table(sweep, final_scores),
        mechanism_table(sweep),
    ]
    mark_unmatched(tables, violations)
    return tables


def arm_summary(
    sweep: PreparedSweep, values: pd.DataFrame, compare: bool = True, unit_interval: bool = False
) -> pd.DataFrame:
    """Per (group, arm): n seeds, mean with Student's t CI over seeds (`unit_interval`: a score in
    [0, 1], Wilson's score interval, which stays inside) and, vs the baseline of the same group, the
    paired difference and its p-value over shared seeds. `values`: group, arm, seed, value; repeated
    runs of one seed are averaged first."""
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
            ci = intervals.unit_interval_ci if unit_interval else intervals.student_t_ci
            interval = ci(seeds.to_numpy())
            row = {"group": group, "arm": arm, "n_seeds": interval.n}
            row.update(mean=interval.mean, ci_lo=interval.lo, ci_hi=interval.hi)
            if compare:
                row.update(delta_vs_baseline=np.nan, p_value=np.nan, n_paired=0)
                if base is not None and arm != sweep.baseline:
                    shared = seeds.index.intersection(base.index)
                    if len(shared):
                        x, x_base = seeds.loc[shared].to_numpy(), base.loc[shared].to_numpy()
                        test = paired.paired_t_test(x, x_base)
                        row.update(delta_vs_baseline=test.delta, p_value=test.p, n_paired=test.n)
            rows.append(row)
    return pd.DataFrame(rows)




def _p_texts(sweep: PreparedSweep, data: pd.DataFrame) -> list[str]:
    return [
        "—" if arm == sweep.baseline else fmt_p(p, n)
        for arm, p, n in zip(data["arm"], data["p_value"], data["n_paired"])
    ]



def compute_match_table(sweep: PreparedSweep, violations: list[ComputeViolation], tol: float) -> ReportTable:
    """Logged compute per arm and group: the evidence for (or against) the compute-matched protocol."""
    totals = compute_match.compute_totals(sweep.runs.reset_index(drop=True), sweep.by_key)
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
    notes = [compute_match.protocol_note(compute_match.budget_axes(sweep.runs), tol)]
    for key in ("compute/gen_tokens_cum", "compute/update_steps_cum"):
        if not sweep.has(key) and not (key == "compute/gen_tokens_cum" and sweep.has("compute/gen_tokens")):
            notes.append(f"not logged: {key} — that part of the check was skipped")
    ran_on = hardware_match.hardware_note(sweep.runs)
    notes += [ran_on] if ran_on else []
    notes += [f"{NOT_MATCHED}: {v}" for v in violations]
    display = sweep.readable(pd.DataFrame(shown))
    return ReportTable("compute_match", "Compute matching (logged)", pd.DataFrame(rows), display, notes)


def _range_text(values: pd.Series) -> str:
    values = values.dropna()
    if values.empty:
        return "—"
    lo, hi = values.min(), values.max()
    return f"{lo:,.0f}" if lo == hi else f"{lo:,.0f}–{hi:,.0f}"


def final_score_table(sweep: PreparedSweep) -> ReportTable:
    """[D Table 1]: final eval per arm × benchmark, mean [95% CI] over seeds, Δ and paired p."""
    title = "Final scores (last evaluation)"
    benchmarks = eval_benchmarks(sweep.by_key)
    if not benchmarks:
        return ReportTable.not_logged("final_scores", title, "val-core/<benchmark>/acc/mean_at_<k>")
    data = last_evaluation_summary(sweep, [(key, {"benchmark": label}) for key, label in benchmarks])
    if data.empty:
        return ReportTable.not_logged("final_scores", title, *(key for key, _ in benchmarks))
    data = data[["group", "benchmark", "key", "arm", *SUMMARY_COLUMNS]]
    display = _benchmark_rows(sweep, data, "mean [95% CI]")
    return ReportTable("final_scores", title, data, sweep.readable(display), [UNIT_PAIRED_NOTE])


def last_evaluation_summary(sweep: PreparedSweep, keys: list[tuple[str, dict[str, object]]]) -> pd.DataFrame:
    """`arm_summary` of each key's last logged value per run, each key's rows with its `key` and the
    columns given beside it; empty when no key has a value. Scores in [0, 1] (`model.in_unit_interval`)
    get an interval inside [0, 1]."""
    parts = []
    for key, columns in keys:
        values = sweep.with_meta(frames.last_values(sweep.by_key[key]))
        summary = arm_summary(sweep, values, unit_interval=in_unit_interval(key))
        if not summary.empty:
            parts.append(summary.assign(key=key, **columns))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


PASS_MEASURES = {  # what each logged measure is, by its key's measure
    "pass": ("pass@{k}", "pass@k: Chen et al. 2021's unbiased estimator (arXiv 2107.03374, eq. 1) from the "
                         "evaluation's n samples per prompt, 1 − C(n−c, k)/C(n, k), averaged over prompts"),
    "best": ("best@{k}", "best@k: verl's bootstrap mean of the best of k of its n samples (drawn with "
                         "replacement, so below the unbiased pass@k for k > 1)"),
    "maj": ("maj@{k}", "maj@k: verl's bootstrap mean of majority voting over k of its n samples"),
}


def pass_at_k_tables(sweep: PreparedSweep) -> list[ReportTable]:
    """pass@k per group × benchmark × k × arm at the last evaluation, mean [95% CI] over seeds, Δ
    and paired p vs the baseline, as the final scores; no table where no backend logged pass@k."""
    keys = pass_at_k_keys(sweep.by_key)
    columns = [(p.key, {"benchmark": p.benchmark, "measure": p.measure, "k": p.k}) for p in keys]
    data = last_evaluation_summary(sweep, columns)
    if data.empty:
        return []
    data = data[["group", "benchmark", "measure", "k", "key", "arm", *SUMMARY_COLUMNS]]
    estimate = [PASS_MEASURES[m][0].format(k=k) for m, k in zip(data["measure"], data["k"])]
    display = _benchmark_rows(sweep, data, "mean [95% CI]", estimate=estimate)
    notes = [PASS_MEASURES[m][1] for m in PASS_MEASURES if m in set(data["measure"])] + [UNIT_PAIRED_NOTE]
    return [ReportTable("pass_at_k", "pass@k (last evaluation)", data, sweep.readable(display), notes)]


def _benchmark_rows(sweep: PreparedSweep, data: pd.DataFrame, interval: str, **before: list[str]) -> pd.DataFrame:
    """The shown rows of a per-arm × benchmark summary: `before` columns, then mean [CI], Δ and p."""
    return pd.DataFrame({
        "group": data["group"],
        "benchmark": data["benchmark"],
        "arm": data["arm"],
        "n": data["n_seeds"].astype(str),
        **before,
        interval: [fmt_interval(r.mean, r.ci_lo, r.ci_hi, r.n_seeds) for r in data.itertuples()],
        f"Δ vs {sweep.baseline}": [fmt_delta(d) for d in data["delta_vs_baseline"]],
        "p (paired)": _p_texts(sweep, data),
    })


def eval_gain_table(sweep: PreparedSweep) -> ReportTable:
    """Did training move the held-out score at all: per run, last − first evaluation (the first is
    the step-0 one when `eval.every` logs it), mean [95% CI] over seeds per arm, Δ and paired p."""
    title = "Held-out gain (last − first evaluation)"
    benchmarks = eval_benchmarks(sweep.by_key)
    if not benchmarks:
        return ReportTable.not_logged("eval_gain", title, "val-core/<benchmark>/acc/mean_at_<k>")
    parts = []
    for key, label in benchmarks:
        points = sweep.by_key[key].sort_values(["run_id", "step"], kind="stable").groupby("run_id")["value"]
        first = sweep.with_meta(points.first()).groupby(["group", "arm"])["value"].mean()
        last = sweep.with_meta(points.last()).groupby(["group", "arm"])["value"].mean()
        # one point at each end: last − first (a run evaluated once has no gain and is left out)
        gain = sweep.per_run(key, lambda part: curves.late_minus_early(part["value"].to_numpy(), 1 / len(part)))
        summary = arm_summary(sweep, sweep.with_meta(gain))
        if not summary.empty:
            cells = list(zip(summary["group"], summary["arm"]))
            summary["first_mean"], summary["last_mean"] = [first.get(c) for c in cells], [last.get(c) for c in cells]
            parts.append(summary.assign(benchmark=label, key=key))
    if not parts:
        return ReportTable.not_logged("eval_gain", title, *(f"{key} (≥ 2 evaluations)" for key, _ in benchmarks))
    data = pd.concat(parts, ignore_index=True)
    data = data[["group", "benchmark", "key", "arm", "first_mean", "last_mean", *SUMMARY_COLUMNS]]
    ends = [f"{fmt_number(a)} → {fmt_number(b)}" for a, b in zip(data["first_mean"], data["last_mean"])]
    display = _benchmark_rows(sweep, data, "gain [95% CI]", **{"first → last (mean)": ends})
    notes = [
        "gain: each run's last minus its first held-out evaluation; a CI above 0 means training raised the score.",
        PAIRED_NOTE,
    ]
    return ReportTable("eval_gain", title, data, sweep.readable(display), notes)


def jitter2_table(sweep: PreparedSweep, keys: list[str]) -> ReportTable:
    """[D eq. 20, 21]: Jitter2 of each run's curve (per step), mean [CI] per arm, ratio to baseline."""
    title = "Jitter2 (second-difference jitter, lower = smoother)"
    logged = [k for k in keys if sweep.has(k)]
    if not logged:
        return ReportTable.not_logged("jitter2", title, *keys)
    parts = []
    for key in logged:
        per_run = sweep.per_run(key, lambda part: curves.jitter2(part["value"].to_numpy()))
        summary = arm_summary(sweep, sweep.with_meta(per_run), compare=True)
        if not summary.empty:
            parts.append(summary.assign(metric=key))
    if not parts:
        return ReportTable.not_logged("jitter2", title, *(f"{k} (≥ 3 steps)" for k in keys))
    data = pd.concat(parts, ignore_index=True)
    base = data[data["arm"] == sweep.baseline].set_index(["metric", "group"])["mean"]
    data["ratio_vs_baseline"] = [
        crossing.ratio_to_baseline(m, base.get((k, g))) for k, g, m in zip(data["metric"], data["group"], data["mean"])
    ]
    data = data[["group", "metric", "arm", "ratio_vs_baseline", *SUMMARY_COLUMNS]]
    display = pd.DataFrame({
        "group": data["group"], "metric": data["metric"], "arm": data["arm"], "n": data["n_seeds"].astype(str),
        "Jitter2 [95% CI]": [fmt_interval(r.mean, r.ci_lo, r.ci_hi, r.n_seeds) for r in data.itertuples()],
        f"vs {sweep.baseline}": [fmt_ratio(r) if np.isfinite(r) else "—" for r in data["ratio_vs_baseline"]],
        "p (paired)": _p_texts(sweep, data),
    })
    notes = [PAIRED_NOTE]
    notes += [f"not logged: {k}" for k in keys if k not in logged]
    return ReportTable("jitter2", title, data, sweep.readable(display), notes)


def delta_per_g_table(sweep: PreparedSweep, final_scores: ReportTable) -> ReportTable:
    """[D Table 4]: Δ(arm − baseline) of the final score per group size G, when G is a sweep axis."""
    title = f"Δ vs {sweep.baseline} per group size G"
    g_values = sweep.runs[G_AXIS].dropna().unique() if G_AXIS in sweep.runs.columns else []
    if len(g_values) < 2:
        note = "G is not a sweep axis (rollout.G): no table"
        return ReportTable("delta_per_G", title, pd.DataFrame(), pd.DataFrame(), [note])
    if final_scores.data.empty:
        return ReportTable.not_logged("delta_per_G", title, "val-core/<benchmark>/acc/mean_at_<k>")
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
    everywhere: bool = True  # False: a backend-specific key, not named as missing where it is absent


def _mean_over_steps(part: pd.DataFrame) -> float:
    return float(part["value"].mean())


def _slope_per_step(part: pd.DataFrame) -> float:
    return curves.slope(part["step"].to_numpy(float), part["value"].to_numpy())


def mechanisms(by_key: dict[str, pd.DataFrame]) -> list[Mechanism]:
    """What the mechanism summary reports; the highest-frequency energy bucket is found from the keys."""
    buckets = sorted(int(m["bucket"]) for m in map(ENERGY_KEY.match, by_key) if m)
    energy_key = f"cancel/energy_b{buckets[-1]}" if buckets else "cancel/energy_b{K-1}"
    return [
        Mechanism("asym (mean)", "dfpo/asym", _mean_over_steps, "[D eq. 23]"),
        Mechanism("weight dispersion (mean)", "dfpo/weight_dispersion", _mean_over_steps, "[D eq. 23], docs/metrics.md"),
        Mechanism("ρ std growth (slope/step)", "mismatch/rho_std", _slope_per_step, "[H §2]"),
        Mechanism("J (mean)", "hacking/J", _mean_over_steps, "[H eq. 23]"),
        Mechanism("high-freq energy share (mean)", energy_key, _mean_over_steps, "[D eq. 24], last bucket"),
        Mechanism("flip rate Â>0 (mean)", "cancel/flip_pos", _mean_over_steps, "[C App. C]"),
        Mechanism("flip rate Â<0 (mean)", "cancel/flip_neg", _mean_over_steps, "[C App. C]"),
        # the lab knows its template tokens by construction; verl's responses carry no roles
        Mechanism("template share of boost (mean)", "cancel/boost_template", _mean_over_steps, "[C §3.2], lab",
                  everywhere=False),
    ]


def mechanism_table(sweep: PreparedSweep) -> ReportTable:
    """[D §6.1]: per arm the mechanism metrics, each a per-run reduction then mean [CI] over seeds."""
    title = "Mechanism summary"
    parts, logged, missing = [], [], []
    for mech in mechanisms(sweep.by_key):
        if not sweep.has(mech.key):
            missing += [mech.key] if mech.everywhere else []
            continue
        summary = arm_summary(sweep, sweep.with_meta(sweep.per_run(mech.key, mech.reduce)), compare=False)
        if summary.empty:
            missing.append(mech.key)
            continue
        logged.append(mech)
        parts.append(summary.assign(quantity=mech.label, key=mech.key))
    if not parts:
        return ReportTable.not_logged("mechanisms", title, *missing)
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
    notes = [", ".join(f"{m.label} = {m.key} {m.source}" for m in logged) + "; mean [95% CI] over seeds.", CI_NOTE]
    notes += [f"not logged: {key}" for key in missing]
    return ReportTable("mechanisms", title, data, sweep.readable(pd.DataFrame(display_rows)), notes)


def mark_unmatched(tables: list[ReportTable], violations: list[ComputeViolation]) -> None:
    """Every table says which groups are not compute-matched (and so does every CSV/JSON row)."""
    bad = sorted({v.group for v in violations})
    for table in tables:
        if "group" in table.data.columns:
            table.data["compute_matched"] = ~table.data["group"].isin(bad)
        if bad and table.name != "compute_match":
            where = ", ".join(repr(g) for g in bad) if bad != [""] else "the sweep"
            table.notes.insert(0, f"⚠ {NOT_MATCHED}: {where} (reported with --allow-unmatched; see Compute matching)")


