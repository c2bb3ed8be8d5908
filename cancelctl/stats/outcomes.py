"""Outcome claims judged from the monitor's alerts (`cancelctl.spec.claims.OUTCOME_KINDS`): a run a
rule stopped is evidence — its collapse is the outcome — never a missing value.

Per run, from its alerts (run_id, rule, step, action), the stop that ended it (if a rule did) and
its last logged step:
- collapse: the first alert of any of the claim's rules (`event: alert`, warn or stop alike), or the
  stop by one of them (`event: stop`), at that step;
- otherwise censored: at the stop, when another rule stopped the run first (what it would have
  done next is unknown), else at its last logged step (a finished run: its budget).

- collapse_rate: collapsed runs of arm vs versus, the exact unconditional score test and the
  interval that inverts it (`rates.compare_rates`). A run another rule stopped before any collapse is left out of the rate,
  counted in the verdict's note.
- time_to_collapse: steps to the collapse, censored runs as such; the log-rank test (exact
  permutation at few runs) and the restricted-mean difference in steps (`survival.compare_times`).
- alert_order: among the runs of `arm` (one arm or several pooled) that collapsed, the share in
  which `first` alerted strictly before the collapse; a collapse with no `first` alert before it
  counts against, a tie (same step) is left out as the sign test leaves ties out; the exact
  binomial test against 1/2 with the Clopper–Pearson interval (`rates.share_test`). Fewer than
  MIN_ORDER_RUNS collapsing runs cannot reach α = 5% whatever their order (claim p 2/2⁵ > 0.05): not judged.
  A `first` rule that alerts early in every run passes this test without predicting anything:
  read it beside that rule's own collapse rate.
Every p here is a claim p (`evidence.doubled`: each one-sided test at α/2, one tail of the 95%
interval shown beside it). A rate's interval inverts its test and Clopper–Pearson's the sign test:
the interval excludes the boundary exactly when the test rejects. A time's interval (the
restricted-mean difference) is not the log-rank's inversion: the log-rank decides, and
`verdicts.agreeing` holds a decision to that interval (an inconclusive row's interval may still
exclude 0; the table's note says the test decides).
Frames in, `Verdict`s out (the Holm adjustment is `verdicts`'); nothing here reads the run folders.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

import pandas as pd

from cancelctl.spec.claims import ClaimSpec, rules_off_reason
from cancelctl.spec.directions import sign
from cancelctl.spec.monitor import MonitorSpec
from cancelctl.stats.evidence import doubled
from cancelctl.stats.rates import compare_rates, runs_for_rate_difference, runs_for_share, share_test
from cancelctl.stats.survival import compare_times, runs_for_logrank
from cancelctl.stats.verdict_types import Judging, Stop, Verdict

MIN_ORDER_RUNS = 6  # collapsing runs: the sign test's smallest claim p with n runs is 2/2ⁿ
ALERT_COLUMNS = ["run_id", "rule", "step", "action"]


@dataclass(frozen=True)
class Outcome:
    """One run's course for a claim: collapsed at `step`, or censored there."""

    run_id: str
    seed: object
    collapsed: bool
    step: float
    cut_by: str = ""  # censored by a stop of another rule (its name), else ""


def run_outcomes(
    runs: pd.DataFrame, rules: list[str], event: str, alerts: pd.DataFrame,
    stops: Mapping[str, Stop], ends: Mapping[str, float],
) -> list[Outcome]:
    """Each run's collapse (first alert / stop of `rules`) or censoring step."""
    firsts = first_alerts(alerts, rules)
    out = []
    for run_id, seed in zip(runs["run_id"].astype(str), runs["seed"]):
        stop = stops.get(run_id)
        if event == "stop":
            hit = float(stop.step) if stop is not None and stop.rule in rules else None
        else:
            hit = firsts.get(run_id)
        if hit is not None:
            out.append(Outcome(run_id, seed, True, hit))
        elif stop is not None:
            out.append(Outcome(run_id, seed, False, float(stop.step), stop.rule))
        else:
            out.append(Outcome(run_id, seed, False, float(ends.get(run_id, math.nan))))
    return out


def first_alerts(alerts: pd.DataFrame, rules: list[str]) -> dict[str, float]:
    """run id -> step of its first alert of any of `rules`."""
    hits = alerts[alerts["rule"].astype(str).isin(rules)]
    return {str(r): float(s) for r, s in hits.groupby(hits["run_id"].astype(str))["step"].min().items()}


def planned_seeds(kind: str, v, level: float, power: float) -> int | None:
    """Seeds (runs per arm) for `power` at level `level` at the observed effect of an outcome verdict."""
    if kind == "collapse_rate":
        return runs_for_rate_difference(v.arm_mean, v.versus_mean, alpha=level, power=power)
    if kind == "time_to_collapse":
        return runs_for_logrank(v.log_hazard_ratio, v.event_fraction, alpha=level, power=power)
    if kind == "alert_order":  # collapsing runs needed, over the collapsing runs per seed of the pooled arms
        needed = runs_for_share(v.effect, alpha=level, power=power)
        if needed is None or not v.event_fraction > 0:
            return None
        return math.ceil(needed / v.event_fraction / len(v.arm.split(", ")))
    raise ValueError(f"not an outcome kind: {kind!r}")


def judge_outcome(claim: ClaimSpec, in_group: pd.DataFrame, base: Verdict, judging: Judging) -> Verdict:
    """One outcome claim on the runs of one comparison group: `base` (a cannot-judge Verdict naming
    the claim and group) filled in with the evidence, status "inconclusive" until Holm decides, or the
    reason it cannot. From `judging`: the alerts, stops and last steps; the metric keys the sweep
    logged (a rule whose metric nobody logged could not fire); the rules off per arm
    (`spec.claims.rules_off_by_arm`: a claim on one of them is not judged, its 0 of n would read as
    "never collapses"); the minimum runs an arm."""
    metric, stops, ends, min_seeds = claim.metric, judging.stops, judging.ends, judging.options.min_seeds
    for arm in claim.arms + ([claim.versus] if claim.versus else []):
        if not (in_group["arm"] == arm).any():
            return replace(base, reason=f"arm {arm!r} has no runs in this group")
    off = rules_off_reason(claim, judging.rules_off)
    if off:
        return replace(base, reason=off)
    alerts = judging.alerts if judging.alerts is not None else pd.DataFrame(columns=ALERT_COLUMNS)
    blind = _unseeable(metric.rules, alerts, judging.by_key.keys())
    if blind:
        return replace(base, reason=blind)
    if metric.kind == "alert_order":
        return _judge_order(claim, in_group, alerts, stops, ends, base)
    sides = {}
    for side, arm in (("arm", claim.arm), ("versus", claim.versus)):
        runs = in_group[in_group["arm"] == arm]
        sides[side] = run_outcomes(runs, metric.rules, metric.event, alerts, stops, ends)
    notes = [_cut_note(arm, sides[side], metric.rules) for side, arm in (("arm", claim.arm), ("versus", claim.versus))]
    if metric.kind == "collapse_rate":  # a run cut short by another rule has no known outcome
        sides = {side: [o for o in outcomes if not o.cut_by] for side, outcomes in sides.items()}
    a, b = sides["arm"], sides["versus"]
    base = replace(base, n_seeds=len(a), n_versus=len(b), notes="; ".join(filter(None, notes)))
    short = [(arm, len(o)) for arm, o in ((claim.arm, a), (claim.versus, b)) if len(o) < min_seeds]
    if any(n == 0 for _, n in short):
        return replace(base, reason="; ".join(f"{n} usable run(s) of {arm!r}" for arm, n in short))
    if metric.kind == "collapse_rate":
        base = _rate_evidence(claim, base, a, b)
    else:
        base = _time_evidence(claim, base, a, b)
    if base.reason:
        return base
    if short:
        why = "; ".join(f"{n} run(s) of {arm!r}" for arm, n in short) + f"; a verdict needs ≥ {min_seeds} an arm"
        return replace(base, p=math.nan, p_against=math.nan, reason=why)
    return replace(base, status="inconclusive")


def _rate_evidence(claim: ClaimSpec, base, a: list[Outcome], b: list[Outcome]):
    k_a, k_b = sum(o.collapsed for o in a), sum(o.collapsed for o in b)
    test = compare_rates(k_a, len(a), k_b, len(b))
    side = sign(claim.direction)
    p_for, p_against = (test.p_greater, test.p_less) if side > 0 else (test.p_less, test.p_greater)
    p_for, p_against = doubled(p_for), doubled(p_against)
    return replace(
        base, metric=f"{base.metric}: {k_a}/{len(a)} vs {k_b}/{len(b)}", test="exact score (unconditional)",
        arm_mean=k_a / len(a), versus_mean=k_b / len(b), effect=test.difference, ci_lo=test.ci_lo, ci_hi=test.ci_hi,
        distance=side * test.difference, p=p_for, p_against=p_against,
        event_fraction=(k_a + k_b) / (len(a) + len(b)),
    )


def _time_evidence(claim: ClaimSpec, base, a: list[Outcome], b: list[Outcome]):
    if any(not math.isfinite(o.step) for o in a + b):
        return replace(base, reason="a run logged no steps: its time is unknown")
    events = sum(o.collapsed for o in a), sum(o.collapsed for o in b)
    if not any(events):  # no time to compare: never a difference of +0 [+0, +0]
        arms = f"{claim.arm} or {claim.versus}"
        return replace(base, metric=f"{base.metric} (0/{len(a)} vs 0/{len(b)} collapsed)",
                       reason=f"no run of {arms} collapsed ({' or '.join(claim.metric.rules)})")
    test = compare_times([o.step for o in a], [o.collapsed for o in a], [o.step for o in b], [o.collapsed for o in b])
    lr = test.logrank
    # time lower = the collapse comes sooner = arm's hazard higher (z > 0)
    side = sign(claim.direction)
    p_for, p_against = (lr.p_sooner, lr.p_later) if side < 0 else (lr.p_later, lr.p_sooner)
    p_for, p_against = doubled(p_for), doubled(p_against)
    return replace(
        base, metric=f"{base.metric} (mean ≤ {test.horizon:.0f} steps; {events[0]}/{len(a)} vs {events[1]}/{len(b)} collapsed)",
        test="log-rank" + (" (exact permutation)" if lr.exact else ""),
        arm_mean=test.mean_a, versus_mean=test.mean_b, effect=test.difference, ci_lo=test.ci_lo, ci_hi=test.ci_hi,
        distance=side * test.difference, p=p_for, p_against=p_against,
        log_hazard_ratio=lr.log_hazard_ratio, event_fraction=sum(events) / (len(a) + len(b)),
    )


def _judge_order(claim: ClaimSpec, in_group: pd.DataFrame, alerts: pd.DataFrame, stops, ends, base):
    metric = claim.metric
    runs = in_group[in_group["arm"].isin(claim.arms)]
    collapses = run_outcomes(runs, metric.rules, "alert", alerts, stops, ends)
    firsts = first_alerts(alerts, [metric.first])
    before = after = ties = 0
    for outcome in collapses:
        if not outcome.collapsed:
            continue
        first = firsts.get(outcome.run_id)
        if first is not None and first == outcome.step:
            ties += 1
        elif first is not None and first < outcome.step:
            before += 1
        else:
            after += 1
    n, collapsed = before + after, before + after + ties
    notes = [f"{collapsed} of {len(collapses)} run(s) collapsed"]
    if ties:
        notes.append(f"{ties} with {metric.first} at the collapse's own step left out (a tie)")
    base = replace(base, n_seeds=n, notes="; ".join(notes), test="exact binomial (sign)",
                   metric=f"{base.metric}: {before} of {n} collapsing run(s)", event_fraction=collapsed / len(collapses))
    if n == 0:
        return replace(base, reason=f"no run of {', '.join(claim.arms)} collapsed ({' or '.join(metric.rules)})")
    test = share_test(before, n)
    side = sign(claim.direction)
    p_for, p_against = (test.p_greater, test.p_less) if side > 0 else (test.p_less, test.p_greater)
    p_for, p_against = doubled(p_for), doubled(p_against)
    base = replace(base, arm_mean=test.share, versus_mean=0.5, effect=test.share, ci_lo=test.ci_lo, ci_hi=test.ci_hi,
                   distance=(test.share - 0.5) * side, p=p_for, p_against=p_against)
    if n < MIN_ORDER_RUNS:
        return replace(base, p=math.nan, p_against=math.nan, reason=(
            f"{n} collapsing run(s) with an order; the sign test needs ≥ {MIN_ORDER_RUNS} (p ≥ 2/2^{n} otherwise)"))
    return replace(base, status="inconclusive")


def _unseeable(rules: list[str], alerts: pd.DataFrame, logged: Collection[str]) -> str:
    """Why no collapse could have been seen: none of the rules alerted anywhere and no run logged any
    of their default metric keys (the rule reads the first present; `nonfinite` reads every key).
    Empty when a collapse could have been seen. 0 of n would otherwise read as "never collapses"."""
    if "nonfinite" in rules or alerts["rule"].astype(str).isin(rules).any():
        return ""
    defaults = MonitorSpec()
    keys = [key for rule in rules for key in getattr(defaults, rule).keys]
    if any(key in logged for key in keys):
        return ""
    return f"no run logged {' / '.join(keys)}, which {' and '.join(rules)} read(s): a collapse could not be seen"


def _cut_note(arm: str, outcomes: list[Outcome], rules: list[str]) -> str:
    cut = [o for o in outcomes if o.cut_by]
    if not cut:
        return ""
    which = ", ".join(f"seed {o.seed} ({o.cut_by} at step {o.step:.0f})" for o in cut)
    return (f"{len(cut)} run(s) of {arm!r} stopped by another rule before any {' or '.join(rules)} alert: "
            f"{which} — left out of a rate, censored at the stop for a time")
