"""The compute-matched protocol on what the runs logged [D §5,
docs/statistics.md#compute-matched-protocol]: arms of one comparison
group must match on G, and on the compute their budget axis fixes: update steps exactly and generated
tokens within a tolerance for a step budget, tokens alone for a token budget, update steps alone for
an update-step budget (`MATCHED_ON`)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from cancelctl.spec.experiment import MATCHED_ON
from cancelctl.stats.frames import last_values, split_by_key

TOKEN_TOL = 0.10  # arms' generated tokens may differ by this share of the largest (`check_compute_matched`)
BUDGET_AXIS = "budget_axis"  # collect's runs frame: steps | gen_tokens | update_steps (NA, or no column: steps)


@dataclass(frozen=True)
class ComputeViolation:
    """Arms of one comparison group that differ in logged compute [D §5 compute-matched protocol]."""

    group: str
    field: str  # "gen_tokens_total" | "update_steps" | "G" | "budget_axis"
    values: dict[str, str]  # arm -> its number(s), as shown
    detail: str

    def __str__(self) -> str:
        where = f"group {self.group!r}" if self.group else "sweep"
        numbers = ", ".join(f"{arm}={value}" for arm, value in self.values.items())
        return f"{where}: {self.field} {self.detail}: {numbers}"


def compute_totals(runs: pd.DataFrame, metrics: pd.DataFrame | dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per run: total generated tokens, update steps and G, from logged compute (NaN if not logged).

    Tokens are the last `compute/gen_tokens_cum`, else the sum of per-step `compute/gen_tokens`.
    """
    by_key = metrics if isinstance(metrics, dict) else split_by_key(metrics)
    out = runs[["run_id", "arm", "group", "seed", "G"]].copy().set_index("run_id")
    if "compute/gen_tokens_cum" in by_key:
        tokens = last_values(by_key["compute/gen_tokens_cum"])
    elif "compute/gen_tokens" in by_key:
        tokens = by_key["compute/gen_tokens"].groupby("run_id")["value"].sum()
    else:
        tokens = pd.Series(dtype=float)
    out["gen_tokens_total"] = tokens.reindex(out.index).astype(float)
    updates = pd.Series(dtype=float)
    if "compute/update_steps_cum" in by_key:
        updates = last_values(by_key["compute/update_steps_cum"])
    out["update_steps"] = updates.reindex(out.index).astype(float)
    return out.reset_index()


def _span(values: pd.Series, fmt) -> str:
    lo, hi = values.min(), values.max()
    return fmt(lo) if lo == hi else f"{fmt(lo)}–{fmt(hi)}"


def check_compute_matched(
    runs: pd.DataFrame,
    metrics: pd.DataFrame | dict[str, pd.DataFrame],
    tol: float = TOKEN_TOL,
) -> list[ComputeViolation]:
    """Within each comparison group, do the arms match on logged compute? [D §5,
    docs/statistics.md#compute-matched-protocol]

    - G must be identical across every run of the group;
    - what else follows the runs' budget axis (`budget_axis`; unknown: a step budget), one for the group:
      * steps: update steps identical (set by the spec; a difference means a different config or a
        run that stopped early) and tokens within `tol`;
      * gen_tokens: tokens within `tol`. Each run ends at the first step whose tokens reach the
        budget, so it overshoots by less than that step's tokens, and arms differ by less than one
        step's tokens of the larger; update steps differ by design (an arm whose batching discards
        rollouts does fewer updates for the same tokens) and are not compared;
      * update_steps: update steps identical; tokens are what each arm generates for them, not compared;
      * arms on different axes: a violation of their own (`budget_axis`), and every rule above applies.
    - tokens: the arms' mean totals may differ by at most `tol` relative to the largest. Decision: a
      tolerance rather than equality, because with a step budget the token count follows each arm's
      response lengths; [D] matches tokens, so the spread is reported.
    Fields that were not logged are not checked (see `compute_totals` for the raw numbers).
    """
    totals = compute_totals(runs, metrics)
    axes = runs.set_index("run_id")[BUDGET_AXIS] if BUDGET_AXIS in runs.columns else pd.Series(dtype=object)
    totals[BUDGET_AXIS] = totals["run_id"].map(axes).astype(object).fillna("steps")
    violations: list[ComputeViolation] = []
    for group, part in totals.groupby("group", sort=True):
        if part["arm"].nunique() < 2:
            continue
        matched_on = set(MATCHED_ON.get(part[BUDGET_AXIS].iloc[0], MATCHED_ON["steps"]))
        if part[BUDGET_AXIS].nunique() > 1:
            values = {arm: ", ".join(sorted(p[BUDGET_AXIS].unique())) for arm, p in part.groupby("arm", sort=True)}
            violations.append(ComputeViolation(str(group), "budget_axis", values, "differ across runs"))
            matched_on = set(MATCHED_ON["steps"])
        fields = ["update_steps"] if "update_steps" in matched_on else []
        for field, fmt in ((f, lambda v: f"{v:,.0f}") for f in (*fields, "G")):
            known = part.dropna(subset=[field])
            if known[field].nunique() > 1:
                values = {arm: _span(p[field], fmt) for arm, p in known.groupby("arm", sort=True)}
                violations.append(ComputeViolation(str(group), field, values, "differ across runs"))
        if "gen_tokens" not in matched_on:
            continue
        known = part.dropna(subset=["gen_tokens_total"])
        arm_means = known.groupby("arm", sort=True)["gen_tokens_total"].mean()
        if len(arm_means) > 1 and arm_means.max() > 0:
            spread = float((arm_means.max() - arm_means.min()) / arm_means.max())
            if spread > tol:
                values = {arm: f"{v:,.0f}" for arm, v in arm_means.items()}
                detail = f"(arm mean over seeds) differ by {spread:.1%} > tol {tol:.1%}"
                violations.append(ComputeViolation(str(group), "gen_tokens_total", values, detail))
    return violations


def budget_axes(runs: pd.DataFrame) -> set[str]:
    """The budget axes of these runs (unknown: steps)."""
    if BUDGET_AXIS not in runs.columns:
        return {"steps"}
    return set(runs[BUDGET_AXIS].astype(object).fillna("steps").astype(str))


def protocol_note(axes: set[str], tol: float) -> str:
    """What the arms were required to match on, for runs on these budget axes."""
    if axes == {"gen_tokens"}:
        return (f"Compute-matched protocol [D §5] on a generated-token budget: within a group, arms must match on G "
                f"exactly and on total generated tokens within {tol:.0%} (arm means over seeds); each run ends at the "
                f"first step reaching the budget (overshoot below that step's tokens), so update steps are what each "
                f"arm does with the tokens and are not compared.")
    if axes == {"update_steps"}:
        return ("Compute-matched protocol [D §5] on an update-step budget: within a group, arms must match on update "
                "steps and G exactly; generated tokens are what each arm spends on them and are not compared.")
    return (f"Compute-matched protocol [D §5]: within a group, arms must match on update steps and G exactly and on "
            f"total generated tokens within {tol:.0%} (arm means over seeds).")
