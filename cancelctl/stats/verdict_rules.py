"""The verdict rules of the paired claims (the decisions are stated in `verdicts`): one claim on one
comparison group (`judge_group`: per-seed values of arm and versus, compute-matched, paired, tested
by `evidence.paired_evidence`) and a trend claim along a grid axis (`judge_trend`: the per-seed
slopes of arm − versus over the groups of `axis_strata`). Each returns a `Verdict` whose status is
"inconclusive" until `verdicts` applies Holm, or "cannot judge" with the reason."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from cancelctl.spec.claim_metric import NEEDS_WHOLE_RUN
from cancelctl.spec.claims import ClaimSpec
from cancelctl.stats.claim_values import per_run, stopped_note
from cancelctl.stats.compute_match import check_compute_matched
from cancelctl.stats.evidence import paired_evidence
from cancelctl.stats.trend import seed_slopes
from cancelctl.stats.verdict_types import Judging, Verdict, base_verdict, shown_margin


def judge_group(
    claim: ClaimSpec, key: str, versus_key: str, group: str, judging: Judging, pairs: dict | None = None,
) -> Verdict:
    """One claim on one group; `pairs` (when given) receives seed -> (arm value, versus value)."""
    base = base_verdict(claim, key, versus_key, group)
    in_group, stops, options = judging.in_group(group), judging.stops, judging.options
    min_seeds = options.min_seeds
    sides = {}
    for arm in dict.fromkeys((claim.arm, claim.versus)):
        if not (in_group["arm"] == arm).any():
            return replace(base, reason=f"arm {arm!r} has no runs in this group")
    notes, no_value = [], 0
    for side, arm, side_key in (("arm", claim.arm, key), ("versus", claim.versus, versus_key)):
        if side_key not in judging.by_key:
            return replace(base, reason=f"not logged: {side_key}")
        arm_runs = in_group[in_group["arm"] == arm]
        if side == "versus" and arm == claim.arm:
            note = ""  # the same runs, already said
        else:
            note, dropped = stopped_note(claim.metric, arm, arm_runs, stops)
            no_value += dropped
        if claim.metric.kind in NEEDS_WHOLE_RUN:
            arm_runs = arm_runs[~arm_runs["run_id"].astype(str).isin(list(stops))]
        values, problem, cut_short = per_run(claim.metric, side_key, arm_runs, judging.by_key, judging.kappa, stops) \
            if not arm_runs.empty else (pd.Series(dtype=float), "", [])
        notes += [note] if note else []
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
        violations = check_compute_matched(pair_runs, judging.by_key, tol=options.token_tol)
        if violations:
            compute_matched = False
            if not options.allow_unmatched:
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
                   margin=shown_margin(claim, margin))
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


def axis_strata(claim: ClaimSpec, runs: pd.DataFrame, order: Sequence[str]) -> list[tuple[str, list]]:
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


def judge_trend(claim: ClaimSpec, key: str, versus_key: str, label: str, points: list, judging: Judging) -> Verdict:
    """A trend claim on one point of the other axes: each axis value judged as a group (its reasons
    and notes kept), the seeds paired there, then the per-seed slopes tested against 0 or the margin."""
    along, min_seeds = claim.along, judging.options.min_seeds
    per = "doubling" if along.scale == "log" else "unit"
    base = base_verdict(claim, key, versus_key, label)
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
        one = judge_group(claim, key, versus_key, group, judging, pairs=pairs)
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
                   margin=shown_margin(claim, margin))
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
