"""The compute-scaling table [ScaleRL, arXiv 2510.13786;
docs/statistics.md#compute-scaling-fit]: ScaleRL's curve fitted to
each run's training reward and eval benchmarks against the report's compute axis
(`cancelctl.stats.scaling.fit_compute_curve`), and per arm and group the asymptote A, efficiency B
and midpoint C_mid with 95% intervals over seeds (`scaling.curve_intervals`: Student's t on the
seeds' fits). Per run, each fit or the reason there is none, as CSV/JSON only."""

from __future__ import annotations

import pandas as pd

from cancelctl.report.formatting import CI_NOTE, fmt_interval, fmt_number
from cancelctl.report.prepared import PreparedSweep, ReportTable, eval_benchmarks
from cancelctl.stats import frames, scaling
from cancelctl.stats.frames import COMPUTE_KEYS, COMPUTE_LABELS

TITLE = "Compute scaling (ScaleRL fit: asymptote A, efficiency B, midpoint C_mid)"
PARAMETERS = ("asymptote", "efficiency", "midpoint")


def run_fits(sweep: PreparedSweep, key: str, compute: str) -> dict[str, scaling.ComputeCurve | str]:
    """run_id -> its fitted curve of `key` on the `compute` axis, or the reason there is none."""
    compute_key = COMPUTE_KEYS[compute]
    points = frames.on_compute_axis(sweep.by_key[key], sweep.by_key[compute_key])
    fits: dict[str, scaling.ComputeCurve | str] = {}
    for run_id, part in points.groupby("run_id", sort=False):
        try:
            fits[str(run_id)] = scaling.fit_compute_curve(part["compute"].to_numpy(), part["value"].to_numpy())
        except scaling.ComputeCurveError as exc:
            fits[str(run_id)] = exc.reason
    return fits


def compute_scaling_tables(sweep: PreparedSweep, metric: str, compute: str) -> list[ReportTable]:
    """Per group × metric (the training reward, then each eval benchmark) × arm: A, B, C_mid [95% CI]
    over the seeds whose fit could be made; and the per-run fits (shown=False)."""
    compute_key = COMPUTE_KEYS[compute]
    metrics = [(metric, "training reward")] if sweep.has(metric) else []
    metrics += eval_benchmarks(sweep.by_key)
    if not sweep.has(compute_key) or not metrics:
        missing = [k for k in (metric, compute_key) if not sweep.has(k)]
        return [ReportTable.not_logged("compute_scaling", TITLE, *missing)]
    run_rows = []
    for key, label in metrics:
        for run_id, fit in run_fits(sweep, key, compute).items():
            if run_id not in sweep.runs.index:
                continue
            meta = sweep.runs.loc[run_id]
            row = {"group": meta["group"], "metric": label, "key": key, "arm": meta["arm"], "seed": meta["seed"],
                   "run_id": run_id, "fitted": isinstance(fit, scaling.ComputeCurve)}
            if isinstance(fit, scaling.ComputeCurve):
                row.update(r0=fit.r0, asymptote=fit.asymptote, efficiency=fit.efficiency, midpoint=fit.midpoint,
                           n_points=fit.n_points, rmse=fit.rmse, reason="")
            else:
                row["reason"] = fit
            run_rows.append(row)
    run_data = pd.DataFrame(run_rows, columns=[
        "group", "metric", "key", "arm", "seed", "run_id", "fitted", "r0", "asymptote", "efficiency", "midpoint",
        "n_points", "rmse", "reason",
    ])
    run_data = run_data.sort_values(["group", "arm", "seed"], key=sweep.sort_key(), kind="stable")
    run_data = run_data.sort_values("key", key=lambda keys: keys.map({k: i for i, (k, _) in enumerate(metrics)}),
                                    kind="stable").reset_index(drop=True)
    data = _arm_rows(sweep, run_data, metrics)
    display = pd.DataFrame({
        "group": data["group"],
        "metric": data["metric"],
        "arm": data["arm"],
        "n": [str(f) if f == n else f"{f} of {n}" for f, n in zip(data["n_fitted"], data["n_seeds"])],
        "R0": [fmt_number(v, 3) for v in data["r0_mean"]],
        "A [95% CI]": _cells(data, "asymptote"),
        "B [95% CI]": _cells(data, "efficiency"),
        f"C_mid ({COMPUTE_LABELS[compute]}) [95% CI]": _cells(data, "midpoint"),
    })
    notes = [
        f"R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B) [ScaleRL, arXiv 2510.13786] fitted per run to the metric against "
        f"cumulative {COMPUTE_LABELS[compute]} ({compute_key}): R0 = the run's first value, points below "
        f"{scaling.EARLY_FRACTION:.0%} of the run's last compute left out (ScaleRL's noisy early regime), bounded least "
        "squares. A = asymptote, B = efficiency (steepness on log compute), C_mid = compute at half the rise.",
        f"{CI_NOTE}, over the seeds whose fit could be made (n); C_mid on log scale (geometric mean). Claims on A "
        "and B: metric.kind asymptote / efficiency.",
        *_failure_notes(run_data),
    ]
    title = f"{TITLE} — per run"
    return [
        ReportTable("compute_scaling", TITLE, data, sweep.readable(display), notes),
        ReportTable("compute_scaling_runs", title, run_data, pd.DataFrame(), [], shown=False),
    ]


def _arm_rows(sweep: PreparedSweep, run_data: pd.DataFrame, metrics: list[tuple[str, str]]) -> pd.DataFrame:
    """Per group × metric × arm: seeds, seeds fitted, mean R0, and each parameter's mean [CI]."""
    columns = ["group", "metric", "key", "arm", "n_seeds", "n_fitted", "r0_mean"]
    columns += [f"{p}_{part}" for p in PARAMETERS for part in ("mean", "ci_lo", "ci_hi")]
    rows = []
    for group in sweep.groups:
        for key, label in metrics:
            for arm in sweep.arms:
                part = run_data[(run_data["group"] == group) & (run_data["key"] == key) & (run_data["arm"] == arm)]
                if part.empty:
                    continue
                fitted = part[part["fitted"]].groupby("seed")[["r0", *PARAMETERS]].mean()  # a repeated seed: once
                row = {"group": group, "metric": label, "key": key, "arm": arm, "n_seeds": int(part["seed"].nunique()),
                       "n_fitted": len(fitted), "r0_mean": float(fitted["r0"].mean()) if len(fitted) else float("nan")}
                if len(fitted):
                    curves = [scaling.ComputeCurve(r.asymptote, r.efficiency, r.midpoint, r.r0) for r in fitted.itertuples()]
                    for name, interval in scaling.curve_intervals(curves).items():
                        if name in PARAMETERS:
                            row.update({f"{name}_mean": interval.mean, f"{name}_ci_lo": interval.lo,
                                        f"{name}_ci_hi": interval.hi})
                rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def _cells(data: pd.DataFrame, name: str) -> list[str]:
    return [
        "no fit" if n == 0 else fmt_interval(m, lo, hi, n)
        for m, lo, hi, n in zip(data[f"{name}_mean"], data[f"{name}_ci_lo"], data[f"{name}_ci_hi"], data["n_fitted"])
    ]


def _failure_notes(run_data: pd.DataFrame) -> list[str]:
    """One line per metric: the runs whose fit could not be made, those with the same reason together."""
    failed = run_data[~run_data["fitted"]]
    notes = []
    for label, in_metric in failed.groupby("metric", sort=False):
        runs_of_metric = int((run_data["metric"] == label).sum())
        if len(in_metric) == runs_of_metric and in_metric["reason"].nunique() == 1:
            notes.append(f"no fit of {label} in any of its {runs_of_metric} runs: {in_metric['reason'].iloc[0]}")
            continue
        parts = []
        for reason, part in in_metric.groupby("reason", sort=False):
            runs = ", ".join(f"{arm} s{seed}" + (f" [{group}]" if group else "")
                             for group, arm, seed in zip(part["group"], part["arm"], part["seed"]))
            parts.append(f"{runs} ({reason})")
        notes.append(f"no fit of {label}: " + "; ".join(parts))
    return notes
