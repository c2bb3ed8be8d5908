"""A claim's number per run: the statistic of its metric kind (`reducer`: final, steps / compute to κ,
Jitter2, slope, late − early, mean, a compute-scaling fit's parameter) on each run's curve, keyed by
seed (`per_run`), and what a claim does with the runs a monitor rule stopped (`stopped_note`).
Frames in, numbers out; the verdicts built on them are `verdict_rules`."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pandas as pd

from cancelctl.spec.claim_metric import (
    NEEDS_WHOLE_RUN,
    ComputeToKappaMetric,
    CurveMetric,
    LateMinusEarlyMetric,
    ScalingMetric,
    StepsToKappaMetric,
)
from cancelctl.stats.crossing import compute_at_reward, steps_to_threshold
from cancelctl.stats.curves import jitter2, late_minus_early, slope
from cancelctl.stats.frames import COMPUTE_KEYS, on_compute_axis
from cancelctl.stats.scaling import ComputeCurveError, fit_compute_curve
from cancelctl.stats.verdict_types import Stop


def stopped_note(metric: CurveMetric, arm: str, arm_runs: pd.DataFrame, stops: Mapping[str, Stop]) -> tuple[str, int]:
    """What the claim did with the arm's runs a monitor rule stopped, and how many it had to leave out."""
    hit = [(seed, stops[str(r)]) for r, seed in zip(arm_runs["run_id"], arm_runs["seed"]) if str(r) in stops]
    if not hit:
        return "", 0
    which = ", ".join(f"seed {seed} ({stop.rule} at step {stop.step})" for seed, stop in sorted(hit, key=lambda h: h[0]))
    if metric.kind in NEEDS_WHOLE_RUN:
        return (f"{len(hit)} of {len(arm_runs)} run(s) of {arm!r} stopped by a monitor rule have no {metric.kind} "
                f"value (stopped before the end of the budget): {which} — left out here; their stop is an outcome "
                "for the collapse claims", len(hit))
    return f"{len(hit)} of {len(arm_runs)} run(s) of {arm!r} stopped by a monitor rule, used up to the stop: {which}", 0


def per_run(
    metric: CurveMetric, key: str, arm_runs: pd.DataFrame, by_key: dict[str, pd.DataFrame], kappa: float | None,
    stops: Mapping[str, Stop] | None = None,
) -> tuple[pd.Series, str, list[str]]:
    """seed -> value for the arm's runs (a seed may repeat), or the reason there is none; and the
    runs a monitor rule stopped too early for a value (no or too few points before the stop), left
    out rather than failing the claim."""
    stops = stops or {}
    none = pd.Series(dtype=float)
    points = by_key[key]
    points = points[points["run_id"].isin(arm_runs["run_id"])]
    if points.empty:
        return none, f"not logged for arm {arm_runs['arm'].iloc[0]!r}: {key}", []
    threshold = None
    if isinstance(metric, StepsToKappaMetric):  # compute_to_kappa too
        threshold = metric.kappa if metric.kappa is not None else kappa
        if threshold is None:
            return none, "no κ: give metric.kappa in the claim or the report's --kappa", []
    if isinstance(metric, (ComputeToKappaMetric, ScalingMetric)):
        compute_key = COMPUTE_KEYS[metric.compute]
        if compute_key not in by_key:
            return none, f"not logged: {compute_key}", []
        points = on_compute_axis(points, by_key[compute_key])
    reduce = reducer(metric, threshold)
    seeds = dict(zip(arm_runs["run_id"], arm_runs["seed"]))
    values, too_short, not_reached, no_fit = {}, [], [], {}
    for run_id, part in points.groupby("run_id", sort=False):
        try:
            value = reduce(part)
        except ComputeCurveError as exc:
            no_fit[run_id] = exc.reason
            continue
        except ValueError:
            too_short.append(run_id)
            continue
        if value is None:
            not_reached.append(run_id)
            continue
        values[run_id] = value

    def names(run_ids: list[str]) -> str:
        stopped_at = {r: f" (stopped at step {stops[str(r)].step})" for r in run_ids if str(r) in stops}
        return ", ".join(f"seed {seeds[r]}{stopped_at.get(r, '')}" for r in sorted(run_ids, key=lambda r: seeds[r]))

    logged = set(points["run_id"])
    cut_short = [r for r in seeds if str(r) in stops and (r in too_short or r in no_fit or r not in logged)]
    too_short = [r for r in too_short if r not in cut_short]
    no_fit = {r: why for r, why in no_fit.items() if r not in cut_short}
    if not_reached:  # censored: the paired difference is unknown, never a number
        arm = arm_runs["arm"].iloc[0]
        return none, f"arm {arm!r}: {names(not_reached)} never reached κ = {threshold:.4g}", cut_short
    if too_short:
        return none, f"arm {arm_runs['arm'].iloc[0]!r}: too few points of {key} ({names(too_short)})", cut_short
    if no_fit:
        arm = arm_runs["arm"].iloc[0]
        why = "; ".join(f"{names([r])}: {reason}" for r, reason in sorted(no_fit.items(), key=lambda item: seeds[item[0]]))
        return none, f"arm {arm!r}: no compute-scaling fit of {key} on {getattr(metric, 'compute', '')} ({why})", cut_short
    return pd.Series(list(values.values()), index=[seeds[r] for r in values], dtype=float), "", cut_short


def reducer(metric: CurveMetric, kappa: float | None) -> Callable[[pd.DataFrame], float | None]:
    """The per-run statistic of a claim's metric; a part is one run's points sorted by step."""
    kind = metric.kind
    if kind == "final":
        return lambda part: float(part["value"].iloc[-1])
    if isinstance(metric, ComputeToKappaMetric):
        return lambda part: compute_at_reward(part["compute"], part["value"], kappa, metric.smooth_window)
    if isinstance(metric, StepsToKappaMetric):
        return lambda part: steps_to_threshold(part["step"], part["value"], kappa, metric.smooth_window)
    if isinstance(metric, LateMinusEarlyMetric):
        return lambda part: late_minus_early(part["value"].to_numpy(), metric.window)
    if isinstance(metric, ScalingMetric):
        return lambda part: getattr(fit_compute_curve(part["compute"], part["value"]), kind)
    if kind == "jitter2":
        return lambda part: jitter2(part["value"].to_numpy())
    if kind == "slope":
        return lambda part: slope(part["step"].to_numpy(float), part["value"].to_numpy())
    if kind == "mean":
        return lambda part: float(part["value"].mean())
    raise ValueError(f"unknown metric kind {kind!r}")
