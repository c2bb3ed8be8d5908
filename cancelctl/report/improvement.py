"""The comparisons rliable draws (Agarwal et al. 2021, arXiv 2108.13264), on each run's last evaluation:
per group × benchmark × arm the interquartile mean and the probability of improvement over the
baseline, each with its interval, and the performance profiles the report plots (runs pooled over
benchmarks). The numbers are `cancelctl.stats.iqm`, `.improvement` and `.profiles`; this module
selects the values and formats them. What each means: docs/claims.md "Comparisons as rliable draws them".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cancelctl.report.formatting import fmt_interval, fmt_number
from cancelctl.report.prepared import PreparedSweep, ReportTable, eval_benchmarks, in_unit_interval
from cancelctl.stats import frames
from cancelctl.stats.improvement import improvement_interval
from cancelctl.stats.iqm import MIN_IQM_RUNS, iqm_interval
from cancelctl.stats.profiles import N_BOOT, performance_profile

TITLE = "Probability of improvement and IQM (last evaluation)"
PROFILE_POINTS = 101  # thresholds per profile, spanning every score of the group
NOTES = [
    "P(arm > baseline): the chance a run of the arm ends with a higher score than a run of the baseline "
    "(ties count half), over every pair of their seeds' runs [rliable: Agarwal et al. 2021, §4.3]; 95% CI: "
    "Newcombe's score interval for the Mann–Whitney effect size (stays in [0, 1], has width when every run "
    "of one arm beats every run of the other, where rliable's bootstrap collapses to a point).",
    f"IQM: the mean of the middle 50% of the seeds' runs (⌊n/4⌋ trimmed from each end) [rliable §4.2], "
    f"shown from {MIN_IQM_RUNS} runs (fewer: nothing to trim, the IQM is the mean); 95% CI: Tukey–McLaughlin's "
    "trimmed-mean t interval (h − 1 degrees of freedom, h the runs kept: 1 at 4 runs, so wide), cut to [0, 1].",
]

PROFILE_NOTE = (
    "Performance profile (plot): the fraction of runs whose last evaluation is above τ, runs pooled over "
    "{benchmarks} [rliable §4.1]; band: 95% percentile bootstrap over runs (a run resampled with all its "
    "benchmarks), too narrow at few runs: simulated pointwise coverage 68–88% at 4 runs, 91–96% at 10. "
    "Numbers: tables/performance_profile.csv."
)


def final_values(sweep: PreparedSweep, key: str) -> pd.Series:
    """(group, arm, seed) -> the run's last logged value of `key`, repeated runs of a seed averaged
    (as the final-scores table)."""
    values = sweep.with_meta(frames.last_values(sweep.by_key[key]))
    return values.groupby(["group", "arm", "seed"])["value"].mean()


def improvement_table(sweep: PreparedSweep) -> ReportTable:
    """Per group × benchmark × arm: n, IQM [95% CI] and P(arm > baseline) [95% CI] of the last evaluation."""
    benchmarks = eval_benchmarks(sweep.by_key)
    if not benchmarks:
        return ReportTable.not_logged("improvement", TITLE, "val-core/<benchmark>/acc/mean_at_<k>")
    rows = []
    for key, label in benchmarks:
        per_seed = final_values(sweep, key)
        for group in sweep.groups:
            if group not in per_seed.index.get_level_values(0):
                continue
            in_group = per_seed.loc[group]
            arms = set(in_group.index.get_level_values(0))
            base = in_group.loc[sweep.baseline].to_numpy() if sweep.baseline in arms else None
            for arm in (a for a in sweep.arms if a in arms):
                seeds = in_group.loc[arm].to_numpy()
                row = {"group": group, "benchmark": label, "key": key, "arm": arm, "n_seeds": seeds.size,
                       "iqm": np.nan, "iqm_lo": np.nan, "iqm_hi": np.nan,
                       "p_improvement": np.nan, "p_improvement_lo": np.nan, "p_improvement_hi": np.nan,
                       "n_baseline": 0 if base is None else base.size}
                if seeds.size >= MIN_IQM_RUNS:
                    row["iqm"], row["iqm_lo"], row["iqm_hi"] = iqm_interval(seeds, unit_interval=in_unit_interval(key))
                if base is not None and arm != sweep.baseline:
                    row["p_improvement"], row["p_improvement_lo"], row["p_improvement_hi"] = improvement_interval(seeds, base)
                rows.append(row)
    data = pd.DataFrame(rows)
    display = pd.DataFrame({
        "group": data["group"],
        "benchmark": data["benchmark"],
        "arm": data["arm"],
        "n": data["n_seeds"].astype(str),
        "IQM [95% CI]": [_iqm_text(r) for r in data.itertuples()],
        f"P(arm > {sweep.baseline}) [95% CI]": [_improvement_text(r, sweep.baseline) for r in data.itertuples()],
    })
    notes = [*NOTES, PROFILE_NOTE.format(benchmarks=", ".join(label for _, label in benchmarks))]
    return ReportTable("improvement", TITLE, data, sweep.readable(display), notes)


def _iqm_text(row) -> str:
    if row.n_seeds < MIN_IQM_RUNS:
        return f"n/a: {row.n_seeds} run{'s' if row.n_seeds != 1 else ''} (< {MIN_IQM_RUNS}, nothing to trim)"
    return fmt_interval(row.iqm, row.iqm_lo, row.iqm_hi, row.n_seeds)


def _improvement_text(row, baseline: str) -> str:
    if row.arm == baseline:
        return "—"
    if row.n_baseline == 0:
        return f"n/a: no {baseline} runs here"
    if not np.isfinite(row.p_improvement_lo):
        return f"{fmt_number(row.p_improvement, 3)} [n/a: 1 run each]"
    return f"{row.p_improvement:.2f} [{row.p_improvement_lo:.2f}, {row.p_improvement_hi:.2f}]"


def profile_grid(values: np.ndarray) -> np.ndarray:
    """`PROFILE_POINTS` thresholds from a little below the group's lowest score to a little above its
    highest (5% of the range each side), so every profile starts at 1 and ends at 0."""
    lo, hi = float(values.min()), float(values.max())
    pad = 0.05 * (hi - lo) if hi > lo else 0.05 * max(abs(lo), 1.0)
    return np.linspace(lo - pad, hi + pad, PROFILE_POINTS)


def profile_table(sweep: PreparedSweep) -> ReportTable:
    """The performance profile of each arm per group (written as data, drawn as the `performance_profile`
    plot): the fraction of runs whose last evaluation exceeds τ on a grid of τ over the group's scores,
    runs pooled over benchmarks (each run counted once per benchmark), with its 95% bootstrap band."""
    title = "Performance profiles (last evaluation)"
    benchmarks = eval_benchmarks(sweep.by_key)
    if not benchmarks:
        return ReportTable.not_logged("performance_profile", title, "val-core/<benchmark>/acc/mean_at_<k>")
    # seed × benchmark per (group, arm); a seed missing a benchmark is left out of the profile
    wide = pd.concat({label: final_values(sweep, key) for key, label in benchmarks}, axis=1).dropna()
    rows = []
    for group in sweep.groups:
        if group not in wide.index.get_level_values(0):
            continue
        in_group = wide.loc[group]
        values = in_group.to_numpy()
        taus = profile_grid(values)
        for arm in (a for a in sweep.arms if a in set(in_group.index.get_level_values(0))):
            profile = performance_profile(in_group.loc[arm].to_numpy(), taus, n_boot=N_BOOT, seed=0)
            rows += [{"group": group, "arm": arm, "tau": t, "fraction": f, "lo": lo, "hi": hi,
                      "n_runs": profile.n_runs, "n_benchmarks": profile.n_benchmarks}
                     for t, f, lo, hi in zip(profile.taus, profile.fraction, profile.lo, profile.hi)]
    notes = [PROFILE_NOTE.format(benchmarks=", ".join(label for _, label in benchmarks))]
    return ReportTable("performance_profile", title, pd.DataFrame(rows), pd.DataFrame(), notes, shown=False)
