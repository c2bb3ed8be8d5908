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
from typing import Literal, get_args

from pydantic import Field, model_validator

from cancelctl.spec.claim_metric import OUTCOME_KINDS, ClaimMetric, OutcomeMetric
from cancelctl.spec.directions import MARGIN_DIRECTIONS, Direction
from cancelctl.spec.monitor import MonitorSpec, RuleName
from cancelctl.spec.strict import Strict

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class ClaimAxis(Strict):
    """`along:` the grid axis a trend claim takes the slope of arm − versus along."""

    axis: str = Field(..., min_length=1, description="a grid path of the sweep (e.g. rollout.G) with >= 2 numeric values")
    scale: Literal["linear", "log"] = Field(
        "linear",
        description="slope per unit of the axis value (linear) or per doubling of it (log: on log2 of the value, "
        "for an axis that grows by doubling such as G; values must be > 0)",
    )


class ClaimSpec(Strict):
    """One testable claim: `direction` of (arm − versus) on `metric`, judged per comparison group."""

    id: str = Field(..., pattern=_NAME, description="short name, unique in the sweep file")
    source: str = Field(..., min_length=1, description="paper and section, e.g. '[D] §4.5 P3, eq. 22'")
    statement: str = Field(..., min_length=1, description="the claim in one line")
    metric: ClaimMetric = Field(..., description="the per-run number compared; each kind takes its own fields")
    direction: Direction = Field(
        ...,
        description=(
            "predicted sign of arm − versus; not_higher / not_lower / similar within `margin` or `margin_rel`; alert_order: higher = `first` alerts before the "
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
    if not isinstance(claim.metric, OutcomeMetric):
        return ""
    rules = claim.metric.read_rules
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
