"""Points and runs a report cannot trust, found before any statistic is computed.

- A point whose value is not finite (NaN, ±inf: a diverged step) or whose step lies outside the
  run's budget (below 0, above `budget_steps`; on a compute budget, after the run's end: the first
  step whose `compute/<axis>_cum` reaches the budget, where the run stopped) is rejected: never
  averaged, and named in the "Rejected points" table (run, key, reason, steps). So is a point after
  the step a monitor `stop` rule ended the run at (`stops`: verl trains a few steps on before the
  stop reaches it; nothing after the rule's step is the run's).
- A FINISHED run whose points end before its budget (its folder deleted mid-run: the points after
  that reached neither the store nor the folder) has not spent the compute its arm is compared at:
  it is named and left out of the tables, or, with `include_short` (--include-unfinished), kept and
  the report says so. A compute budget (`budget_axis` gen_tokens / update_steps) is reached when its
  last cumulative compute point (`compute/<axis>_cum`) is at least the budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cancelctl.errors import SpecError
from cancelctl.report.prepared import CANNOT, MATCHED_STATES, ReportTable
from cancelctl.stats.verdict_types import Stop

BUDGET_COLUMN = "budget_steps"  # collect's runs frame: the run's planned training steps (NA: unknown)
COMPUTE_BUDGET_KEYS = {"gen_tokens": "compute/gen_tokens_cum", "update_steps": "compute/update_steps_cum"}
STEPS_SHOWN = 6
NAMES_SHOWN = 12


class ShortRunsError(SpecError):
    """No report is left once the finished runs that end short are left out (exit 2): the error says
    which runs, so the cause is not hidden behind "no runs to report"."""

    def __init__(self, cause: SpecError, screened: Screened):
        super().__init__([*cause.issues, *screened.notes], title=f"{CANNOT} ({cause.title})")


@dataclass
class Screened:
    runs: pd.DataFrame
    metrics: pd.DataFrame  # the points that can be right
    rejected: pd.DataFrame  # one row per (run, key, reason): name, points, steps
    short: dict[str, str] = field(default_factory=dict)  # run id -> "<name> (last step 8 of 80)"
    notes: list[str] = field(default_factory=list)


def screen_points(
    runs: pd.DataFrame, metrics: pd.DataFrame, *, include_short: bool = False, stops: Mapping[str, Stop] | None = None
) -> Screened:
    """Reject the points that cannot be right and find the finished runs that end short.
    `stops`: run id -> the monitor rule and step that ended it (`cancelctl.report.alerts`): the run
    ends early on purpose (never called short), and its points after that step are rejected."""
    stops = stops or {}
    names = _names(runs)
    budget = _budgets(runs)
    value = metrics["value"].to_numpy(dtype=float)
    step = metrics["step"].to_numpy(dtype=np.int64)
    run_budget = metrics["run_id"].map(budget).to_numpy(dtype=float)  # NaN: budget unknown
    reasons = np.full(len(metrics), "", dtype=object)
    reasons[np.isposinf(value)] = "value +inf"
    reasons[np.isneginf(value)] = "value -inf"
    reasons[np.isnan(value)] = "value NaN"
    outside = (step < 0) | (step > run_budget)  # comparisons with NaN are False
    budget_text = pd.Series(run_budget).map(lambda b: f"{b:.0f}" if np.isfinite(b) else "?").to_numpy(dtype=object)
    step_reason = np.where(step < 0, "negative step", "step beyond the budget of " + budget_text + " steps")
    reasons = np.where(outside & (reasons == ""), step_reason, reasons)
    run_ids = metrics["run_id"].astype(str)
    ends = _compute_budget_ends(runs, metrics.loc[reasons == ""])
    run_end = run_ids.map({r: end for r, (end, _) in ends.items()}).to_numpy(dtype=float)
    end_reason = run_ids.map({r: text for r, (_, text) in ends.items()}).to_numpy(dtype=object)
    reasons = np.where((step > run_end) & (reasons == ""), end_reason, reasons)
    stop_step = run_ids.map({r: stop.step for r, stop in stops.items()}).to_numpy(dtype=float)
    stop_reason = run_ids.map({r: f"after the monitor stop at step {stop.step} ({stop.rule})"
                               for r, stop in stops.items()}).to_numpy(dtype=object)
    reasons = np.where((step > stop_step) & (reasons == ""), stop_reason, reasons)
    bad = reasons != ""
    kept = metrics.loc[~bad].reset_index(drop=True)
    rejected = _rejected_rows(metrics.loc[bad].assign(reason=reasons[bad]), names)
    notes = []
    if not rejected.empty:
        notes.append(
            f"{int(rejected['points'].sum())} point(s) rejected and not used (non-finite values, steps outside the "
            f"run's budget or after its monitor stop) in {rejected['run_id'].nunique()} run(s): see Rejected points"
        )
    exempt = {str(r) for r in stops}
    short = {**_short_runs(runs, kept, budget, names, exempt), **_short_of_compute(runs, kept, names, exempt)}
    kept_runs = runs
    if short:
        listed = ", ".join(list(short.values())[:NAMES_SHOWN]) + (" ..." if len(short) > NAMES_SHOWN else "")
        if include_short:
            notes.append(f"{len(short)} finished run(s) whose points end before their budget are included "
                         f"(--include-unfinished); their compute ends early: {listed}")
        else:
            notes.append(f"{len(short)} finished run(s) whose points end before their budget are left out of the "
                         f"tables (their later points are in neither the tracking store nor the run folder): "
                         f"{listed} — pass --include-unfinished to use them.")
            kept_runs = runs.loc[~runs["run_id"].astype(str).isin(list(short))]
            kept = kept.loc[~kept["run_id"].astype(str).isin(list(short))].reset_index(drop=True)
    return Screened(kept_runs, kept, rejected, short, notes)


def rejected_table(rejected: pd.DataFrame) -> ReportTable:
    """One row per run, key and reason of the rejected points."""
    display = pd.DataFrame({
        "run": rejected["name"].astype(str),
        "key": rejected["key"].astype(str),
        "reason": rejected["reason"].astype(str),
        "points": rejected["points"].astype(str),
        "steps": rejected["steps"].astype(str),
    })
    notes = [("Points that cannot be right are never averaged: non-finite values (a diverged step) and steps "
              "outside the run's budget (0 … budget.steps; on a compute budget, after the step that reached it) or after "
              "the step a monitor `stop` rule ended the run at.")]
    return ReportTable("rejected_points", "Rejected points", rejected.reset_index(drop=True), display, notes)


def _names(runs: pd.DataFrame) -> dict[str, str]:
    names = runs["name"] if "name" in runs.columns else runs["run_id"]
    return {str(r): str(n) if pd.notna(n) else str(r) for r, n in zip(runs["run_id"], names, strict=True)}


def _budgets(runs: pd.DataFrame) -> dict[str, float]:
    if BUDGET_COLUMN not in runs.columns:
        return {}
    numbers = pd.to_numeric(runs[BUDGET_COLUMN], errors="coerce").astype(float)
    return {str(r): float(b) for r, b in zip(runs["run_id"], numbers, strict=True) if np.isfinite(b)}


def _compute_budget_ends(runs: pd.DataFrame, metrics: pd.DataFrame) -> dict[str, tuple[int, str]]:
    """run id -> (its last step, the reason a later point is rejected) for the runs on a compute budget
    that reached it: a compute budget ends the run at the first step whose `compute/<axis>_cum`
    reaches the budget (cancelctl.spec.BudgetSpec), so nothing after that step is the run's."""
    if not {"budget_axis", "budget_amount"} <= set(runs.columns) or metrics.empty:
        return {}
    axis = runs["budget_axis"].where(runs["budget_axis"].isin(list(COMPUTE_BUDGET_KEYS)))
    budgets = pd.DataFrame({"run_id": runs["run_id"].astype(str), "axis": axis,
                            "amount": pd.to_numeric(runs["budget_amount"], errors="coerce")}).dropna()
    if budgets.empty:
        return {}
    budgets["key"] = budgets["axis"].map(COMPUTE_BUDGET_KEYS)
    points = metrics[metrics["key"].isin(list(COMPUTE_BUDGET_KEYS.values()))]
    points = points.assign(run_id=points["run_id"].astype(str)).merge(budgets, on=["run_id", "key"])
    reached = points[points["value"].to_numpy(dtype=float) >= points["amount"].to_numpy(dtype=float)]
    ends = {}
    for (run_id, axis, amount), part in reached.groupby(["run_id", "axis", "amount"], sort=False):
        end = int(part["step"].min())
        ends[run_id] = (end, f"step beyond the run's end ({axis} budget {amount:,.0f} reached at step {end})")
    return ends


def _rejected_rows(bad: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    columns = ["run_id", "name", "key", "reason", "points", "steps"]
    if bad.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (run_id, key, reason), part in bad.groupby(["run_id", "key", "reason"], sort=True):
        steps = sorted(int(s) for s in part["step"].unique())
        shown = ", ".join(map(str, steps[:STEPS_SHOWN])) + (" ..." if len(steps) > STEPS_SHOWN else "")
        rows.append({"run_id": run_id, "name": names.get(str(run_id), str(run_id)), "key": key, "reason": reason,
                     "points": len(part), "steps": shown})
    return pd.DataFrame(rows, columns=columns)


def _short_of_compute(runs: pd.DataFrame, kept: pd.DataFrame, names: dict[str, str], exempt: set[str]) -> dict[str, str]:
    """run id -> how it ends, for FINISHED runs whose last cumulative compute is below their compute budget."""
    if not {"state", "budget_axis", "budget_amount"} <= set(runs.columns):
        return {}
    short = {}
    for run_id, state, axis, amount in zip(runs["run_id"].astype(str), runs["state"], runs["budget_axis"],
                                           runs["budget_amount"], strict=True):
        key = COMPUTE_BUDGET_KEYS.get(axis) if isinstance(axis, str) else None
        if key is None or pd.isna(amount) or state not in MATCHED_STATES or run_id in exempt:
            continue
        points = kept[(kept["run_id"].astype(str) == run_id) & (kept["key"] == key)]
        spent = float(points.sort_values("step")["value"].iloc[-1]) if not points.empty else None
        if spent is None or spent < float(amount):
            where = f"no {key}" if spent is None else f"{key} {spent:,.0f} of {float(amount):,.0f}"
            short[run_id] = f"{names.get(run_id, run_id)} ({where})"
    return short


def _short_runs(
    runs: pd.DataFrame, kept: pd.DataFrame, budget: dict[str, float], names: dict[str, str], exempt: set[str]
) -> dict[str, str]:
    """run id -> how it ends, for FINISHED runs with a known budget whose last step is before it."""
    if "state" not in runs.columns or not budget:
        return {}
    last = kept.groupby("run_id")["step"].max() if not kept.empty else pd.Series(dtype="int64")
    short = {}
    for run_id, state in zip(runs["run_id"].astype(str), runs["state"], strict=True):
        if state not in MATCHED_STATES or run_id not in budget or run_id in exempt:
            continue
        end = last.get(run_id)
        if end is None or end < budget[run_id]:
            where = "no points" if end is None else f"last step {int(end)} of {budget[run_id]:.0f}"
            short[run_id] = f"{names.get(run_id, run_id)} ({where})"
    return short
