"""Verdicts on a sweep's claims: supported, contradicted, inconclusive — or why it cannot tell.

Per claim (`cancelctl.spec.claims`) and comparison group: each run gives one number (the claim's
metric), seeds are paired between `arm` and `versus`, and the per-seed differences d = arm − versus
are tested with `paired.paired_t_test` (Student's paired t, the test the 95% interval shown beside
the verdict inverts; the per-comparison evidence is `evidence.paired_evidence`). Frames in (the report's runs and metrics), dataclasses out; nothing
here prints, plots or touches MLflow; the report's cells are `cancelctl.report.claims`.

Decisions, stated once:
- The verdict and the interval shown beside it come from one test (SPEC "Claims"): each one-sided
  test is taken at α/2, the level of one tail of the 95% interval, and its p is shown doubled
  (`evidence.doubled`), so p < α exactly when the interval lies wholly on that side. Directional
  claims (higher / lower): "supported" is a rejection of "arm − versus ≤ 0" (for higher), a true
  null gives a false "supported" at rate ≤ α/2; "contradicted" is the mirror test (significantly
  the other way). Outcome claims' exact tests are not their intervals' inversions: a verdict whose
  interval does not agree (`evidence.interval_agrees`) stays inconclusive and its note says so.
- not_higher / not_lower / similar test against a margin m (non-inferiority; equivalence by two
  one-sided tests, TOST): "supported" means the difference is significantly inside the margin,
  "contradicted" significantly outside it. Without a margin "no difference" cannot be supported.
- Holm across every judged row of the report (claims × groups × benchmarks), once for the
  "supported" tests and once for the "contradicted" tests: each verdict kind keeps its family-wise
  error rate ≤ α.
- At least MIN_VERDICT_SEEDS shared seeds: the t-test is exact for normal differences from 2, but a
  verdict on 3 seeds rests on one sd estimated from 2 degrees of freedom (and the bootstrap-t the
  report used before rejected a true null ~9% of the time there).
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
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from cancelctl.spec.claims import (
    COMPUTE_KINDS,
    KAPPA_KINDS,
    LAST,
    NEEDS_WHOLE_RUN,
    OUTCOME_KINDS,
    SCALING_KINDS,
    ClaimMetric,
    ClaimSpec,
)
from cancelctl.stats.compute_match import check_compute_matched
from cancelctl.stats.crossing import compute_at_reward, steps_to_threshold
from cancelctl.stats.curves import jitter2, late_minus_early, slope
from cancelctl.stats.evidence import (
    ALPHA,
    MIN_VERDICT_SEEDS,
    POWER,
    Status,
    decide,
    interval_agrees,
    paired_evidence,
    predicted_range,
)
from cancelctl.stats.frames import COMPUTE_KEYS, on_compute_axis, split_by_key
from cancelctl.stats.outcomes import Stop, judge_outcome, planned_seeds
from cancelctl.stats.paired import MIN_T_SEEDS, holm_adjust, seeds_for_power
from cancelctl.stats.scaling import ComputeCurveError, fit_compute_curve
from cancelctl.stats.trend import seed_slopes


@dataclass(frozen=True)
class Verdict:
    """One claim in one comparison group (and, for a '*' key, one matching metric key)."""

    claim_id: str
    source: str
    statement: str
    metric: str  # what was compared, e.g. "slope/step of mismatch/rho_std"
    key: str  # the resolved metric key
    versus_key: str
    direction: str
    arm: str
    versus: str
    group: str
    status: Status
    reason: str = ""  # why "cannot judge"; empty otherwise
    notes: str = ""  # runs left out, not compute-matched but judged, ...
    n_seeds: int = 0  # shared seeds behind the numbers
    arm_mean: float = math.nan
    versus_mean: float = math.nan
    effect: float = math.nan  # mean over seeds of arm − versus
    ci_lo: float = math.nan
    ci_hi: float = math.nan
    sd: float = math.nan  # sd over seeds of arm − versus
    margin: float = math.nan  # absolute margin used (not_higher / not_lower / similar)
    distance: float = math.nan  # effect's distance from the decision boundary, > 0 on the claim's side
    p: float = math.nan  # claim p (one-sided, doubled: `evidence.doubled`) of the test that supports the claim
    p_against: float = math.nan  # ... and of the test that contradicts it
    p_holm: float = math.nan
    p_against_holm: float = math.nan
    alpha: float = ALPHA
    seeds_needed: int | None = None  # paired seeds for 80% power at the observed effect and sd, level α/(2m)
    compute_matched: bool = True
    kind: str = ""  # the claim's metric kind
    test: str = "paired t"  # the test behind p
    n_versus: int | None = None  # unpaired (outcome) claims: runs of versus; n_seeds then counts arm's runs
    event_fraction: float = math.nan  # outcome claims: share of the compared runs that collapsed
    log_hazard_ratio: float = math.nan  # time_to_collapse: Peto's estimate, arm vs versus
    axis: str = ""  # trend claims: the grid axis; effect, CI, sd (and each arm's mean) are then of slopes along it
    axis_effects: tuple[tuple[float, float], ...] = ()  # ... and (axis value, mean of arm − versus) per value

    @property
    def judged(self) -> bool:
        return self.status != "cannot judge"


def judge_claims(
    claims: Sequence[ClaimSpec],
    runs: pd.DataFrame,
    metrics: pd.DataFrame | dict[str, pd.DataFrame],
    *,
    kappa: float | None = None,
    groups: Sequence[str] | None = None,
    alpha: float = ALPHA,
    power: float = POWER,
    min_seeds: int = MIN_VERDICT_SEEDS,
    allow_unmatched: bool = False,
    token_tol: float = 0.10,
    alerts: pd.DataFrame | None = None,
    stops: Mapping[str, Stop] | None = None,
    rules_off: Mapping[str, Collection[str]] | None = None,
) -> list[Verdict]:
    """Judge every claim in every comparison group; Holm-adjust across all judged rows.

    runs: the runs the report uses (already filtered, e.g. to FINISHED) with run_id, arm, group,
    seed, G — the runs a monitor rule stopped included. metrics: the tidy frame (run_id, step, key,
    value) or `split_by_key` of it. alerts: the monitor's alerts (run_id, rule, step, action) and
    stops: run id -> the `Stop` that ended it, for outcome claims and for stopped runs' notes.
    rules_off: arm -> the monitor rules that are off in its runs (an outcome claim on one is not judged).
    kappa: κ for claims of steps/compute to κ that give none (the report's κ). groups: comparison
    order (default: by the runs' axis.* columns). Arms that are not compute-matched in logged compute
    (`check_compute_matched` on the two arms) are not judged unless `allow_unmatched`.
    """
    if min_seeds < MIN_T_SEEDS:
        raise ValueError(f"min_seeds must be >= {MIN_T_SEEDS} (a paired t-test needs them)")
    by_key = metrics if isinstance(metrics, dict) else split_by_key(metrics)
    runs = runs.reset_index(drop=True).copy()
    runs["group"] = runs["group"].fillna("").astype(str)
    runs["arm"] = runs["arm"].astype(str)
    order = list(groups) if groups is not None else _group_order(runs)
    stops = dict(stops or {})
    ends = _last_steps(by_key) if any(c.metric.kind in OUTCOME_KINDS for c in claims) else {}
    rows: list[Verdict] = []
    for claim in claims:
        if claim.metric.kind in OUTCOME_KINDS:
            for group in order:
                base = _base_verdict(claim, claim.metric.resolved_key, claim.metric.resolved_key, group)
                in_group = runs[runs["group"] == group]
                rows.append(judge_outcome(claim, group, in_group, alerts, stops, ends, base, min_seeds, by_key.keys(),
                                          rules_off))
            continue
        for key, versus_key in _resolve_keys(claim.metric, by_key):
            if claim.along is not None:
                args = (runs, by_key, kappa, min_seeds, allow_unmatched, token_tol, stops)
                rows += [_judge_trend(claim, key, versus_key, label, points, *args)
                         for label, points in _axis_strata(claim, runs, order)]
                continue
            for group in order:
                rows.append(
                    _judge_one(
                        claim, key, versus_key, group, runs, by_key, kappa, min_seeds,
                        allow_unmatched, token_tol, stops,
                    )
                )
    return _with_holm(rows, alpha, power, min_seeds)


def _last_steps(by_key: dict[str, pd.DataFrame]) -> dict[str, float]:
    """run id -> its last logged step over every key (where a run that never collapsed is censored)."""
    ends: dict[str, float] = {}
    for part in by_key.values():
        for run_id, step in part.groupby("run_id")["step"].max().items():
            ends[str(run_id)] = max(ends.get(str(run_id), -math.inf), float(step))
    return ends


def _base_verdict(claim: ClaimSpec, key: str, versus_key: str, group: str) -> Verdict:
    label = claim.metric.label.replace(claim.metric.resolved_key, key, 1)  # a '*' or {last} key, resolved
    return Verdict(
        claim.id, claim.source, claim.statement, label, key, versus_key, claim.direction,
        ", ".join(claim.arms), claim.versus or "", group, "cannot judge", kind=claim.metric.kind,
    )


def _with_holm(rows: list[Verdict], alpha: float, power: float, min_seeds: int) -> list[Verdict]:
    """Holm across the judged rows, each decision held to its interval; seeds needed at the
    Bonferroni level of all rows with evidence, one-sided at half of it (claim p)."""
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
            needed = planned_seeds(out[i].kind, out[i], level, power)
        else:
            needed = seeds_for_power(out[i].distance, out[i].sd, alpha=level, power=power)
        out[i] = replace(out[i], seeds_needed=None if needed is None else max(needed, min_seeds))
    return out


def agreeing(v: Verdict) -> Verdict:
    """`v`, or `v` inconclusive with a note when the 95% interval shown beside its verdict does not
    agree with it (an outcome claim's exact test is not its interval's inversion; a paired claim's t
    always agrees)."""
    center = 0.5 if v.kind == "alert_order" else 0.0  # an alert order's effect is a share, tested against 1/2
    if interval_agrees(v.status, v.ci_lo, v.ci_hi, predicted_range(v.direction, v.margin, center)):
        return v
    why = f"its test says {v.status} but its 95% interval reaches the claim's boundary: inconclusive"
    return replace(v, status="inconclusive", notes="; ".join(filter(None, [v.notes, why])))


def _resolve_keys(metric: ClaimMetric, by_key: dict[str, pd.DataFrame]) -> list[tuple[str, str]]:
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


def _group_order(runs: pd.DataFrame) -> list[str]:
    """Groups by their axis values, numerically where numeric (G=4 before G=16)."""

    def rank(value: object) -> tuple:
        try:
            return (0, float(value), "")
        except (TypeError, ValueError):
            return (1, 0.0, str(value))

    axes = [c for c in runs.columns if c.startswith("axis.")]
    firsts = runs.groupby("group", sort=False).first()
    return sorted(firsts.index, key=lambda g: tuple(rank(firsts.at[g, c]) for c in axes) + (str(g),))


def _judge_one(
    claim: ClaimSpec, key: str, versus_key: str, group: str, runs: pd.DataFrame,
    by_key: dict[str, pd.DataFrame], kappa: float | None, min_seeds: int,
    allow_unmatched: bool, token_tol: float, stops: Mapping[str, Stop], pairs: dict | None = None,
) -> Verdict:
    """One claim on one group; `pairs` (when given) receives seed -> (arm value, versus value)."""
    base = _base_verdict(claim, key, versus_key, group)
    in_group = runs[runs["group"] == group]
    sides = {}
    for arm in dict.fromkeys((claim.arm, claim.versus)):
        if not (in_group["arm"] == arm).any():
            return replace(base, reason=f"arm {arm!r} has no runs in this group")
    notes, no_value = [], 0
    for side, arm, side_key in (("arm", claim.arm, key), ("versus", claim.versus, versus_key)):
        if side_key not in by_key:
            return replace(base, reason=f"not logged: {side_key}")
        arm_runs = in_group[in_group["arm"] == arm]
        if side == "versus" and arm == claim.arm:
            stopped_note = ""  # the same runs, already said
        else:
            stopped_note, dropped = _stopped_note(claim.metric, arm, arm_runs, stops)
            no_value += dropped
        if claim.metric.kind in NEEDS_WHOLE_RUN:
            arm_runs = arm_runs[~arm_runs["run_id"].astype(str).isin(list(stops))]
        values, problem, cut_short = _per_run(claim.metric, side_key, arm_runs, by_key, kappa, stops) \
            if not arm_runs.empty else (pd.Series(dtype=float), "", [])
        notes += [stopped_note] if stopped_note else []
        if cut_short:
            no_value += len(cut_short)
            notes.append(f"{len(cut_short)} of them stopped too early for a {claim.metric.kind} value of {side_key} "
                         "(too few points before the stop): left out here")
        if problem:
            return replace(base, reason=problem, notes="; ".join(notes))
        sides[side] = values
    compute_matched = True
    if claim.arm != claim.versus:
        pair_runs = in_group[in_group["arm"].isin([claim.arm, claim.versus])]
        pair_runs = pair_runs[~pair_runs["run_id"].astype(str).isin(list(stops))]  # their compute ends at the stop
        violations = check_compute_matched(pair_runs, by_key, tol=token_tol)
        if violations:
            compute_matched = False
            if not allow_unmatched:
                return replace(base, reason="arms not compute-matched: " + "; ".join(map(str, violations)),
                               compute_matched=False)
            notes.append("NOT compute-matched (judged with allow_unmatched)")
    per_seed = {side: values.groupby(level=0).mean() for side, values in sides.items()}
    shared = per_seed["arm"].index.intersection(per_seed["versus"].index).sort_values()
    x, v = per_seed["arm"].loc[shared].to_numpy(float), per_seed["versus"].loc[shared].to_numpy(float)
    if pairs is not None:
        pairs.update(zip(shared, zip(x, v)))
    margin = 0.0
    if claim.margin is not None:
        margin = claim.margin
    elif claim.margin_rel is not None:
        margin = claim.margin_rel * abs(float(v.mean())) if v.size else math.nan
    base = replace(base, n_seeds=int(shared.size), compute_matched=compute_matched, notes="; ".join(notes),
                   margin=margin if claim.direction in ("not_higher", "not_lower", "similar") else math.nan)
    without = f"; {no_value} stopped run(s) have no {claim.metric.kind} value" if no_value else ""
    if shared.size < 2:
        return replace(base, reason=f"{shared.size} shared seed(s); need ≥ {min_seeds}{without}")
    ev = paired_evidence(x, v, claim.direction, margin)
    base = replace(
        base, arm_mean=float(x.mean()), versus_mean=float(v.mean()), effect=ev.effect, ci_lo=ev.ci_lo,
        ci_hi=ev.ci_hi, sd=ev.sd, distance=ev.distance,
    )
    if shared.size < min_seeds:
        return replace(base, reason=f"{shared.size} shared seeds; a verdict needs ≥ {min_seeds}{without}")
    return replace(base, status="inconclusive", p=ev.p_for, p_against=ev.p_against)


def _axis_strata(claim: ClaimSpec, runs: pd.DataFrame, order: Sequence[str]) -> list[tuple[str, list]]:
    """(row label, [(axis value, group)] sorted by value) per point of the other axes, in `order`."""
    column = f"axis.{claim.along.axis}"
    if column not in runs.columns:
        return [(claim.along.axis, [])]
    others = sorted(c for c in runs.columns if c.startswith("axis.") and c != column)
    firsts = runs.groupby("group", sort=False).first()
    strata: dict[tuple, list] = {}
    for group in order:
        if group in firsts.index:
            row = firsts.loc[group]
            key = tuple(f"{c[5:]}={row[c]:g}" if isinstance(row[c], float) else f"{c[5:]}={row[c]}" for c in others)
            strata.setdefault(key, []).append((float(pd.to_numeric(row[column], errors="coerce")), group))
    out = []
    for key, points in strata.items():
        points.sort(key=lambda p: (math.isnan(p[0]), p[0]))
        values = ", ".join(f"{value:g}" for value, _ in points)
        out.append((",".join([*key, f"{claim.along.axis} in {{{values}}}"]), points))
    return out


def _judge_trend(
    claim: ClaimSpec, key: str, versus_key: str, label: str, points: list, runs: pd.DataFrame,
    by_key: dict[str, pd.DataFrame], kappa: float | None, min_seeds: int,
    allow_unmatched: bool, token_tol: float, stops: Mapping[str, Stop],
) -> Verdict:
    """A trend claim on one point of the other axes: each axis value judged as a group (its reasons
    and notes kept), the seeds paired there, then the per-seed slopes tested against 0 or the margin."""
    along = claim.along
    per = "doubling" if along.scale == "log" else "unit"
    base = _base_verdict(claim, key, versus_key, label)
    base = replace(base, metric=f"{base.metric}: slope of arm − versus per {per} of {along.axis}", axis=along.axis)
    values = [value for value, _ in points]
    if not points:
        return replace(base, reason=f"no run carries a {along.axis} value (not a grid axis of these runs)")
    if len(values) < 2 or any(math.isnan(v) for v in values) or len(set(values)) < len(values):
        shown = ", ".join(f"{v:g}" for v in values)
        return replace(base, reason=f"{along.axis} needs ≥ 2 distinct numeric values with runs, got {shown}")
    if along.scale == "log" and min(values) <= 0:
        return replace(base, reason=f"scale log needs {along.axis} > 0, got {min(values):g}")
    arm_side, versus_side, notes, matched = {}, {}, [], True
    for value, group in points:
        pairs: dict = {}
        one = _judge_one(claim, key, versus_key, group, runs, by_key, kappa, min_seeds, allow_unmatched,
                         token_tol, stops, pairs=pairs)
        matched = matched and one.compute_matched
        notes += [f"at {along.axis}={value:g}: {one.notes}"] if one.notes else []
        if not pairs:
            return replace(base, reason=f"at {along.axis}={value:g}: {one.reason}", notes="; ".join(notes),
                           compute_matched=matched)
        arm_side[value] = pd.Series({s: a for s, (a, _) in pairs.items()}, dtype=float)
        versus_side[value] = pd.Series({s: b for s, (_, b) in pairs.items()}, dtype=float)
    slopes, left_out = seed_slopes({v: arm_side[v] - versus_side[v] for v in values}, along.scale)
    seeds = list(slopes.index)
    effects = tuple((v, float((arm_side[v] - versus_side[v]).loc[seeds].mean())) for v in values) if seeds else ()
    if seeds:
        notes.append("arm − versus at " + ", ".join(f"{along.axis}={v:g}: {e:+.3g}" for v, e in effects)
                     + f" (mean over the {len(seeds)} seed(s) paired at every value)")
    if left_out:
        notes.append(f"seed(s) {', '.join(map(str, left_out))} not paired at every {along.axis}: left out")
    margin = claim.margin if claim.margin is not None else 0.0
    base = replace(base, n_seeds=len(seeds), compute_matched=matched, notes="; ".join(notes), axis_effects=effects,
                   margin=margin if claim.direction in ("not_higher", "not_lower", "similar") else math.nan)
    if len(seeds) < 2:
        return replace(base, reason=f"{len(seeds)} seed(s) paired at every {along.axis}; need ≥ {min_seeds}")
    ev = paired_evidence(slopes.to_numpy(), np.zeros(len(seeds)), claim.direction, margin)
    own = {side: float(seed_slopes({v: part[v] for v in values}, along.scale)[0].loc[seeds].mean())
           for side, part in (("arm", arm_side), ("versus", versus_side))}
    base = replace(base, arm_mean=own["arm"], versus_mean=own["versus"], effect=ev.effect, ci_lo=ev.ci_lo,
                   ci_hi=ev.ci_hi, sd=ev.sd, distance=ev.distance)
    if len(seeds) < min_seeds:
        return replace(base, reason=f"{len(seeds)} seeds paired at every {along.axis}; a verdict needs ≥ {min_seeds}")
    return replace(base, status="inconclusive", p=ev.p_for, p_against=ev.p_against)


def _stopped_note(metric: ClaimMetric, arm: str, arm_runs: pd.DataFrame, stops: Mapping[str, Stop]) -> tuple[str, int]:
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


def _per_run(
    metric: ClaimMetric, key: str, arm_runs: pd.DataFrame, by_key: dict[str, pd.DataFrame], kappa: float | None,
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
    threshold = metric.kappa if metric.kappa is not None else kappa
    if metric.kind in KAPPA_KINDS and threshold is None:
        return none, "no κ: give metric.kappa in the claim or the report's threshold", []
    if metric.kind in COMPUTE_KINDS:
        compute_key = COMPUTE_KEYS[metric.compute]
        if compute_key not in by_key:
            return none, f"not logged: {compute_key}", []
        points = on_compute_axis(points, by_key[compute_key])
    reduce = _reducer(metric, threshold)
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
        return none, f"arm {arm!r}: no compute-scaling fit of {key} on {metric.compute} ({why})", cut_short
    return pd.Series(list(values.values()), index=[seeds[r] for r in values], dtype=float), "", cut_short


def _reducer(metric: ClaimMetric, kappa: float | None) -> Callable[[pd.DataFrame], float | None]:
    """The per-run statistic of a claim's metric; a part is one run's points sorted by step."""
    kind = metric.kind
    if kind == "final":
        return lambda part: float(part["value"].iloc[-1])
    if kind == "steps_to_kappa":
        return lambda part: steps_to_threshold(part["step"], part["value"], kappa, metric.smooth_window)
    if kind == "compute_to_kappa":
        return lambda part: compute_at_reward(part["compute"], part["value"], kappa, metric.smooth_window)
    if kind == "jitter2":
        return lambda part: jitter2(part["value"].to_numpy())
    if kind == "slope":
        return lambda part: slope(part["step"].to_numpy(float), part["value"].to_numpy())
    if kind == "late_minus_early":
        return lambda part: late_minus_early(part["value"].to_numpy(), metric.window)
    if kind == "mean":
        return lambda part: float(part["value"].mean())
    if kind in SCALING_KINDS:
        return lambda part: getattr(fit_compute_curve(part["compute"], part["value"]), kind)
    raise ValueError(f"unknown metric kind {kind!r}")
