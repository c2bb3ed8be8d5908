"""A paper's testable claim, written in a sweep file's `claims:` list (pydantic v2, strict).

A claim names one per-run number (`metric`), two arms of the sweep (`arm`, `versus`) and the
direction the paper predicts for arm − versus. `cancelctl.stats.verdicts` judges it per comparison group
(grid point) from the paired differences over seeds. docs/claims.md#the-papers-claims lists the papers' claims;
the ready-made blocks live in experiments/*.yaml.

Outcome claims (`OUTCOME_KINDS`) read the monitor's alerts instead of a curve: how often an arm's
runs collapse (a named rule alerted or stopped them), how soon, and whether one rule alerts before
another ([H] App. D: mismatch grows before entropy and reward collapse); `cancelctl.stats.outcomes`.

Scaling claims (`SCALING_KINDS`) compare the parameters of ScaleRL's compute–performance curve
fitted per run (`cancelctl.stats.scaling`): the asymptote A and the efficiency B.

A claim with `along: {axis: <grid path>}` is about how arm − versus changes along that grid axis
([D] Table 4: DFPO's gain over GSPO grows with G): `direction` is then the predicted sign of the
slope of the paired effect over the axis values (`cancelctl.stats.trend`), one verdict per point
of the other axes instead of one per group.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from typing import Annotated, Literal, get_args

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

from cancelctl.spec.metric_keys import REWARD_KEY
from cancelctl.spec.monitor import MonitorSpec, RuleName
from cancelctl.spec.strict import SpecModel

# every logged eval benchmark (verl's val-core/<benchmark>/acc/mean@k, '@' spelled out): one
# verdict per benchmark
EVAL_KEYS = "val-core/*/acc/mean_at_*"
# in a key, `{last}` stands for the highest logged integer there (the top frequency bucket of
# cancel/energy_b{k} [D eq. 24], whose count K is a backend setting)
LAST = "{last}"

MetricKind = Literal[
    "final", "steps_to_kappa", "compute_to_kappa", "jitter2", "slope", "late_minus_early", "mean",
    "asymptote", "efficiency", "collapse_rate", "time_to_collapse", "alert_order",
]
KAPPA_KINDS = ("steps_to_kappa", "compute_to_kappa")
# a parameter of ScaleRL's curve R(C) fitted to each run's `key` against its cumulative `compute`
SCALING_KINDS = ("asymptote", "efficiency")
# kinds read on a compute axis (`metric.compute`)
COMPUTE_KINDS = ("compute_to_kappa", *SCALING_KINDS)
# a run's monitor alerts make these, not a metric key; their runs are compared unpaired (a rate, a
# time to an event, an order within runs), so a run a rule stopped is an outcome, not a missing value
OUTCOME_KINDS = ("collapse_rate", "time_to_collapse", "alert_order")
# `final` is the evaluation at the end of the budget: a run a rule stopped has none; nor has it a
# compute-scaling fit over the budget's compute (its curve ends at the stop, often falling). Every
# other curve kind is defined on the curve up to the stop (steps/compute to κ: if κ was reached before it).
NEEDS_WHOLE_RUN = ("final", *SCALING_KINDS)
# arm − versus: higher / lower are directional (one-sided test); not_higher / not_lower are
# non-inferiority claims and similar an equivalence claim, each within a margin that must be given
# (no number of seeds can show "no difference at all")
Direction = Literal["higher", "lower", "not_higher", "not_lower", "similar"]
MARGIN_DIRECTIONS = ("not_higher", "not_lower", "similar")
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
_RULE_SCHEMA = {"enum": list(get_args(RuleName))}
# one rule or a list of them; read as a list, so a misspelt rule is one error naming the choices
RuleNames = Annotated[
    list[RuleName],
    BeforeValidator(lambda value: [value] if isinstance(value, str) else value),
    WithJsonSchema({"anyOf": [_RULE_SCHEMA, {"type": "array", "items": _RULE_SCHEMA, "minItems": 1}]}),
]


class _Strict(SpecModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ClaimMetric(_Strict):
    """The per-run number a claim compares; each run gives one value, seeds are then paired."""

    kind: MetricKind = Field(
        ...,
        description=(
            "final: last logged value (eval score) [D eq. 22]; steps_to_kappa / compute_to_kappa: first step / "
            "cumulative compute where `key` reaches kappa [D eq. 19, Table 2]; jitter2: second-difference jitter "
            "of the curve [D eq. 20]; slope: least-squares slope per step [H §2]; late_minus_early: mean of the "
            "last `window` of the curve minus mean of the first; mean: mean over logged steps; asymptote / "
            "efficiency: A / B of ScaleRL's curve R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) fitted to `key` "
            "against cumulative `compute` per run [ScaleRL, arXiv 2510.13786]"
        ),
    )
    key: str | None = Field(
        None,
        description=(
            f"metric key; '*' globs give one verdict per matching key, '{LAST}' the highest logged integer. "
            f"Default: {EVAL_KEYS} for final, {REWARD_KEY} for steps/compute to kappa, jitter2, asymptote and "
            "efficiency; required otherwise"
        ),
    )
    versus_key: str | None = Field(
        None, description="read this key on the versus side instead of `key` (e.g. cancel/flip_neg vs cancel/flip_pos)"
    )
    kappa: float | None = Field(None, description="threshold for steps/compute to kappa; default: the report's kappa")
    compute: Literal["tokens", "updates", "hours"] = Field(
        "tokens", description="compute axis of compute_to_kappa, asymptote and efficiency"
    )
    smooth_window: int = Field(1, ge=1, description="steps/compute to kappa: trailing mean over this many points")
    window: float = Field(0.25, gt=0, le=0.5, description="late_minus_early: fraction of the curve at each end")
    rule: RuleNames | None = Field(
        None,
        description=(
            "collapse_rate / time_to_collapse / alert_order: the monitor rule(s) (spec `monitor:`) whose first "
            "alert is the run's collapse; a list: the first alert of any of them"
        ),
    )
    first: RuleName | None = Field(
        None, description="alert_order: the rule predicted to alert before the collapse (e.g. mismatch_growth [H App. D])"
    )
    event: Literal["alert", "stop"] = Field(
        "alert",
        description=(
            "collapse_rate / time_to_collapse: a run collapses at the rule's first alert (warn or stop), or only "
            "where the rule stopped it"
        ),
    )

    @model_validator(mode="after")
    def _consistent(self) -> ClaimMetric:
        if self.kind in OUTCOME_KINDS:
            self._outcome_fields()
            return self
        if self.rule is not None or self.first is not None or self.event != "alert":
            raise ValueError(f"metric.rule, metric.first and metric.event apply to {' / '.join(OUTCOME_KINDS)} only")
        if self.key is None and self.kind in ("slope", "late_minus_early", "mean"):
            raise ValueError(f"metric.key is required for kind {self.kind!r}")
        if self.kind not in KAPPA_KINDS and (self.kappa is not None or self.smooth_window != 1):
            raise ValueError(f"metric.kappa and metric.smooth_window apply to {' / '.join(KAPPA_KINDS)} only")
        if self.kind not in COMPUTE_KINDS and self.compute != "tokens":
            raise ValueError(f"metric.compute applies to {' / '.join(COMPUTE_KINDS)} only")
        if self.kind != "late_minus_early" and self.window != 0.25:
            raise ValueError("metric.window applies to late_minus_early only")
        if self.versus_key is not None and "*" in self.resolved_key:
            raise ValueError("metric.versus_key cannot be combined with a '*' pattern in metric.key")
        return self

    def _outcome_fields(self) -> None:
        kind = self.kind
        if self.rule is None or self.rule == []:
            raise ValueError(f"metric.rule is required for kind {kind!r}: the monitor rule(s) whose alert is the collapse")
        if self.key is not None or self.versus_key is not None:
            raise ValueError(f"metric.key and metric.versus_key do not apply to kind {kind!r}: it reads the monitor's alerts")
        if self.kappa is not None or self.smooth_window != 1 or self.compute != "tokens" or self.window != 0.25:
            raise ValueError(f"metric.kappa, smooth_window, compute and window do not apply to kind {kind!r}")
        if kind == "alert_order":
            if self.first is None:
                raise ValueError("metric.first is required for kind 'alert_order': the rule predicted to alert first")
            if self.first in self.rules:
                raise ValueError(f"metric.first {self.first!r} is also in metric.rule: an order needs two different rules")
            if self.event != "alert":
                raise ValueError("metric.event does not apply to kind 'alert_order' (it orders the rules' first alerts)")
        elif self.first is not None:
            raise ValueError("metric.first applies to kind 'alert_order' only")

    @property
    def rules(self) -> list[str]:
        """The collapse rule(s) of an outcome kind, as a list (empty for curve kinds)."""
        return list(dict.fromkeys(self.rule or []))

    @property
    def resolved_key(self) -> str:
        """`key`, or the kind's default; for an outcome kind the rule name(s), '+'-joined."""
        if self.kind in OUTCOME_KINDS:
            return "+".join(self.rules)
        if self.key is not None:
            return self.key
        return EVAL_KEYS if self.kind == "final" else REWARD_KEY

    @property
    def label(self) -> str:
        rules = " or ".join(self.rules)
        if self.kind == "collapse_rate":
            return f"share of runs {'stopped' if self.event == 'stop' else 'alerted'} by {rules}"
        if self.kind == "time_to_collapse":
            return f"steps to the first {rules} {self.event}"
        if self.kind == "alert_order":
            return f"{self.first} alert before {rules}"
        what = {
            "final": "final",
            "steps_to_kappa": "steps to κ",
            "compute_to_kappa": f"{self.compute} to κ",
            "jitter2": "Jitter2",
            "slope": "slope/step",
            "late_minus_early": "late − early",
            "mean": "mean",
            "asymptote": "asymptote A",
            "efficiency": "efficiency B",
        }[self.kind]
        if self.kind in SCALING_KINDS:
            what = f"{what} (fit on {self.compute})"
        return f"{what} of {self.resolved_key}" + (f" vs {self.versus_key}" if self.versus_key else "")


class ClaimAxis(_Strict):
    """`along:` the grid axis a trend claim takes the slope of arm − versus along."""

    axis: str = Field(..., min_length=1, description="a grid path of the sweep (e.g. rollout.G) with >= 2 numeric values")
    scale: Literal["linear", "log"] = Field(
        "linear",
        description="slope per unit of the axis value (linear) or per doubling of it (log: on log2 of the value, "
        "for an axis that grows by doubling such as G; values must be > 0)",
    )


class ClaimSpec(_Strict):
    """One testable claim: `direction` of (arm − versus) on `metric`, judged per comparison group."""

    id: str = Field(..., pattern=_NAME, description="short name, unique in the sweep file")
    source: str = Field(..., min_length=1, description="paper and section, e.g. '[D] §4.5 P3, eq. 22'")
    statement: str = Field(..., min_length=1, description="the claim in one line")
    metric: ClaimMetric = Field(..., description="what is compared per run: its kind (final, steps_to_kappa, jitter2, slope, ...) and options")
    direction: Direction = Field(
        ...,
        description=(
            "predicted sign of arm − versus (see MARGIN_DIRECTIONS); alert_order: higher = `first` alerts before the "
            "collapse in more than half of the collapsing runs"
        ),
    )
    arm: str | list[str] = Field(
        ..., description="the arm the claim is about; alert_order: one arm or a list whose runs are pooled"
    )
    versus: str | None = Field(
        None,
        description="the arm it is compared with (same comparison group, same seeds); required except for alert_order",
    )
    margin: float | None = Field(
        None, gt=0, description="not_higher / not_lower / similar: largest difference that counts as none, in metric units"
    )
    margin_rel: float | None = Field(
        None, gt=0, description="the same margin as a fraction of |versus arm's mean| in each group"
    )
    along: ClaimAxis | None = Field(
        None,
        description=(
            "judge the slope of arm − versus along this grid axis instead of arm − versus per group: direction "
            "(and margin, per unit or per doubling of the axis) then applies to the slope"
        ),
    )

    @model_validator(mode="after")
    def _consistent(self) -> ClaimSpec:
        kind = self.metric.kind
        if kind in OUTCOME_KINDS and self.direction not in ("higher", "lower"):
            raise ValueError(f"claim {self.id!r}: kind {kind!r} takes direction higher or lower, not {self.direction!r}")
        if self.along is not None and (kind in OUTCOME_KINDS or self.margin_rel is not None):
            raise ValueError(
                f"claim {self.id!r}: along takes a paired (curve) metric and an absolute margin: "
                + (f"kind {kind!r} compares runs unpaired" if kind in OUTCOME_KINDS else
                   "margin_rel is relative to a mean, which a slope has none of; give margin per axis unit")
            )
        if kind == "alert_order":
            if self.versus is not None:
                raise ValueError(f"claim {self.id!r}: alert_order compares rules within the runs of `arm`; drop versus")
            if isinstance(self.arm, list) and not self.arm:
                raise ValueError(f"claim {self.id!r}: arm lists no arm")
            return self
        if not isinstance(self.arm, str):
            raise ValueError(f"claim {self.id!r}: arm is one arm (a list of arms is for alert_order only)")
        if self.versus is None:
            raise ValueError(f"claim {self.id!r}: versus is required (the arm the claim compares with)")
        has_margin = (self.margin is not None) + (self.margin_rel is not None)
        if self.direction in MARGIN_DIRECTIONS and has_margin != 1:
            raise ValueError(
                f"claim {self.id!r}: direction {self.direction!r} needs exactly one of margin / margin_rel "
                "(the difference that counts as none)"
            )
        if self.direction not in MARGIN_DIRECTIONS and has_margin:
            raise ValueError(f"claim {self.id!r}: margin applies to {', '.join(MARGIN_DIRECTIONS)} only")
        if self.arm == self.versus and self.metric.versus_key is None:
            raise ValueError(f"claim {self.id!r}: arm and versus are both {self.arm!r}; give metric.versus_key")
        return self

    @property
    def arms(self) -> list[str]:
        """`arm` as a list (alert_order may pool several)."""
        return [self.arm] if isinstance(self.arm, str) else list(dict.fromkeys(self.arm))


def claims_arm_errors(claims: list[ClaimSpec], arms: list[str]) -> list[str]:
    """Why the claims do not fit the sweep's arms (and duplicate ids), one message per problem."""
    errors, seen = [], set()
    for index, claim in enumerate(claims):
        if claim.id in seen:
            errors.append(f"claims[{index}]: duplicate claim id {claim.id!r}")
        seen.add(claim.id)
        named = [("arm", name) for name in claim.arms] + ([("versus", claim.versus)] if claim.versus else [])
        for field, name in named:
            if name not in arms:
                errors.append(
                    f"claims[{index}] (claim {claim.id!r}): {field} {name!r} is not an arm (arms: {', '.join(arms)})"
                )
    return errors


def rules_off_by_arm(runs: Iterable[tuple[str, MonitorSpec]]) -> dict[str, set[str]]:
    """arm -> the monitor rules whose action is `off` in any of its runs, from (arm, monitor) pairs."""
    off: dict[str, set[str]] = {}
    for arm, monitor in runs:
        off.setdefault(arm, set()).update(rule for rule in get_args(RuleName) if getattr(monitor, rule).action == "off")
    return off


def rules_off_reason(claim: ClaimSpec, off_by_arm: Mapping[str, Collection[str]]) -> str:
    """Why an outcome claim cannot be judged: a rule it reads (its collapse rules, an alert order's
    `first`) is `off` in an arm it compares, so that arm's collapses are never seen and 0 of n would
    read as "never collapses". '' when every rule it reads is on, or the claim is not an outcome claim."""
    if claim.metric.kind not in OUTCOME_KINDS:
        return ""
    rules = claim.metric.rules + ([claim.metric.first] if claim.metric.first else [])
    arms = claim.arms + ([claim.versus] if claim.versus else [])
    off = [(rule, [arm for arm in arms if rule in off_by_arm.get(arm, ())]) for rule in rules]
    off = [(rule, where) for rule, where in off if where]
    if not off:
        return ""
    return "; ".join(f"rule {rule} is off in arm {', '.join(map(repr, where))} (monitor.{rule}.action: off): it never "
                     "alerts there" for rule, where in off)


def claims_rule_warnings(claims: list[ClaimSpec], off_by_arm: Mapping[str, Collection[str]]) -> list[str]:
    """One warning per outcome claim that cannot be judged because a rule it reads is off (`validate`)."""
    return [f"claim {claim.id!r} cannot be judged: {why}" for claim in claims if (why := rules_off_reason(claim, off_by_arm))]


def claims_axis_errors(claims: list[ClaimSpec], grid: dict[str, list], zip_axes: dict[str, list]) -> list[tuple[int, str]]:
    """(claim index, why) for each trend claim whose `along.axis` cannot carry a slope: not a grid
    axis (a zip axis moves with the other zip paths, so its slope would be theirs too), fewer than 2
    distinct values, a value that is not a number, or a value <= 0 on the log scale. Two values are
    enough: the slope is then the difference of the effects at them over the axis step."""
    errors = []
    for index, claim in enumerate(claims):
        if claim.along is None:
            continue
        axis, why = claim.along.axis, ""
        values = grid.get(axis)
        if axis in zip_axes:
            why = "is a zip axis: its values move with the other zip paths, so a slope along it is theirs too; put it in grid"
        elif values is None:
            why = f"is not a grid axis of this sweep (grid: {', '.join(grid) or 'none'})"
        elif not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            why = f"has values that are not numbers ({values}): a slope needs numeric axis values"
        elif len(set(values)) < 2:
            why = f"has {len(set(values))} distinct value: a slope needs at least 2"
        elif claim.along.scale == "log" and min(values) <= 0:
            why = f"has a value <= 0 ({min(values)}): scale log takes log2 of every value"
        if why:
            errors.append((index, f"claim {claim.id!r}: along.axis {axis!r} {why}"))
    return errors
