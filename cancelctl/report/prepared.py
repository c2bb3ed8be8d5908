"""The report's prepared data: what a report is (`Report`, `ReportTable`) and the collected sweep prepared
once for the tables and plots (`PreparedSweep`, built by `prepare_sweep` from the two frames of
`cancelctl.tracking.collect`). No statistics here (those are `cancelctl.stats`), no rendering."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from cancelctl.errors import SpecError
from cancelctl.stats import frames
from cancelctl.stats.compute_match import ComputeViolation


ENTROPY_KEY = "actor/entropy"
# verl's validation keys, '@' sanitised for MLflow: val-core/<benchmark>/acc/mean_at_<k>
EVAL_KEY = re.compile(r"^val-core/(?P<benchmark>.+)/acc/mean_at_(?P<k>\d+)$")
# pass@k where a backend logs it: the lab's pass_at_<k> (Chen et al.'s unbiased estimator) and verl's
# best@k / maj@k (a bootstrap over its n samples: best_at_<k>/mean, maj_at_<k>/mean; val-core at k = n,
# val-aux below)
PASS_KEY = re.compile(r"^val-(core|aux)/(?P<benchmark>.+)/acc/(?P<measure>pass|best|maj)_at_(?P<k>\d+)(/mean)?$")
# Keys whose values are known to lie in [0, 1] (accuracies: avg@k, pass@k, best@k, maj@k): their mean over
# seeds gets an interval that stays inside [0, 1] (`stats.intervals.unit_interval_ci`). The training
# reward is not among them: a reward function may score outside [0, 1].
UNIT_INTERVAL_KEYS = (EVAL_KEY, PASS_KEY)
ENERGY_KEY = re.compile(r"^cancel/energy_b(?P<bucket>\d+)$")
G_AXIS = "axis.rollout.G"
MATCHED_STATES = ("FINISHED",)
NOT_MATCHED = "NOT compute-matched"
CANNOT = "cannot build the report"


# the title of the report's refusal (`cancelctl.errors.UnmatchedArmsError`, exit 2)
UNMATCHED_LOGGED = "arms are not compute-matched in logged compute (pass --allow-unmatched to report anyway)"


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

    @classmethod
    def not_logged(cls, name: str, title: str, *keys: str) -> ReportTable:
        """A section with no numbers that says which metric keys were missing."""
        return cls(name, title, pd.DataFrame(), pd.DataFrame(), [f"not logged: {', '.join(keys)}"])


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
    still_running: list[str] = field(default_factory=list)  # runs not ended yet, left out (report_sweep)

    @property
    def compute_matched(self) -> bool:
        return not self.violations

    def table(self, name: str) -> ReportTable:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(f"no table {name!r}; tables: {', '.join(t.name for t in self.tables)}")


@dataclass
class PreparedSweep:
    """Selected runs indexed by run_id, metrics split by key, and the comparison order."""

    runs: pd.DataFrame
    by_key: dict[str, pd.DataFrame]
    baseline: str
    groups: list[str]
    arms: list[str]

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

    def readable(self, display: pd.DataFrame) -> pd.DataFrame:
        """Without a grid every group is "": drop the column from what people read."""
        if "group" in display.columns and self.groups == [""]:
            return display.drop(columns="group")
        return display

    def sort_key(self):
        """A `sort_values(key=...)` putting groups and arms in comparison order (baseline first)."""
        group_rank = {g: i for i, g in enumerate(self.groups)}
        arm_rank = {a: i for i, a in enumerate(self.arms)}

        def key(column: pd.Series) -> pd.Series:
            if column.name == "group":
                return column.map(group_rank)
            if column.name == "arm":
                return column.map(arm_rank)
            return column

        return key


def in_unit_interval(key: str) -> bool:
    """Whether `key` is a score known to lie in [0, 1] (`UNIT_INTERVAL_KEYS`)."""
    return any(pattern.match(key) for pattern in UNIT_INTERVAL_KEYS)


def eval_benchmarks(by_key: dict[str, pd.DataFrame]) -> list[tuple[str, str]]:
    """(metric key, label) of every logged eval benchmark, label "<benchmark> avg@k"."""
    found = []
    for key in sorted(by_key):
        match = EVAL_KEY.match(key)
        if match:
            found.append((int(match["k"]), match["benchmark"], key))
    return [(key, f"{bench} avg@{k}") for k, bench, key in sorted(found, key=lambda t: (t[1], t[0]))]


@dataclass(frozen=True)
class PassKey:
    key: str
    benchmark: str
    measure: str  # pass (unbiased), best (verl's bootstrap best-of-k), maj (verl's majority vote)
    k: int


def pass_at_k_keys(by_key: dict[str, pd.DataFrame]) -> list[PassKey]:
    """Every logged pass@k-like key, by benchmark, measure and k."""
    found = [PassKey(key, m["benchmark"], m["measure"], int(m["k"])) for key in by_key if (m := PASS_KEY.match(key))]
    order = {"pass": 0, "best": 1, "maj": 2}
    return sorted(found, key=lambda p: (p.benchmark, order[p.measure], p.k))


def prepare_sweep(
    runs: pd.DataFrame, metrics: pd.DataFrame, baseline: str, include_unfinished: bool
) -> tuple[PreparedSweep, list[str]]:
    """Select the runs to report (FINISHED unless `include_unfinished`), split the metrics once;
    returns the prepared sweep and the notes saying what was left out. Bad input: SpecError."""
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
                + " — pass --include-unfinished to use them."
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
    sweep = PreparedSweep(
        runs=selected,
        by_key=frames.split_by_key(wanted),
        baseline=baseline,
        groups=frames.group_order(selected),
        arms=[baseline] + [a for a in arms_present if a != baseline],
    )
    return sweep, notes
