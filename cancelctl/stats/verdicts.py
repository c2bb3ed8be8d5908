"""Verdicts on a sweep's claims: supported, contradicted, inconclusive — or why it cannot tell.

Per claim (`cancelctl.spec.claims`) and comparison group: each run gives one number (the claim's
metric), seeds are paired between `arm` and `versus`, and the per-seed differences d = arm − versus
are tested with `paired.paired_t_test` (Student's paired t, the test the 95% interval shown beside
the verdict inverts; the per-comparison evidence is `evidence.paired_evidence`). Frames in (the
report's runs and metrics), dataclasses out; nothing here prints, plots or touches MLflow; the
report's cells are `cancelctl.report.claims`.

This module dispatches on the claim's kind and adjusts across the report (`judge_claims`); the rules
are `verdict_rules` (paired and trend claims, on `claim_values`' number per run) and `outcomes`
(claims on the monitor's alerts); the row, the inputs and the settings are `verdict_types.Verdict`,
`verdict_types.Judging` and `options.ComparisonOptions`.

Decisions, stated once:
- The verdict and the interval shown beside it come from one test (docs/claims.md#claims): each one-sided
  test is taken at α/2, the level of one tail of the 95% interval, and its p is shown doubled
  (`evidence.doubled`), so p < α exactly when the interval lies wholly on that side. Directional
  claims (higher / lower): "supported" is a rejection of "arm − versus ≤ 0" (for higher), a true
  null gives a false "supported" at rate ≤ α/2; "contradicted" is the mirror test (significantly
  the other way). An outcome claim's interval inverts its exact test too (rates, alert order), but a
  time to collapse's (the restricted-mean difference) is not the log-rank's: the test decides, and a
  verdict whose interval does not agree (`evidence.interval_agrees`) stays inconclusive, its note
  saying so.
- not_higher / not_lower / similar test against a margin m (non-inferiority; equivalence by two
  one-sided tests, TOST): "supported" means the difference is significantly inside the margin,
  "contradicted" significantly outside it. Without a margin "no difference" cannot be supported.
- Holm across every judged row of the report (claims × groups × benchmarks), once for the
  "supported" tests and once for the "contradicted" tests: each verdict kind keeps its family-wise
  error rate ≤ α.
- At least MIN_VERDICT_SEEDS shared seeds: the t-test is exact for normal differences from 2, but a
  verdict on 3 seeds rests on one sd estimated from 2 degrees of freedom (and the bootstrap-t the
  report used before rejected a true null far above α there: tests/stats/test_verdicts.py).
- Outcome claims (collapse rate, time to collapse, alert order) are judged from the monitor's
  alerts by `outcomes` (exact tests, unpaired) and join the same Holm family.
- A run a monitor rule stopped counts: a curve claim reads its curve up to the stop (slope,
  late − early, mean, Jitter2; steps/compute to κ if it reached κ before), `final` has no value for
  it (left out, and the verdict's note and reason say how many), and the compute-match check of a
  claim leaves it out (its compute ends at the stop by design).
- Seeds needed (for every row with ≥ 2 seeds; what an inconclusive row shows): the paired t-test
  planning number (paired.seeds_for_power) for 80% power at the observed distance of the effect
  from the decision boundary (0, or the margin) and the observed sd of d, one-sided at level α/(2m)
  with m the rows of the report (Bonferroni, which Holm never needs more than): enough seeds to decide this
  row whatever the other rows do; never fewer than MIN_VERDICT_SEEDS. For `similar` only the
  nearer margin is powered (TOST needs both; near a zero effect with a wide sd this undercounts).
- Scaling claims (asymptote, efficiency): each run's value is that parameter of its own fit
  (`scaling.fit_compute_curve` on its curve against its cumulative compute), paired over seeds like any
  curve claim, same Holm family; a run whose fit cannot be made leaves the claim unjudged with the
  fit's reason (as a run that never reached κ does): the seeds that fail are not a random subset.
- Trend claims (`along:` a grid axis, [D] Table 4): one row per point of the other axes, judged on
  the per-seed least-squares slopes of d along the axis (`trend`: why the seed stays the unit) as a
  paired effect against 0 (or the margin, per axis unit); every axis value must be judgeable as a
  group (logged, compute-matched, ...) or the row says where it is not. Same Holm family.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

import pandas as pd

from cancelctl.spec.claim_metric import LAST, OUTCOME_KINDS, CurveMetric
from cancelctl.spec.claims import ClaimSpec
from cancelctl.spec.directions import predicted_range
from cancelctl.stats.evidence import decide, interval_agrees
from cancelctl.stats.frames import group_order, split_by_key
from cancelctl.stats.options import ComparisonOptions
from cancelctl.stats.outcomes import judge_outcome, planned_seeds
from cancelctl.stats.paired import holm_adjust, seeds_for_power
from cancelctl.stats.verdict_rules import axis_strata, judge_group, judge_trend
from cancelctl.stats.verdict_types import Judging, Stop, Verdict, base_verdict

__all__ = ["Verdict", "agreeing", "judge_claims"]


def judge_claims(
    claims: Sequence[ClaimSpec],
    runs: pd.DataFrame,
    metrics: pd.DataFrame | dict[str, pd.DataFrame],
    options: ComparisonOptions = ComparisonOptions(),
    *,
    kappa: float | None = None,
    groups: Sequence[str] | None = None,
    alerts: pd.DataFrame | None = None,
    stops: Mapping[str, Stop] | None = None,
    rules_off: Mapping[str, Collection[str]] | None = None,
) -> list[Verdict]:
    """Judge every claim in every comparison group; Holm-adjust across all judged rows.

    runs: the runs the report uses (already filtered, e.g. to FINISHED) with run_id, arm, group,
    seed, G — the runs a monitor rule stopped included. metrics: the tidy frame (run_id, step, key,
    value) or `split_by_key` of it. options: α, power, minimum seeds, compute-match tolerance and
    override (arms not compute-matched in logged compute are not judged unless `allow_unmatched`).
    alerts: the monitor's alerts (run_id, rule, step, action) and stops: run id -> the `Stop` that
    ended it, for outcome claims and for stopped runs' notes. rules_off: arm -> the monitor rules
    that are off in its runs (an outcome claim on one is not judged). kappa: κ for claims of
    steps/compute to κ that give none (the report's κ). groups: comparison order (default: by the
    runs' axis.* columns).
    """
    by_key = metrics if isinstance(metrics, dict) else split_by_key(metrics)
    runs = runs.reset_index(drop=True).copy()
    runs["group"] = runs["group"].fillna("").astype(str)
    runs["arm"] = runs["arm"].astype(str)
    order = list(groups) if groups is not None else group_order(runs)
    judging = Judging(
        runs, by_key, options, kappa=kappa, alerts=alerts, stops=dict(stops or {}), rules_off=dict(rules_off or {}),
        ends=_last_steps(by_key) if any(c.metric.kind in OUTCOME_KINDS for c in claims) else {},
    )
    rows: list[Verdict] = []
    for claim in claims:
        if claim.metric.kind in OUTCOME_KINDS:
            key = claim.metric.resolved_key
            rows += [judge_outcome(claim, judging.in_group(group), base_verdict(claim, key, key, group), judging)
                     for group in order]
        elif claim.along is not None:
            rows += [judge_trend(claim, key, versus_key, label, points, judging)
                     for key, versus_key in _resolve_keys(claim.metric, by_key)
                     for label, points in axis_strata(claim, runs, order)]
        else:
            rows += [judge_group(claim, key, versus_key, group, judging)
                     for key, versus_key in _resolve_keys(claim.metric, by_key) for group in order]
    return _with_holm(rows, options)


def _last_steps(by_key: dict[str, pd.DataFrame]) -> dict[str, float]:
    """run id -> its last logged step over every key (where a run that never collapsed is censored)."""
    ends: dict[str, float] = {}
    for part in by_key.values():
        for run_id, step in part.groupby("run_id")["step"].max().items():
            ends[str(run_id)] = max(ends.get(str(run_id), -math.inf), float(step))
    return ends


def _with_holm(rows: list[Verdict], options: ComparisonOptions) -> list[Verdict]:
    """Holm across the judged rows, each decision held to its interval; seeds needed at the
    Bonferroni level of all rows with evidence, one-sided at half of it (claim p)."""
    alpha = options.alpha
    tested = [i for i, v in enumerate(rows) if v.judged]
    p_for = holm_adjust([rows[i].p for i in tested])
    p_against = holm_adjust([rows[i].p_against for i in tested])
    out = list(rows)
    for i, pf, pa in zip(tested, p_for, p_against):
        out[i] = agreeing(replace(rows[i], p_holm=float(pf), p_against_holm=float(pa), status=decide(pf, pa, alpha)))
    with_evidence = [i for i, v in enumerate(out) if math.isfinite(v.distance)]
    level = alpha / max(1, len(with_evidence)) / 2.0
    for i in with_evidence:
        if out[i].kind in OUTCOME_KINDS:
            needed = planned_seeds(out[i].kind, out[i], level, options.power)
        else:
            needed = seeds_for_power(out[i].distance, out[i].sd, alpha=level, power=options.power)
        out[i] = replace(out[i], seeds_needed=None if needed is None else max(needed, options.min_seeds))
    return out


def agreeing(v: Verdict) -> Verdict:
    """`v`, or `v` inconclusive with a note when the 95% interval shown beside its verdict does not
    agree with it (a time to collapse's log-rank is not its interval's inversion; every other test
    is its interval's, and agrees)."""
    center = 0.5 if v.kind == "alert_order" else 0.0  # an alert order's effect is a share, tested against 1/2
    if interval_agrees(v.status, v.ci_lo, v.ci_hi, predicted_range(v.direction, v.margin, center)):
        return v
    why = f"its test says {v.status} but its 95% interval reaches the claim's boundary: inconclusive"
    return replace(v, status="inconclusive", notes="; ".join(filter(None, [v.notes, why])))


def _resolve_keys(metric: CurveMetric, by_key: dict[str, pd.DataFrame]) -> list[tuple[str, str]]:
    """(key, versus key) pairs to judge; an unmatched pattern is kept as is (reported not logged)."""
    key = metric.resolved_key
    if "*" in key:
        matched = sorted(k for k in by_key if fnmatch.fnmatchcase(k, key))
        return [(k, k) for k in matched] or [(key, key)]
    key = _resolve_last(key, by_key)
    return [(key, _resolve_last(metric.versus_key, by_key) if metric.versus_key else key)]


def _resolve_last(key: str, by_key: dict[str, pd.DataFrame]) -> str:
    if LAST not in key:
        return key
    head, tail = key.split(LAST, 1)
    pattern = re.compile(re.escape(head) + r"(\d+)" + re.escape(tail) + "$")
    found = [int(m.group(1)) for m in map(pattern.match, by_key) if m]
    return f"{head}{max(found)}{tail}" if found else key

