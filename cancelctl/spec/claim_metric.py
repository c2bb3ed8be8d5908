"""The per-run number a claim compares (`metric:` of a claim), one model per `kind`: a union
discriminated on `kind`, so each kind takes exactly its own fields (anything else is an unknown
field) and the JSON Schema and the spec reference list them per kind.

Curve kinds read one logged key per run: the last value (`final`, [D eq. 22]), the first step or
cumulative compute where it reaches κ ([D eq. 19, Table 2]), its second-difference jitter ([D eq.
20]), slope ([H §2]), late − early, mean, or a parameter of ScaleRL's compute–performance curve fitted
per run (`cancelctl.stats.scaling`). Outcome kinds read the monitor's alerts instead: how often an
arm's runs collapse (a named rule alerted or stopped them), how soon, and whether one rule alerts
before another ([H] App. D); `cancelctl.stats.outcomes`.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, get_args

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from cancelctl.spec.metric_keys import REWARD_KEY, ComputeAxis
from cancelctl.spec.monitor import RuleName
from cancelctl.spec.strict import Strict

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

_RULE_SCHEMA = {"enum": list(get_args(RuleName))}
# one rule or a list of them; read as a list, so a misspelt rule is one error naming the choices
RuleNames = Annotated[
    list[RuleName],
    BeforeValidator(lambda value: [value] if isinstance(value, str) else value),
    WithJsonSchema({"anyOf": [_RULE_SCHEMA, {"type": "array", "items": _RULE_SCHEMA, "minItems": 1}]}),
    Field(min_length=1),
]

# the words of a curve kind's label ("steps to κ of critic/score/mean")
_NOUNS = {
    "final": "final", "steps_to_kappa": "steps to κ", "jitter2": "Jitter2", "slope": "slope/step",
    "late_minus_early": "late − early", "mean": "mean", "asymptote": "asymptote A", "efficiency": "efficiency B",
}


def _compute_field():
    return Field("tokens", description="the compute axis: generated tokens, optimizer updates or wall-clock hours")


class _Metric(Strict):
    kind: MetricKind = Field(..., description="what is read from each run")

    @property
    def rules(self) -> list[str]:
        """The collapse rule(s) of an outcome kind, as a list (empty for curve kinds)."""
        return []

    @property
    def resolved_key(self) -> str:
        raise NotImplementedError

    @property
    def label(self) -> str:
        raise NotImplementedError


class CurveMetric(_Metric):
    # the key read when `key` is not given; None: `key` is required
    default_key: ClassVar[str | None] = REWARD_KEY

    key: str | None = Field(
        None,
        description=(
            f"metric key; '*' globs give one verdict per matching key, '{LAST}' the highest logged integer. "
            f"Default: {EVAL_KEYS} for final, {REWARD_KEY} for steps/compute to kappa, jitter2, asymptote and "
            "efficiency; required for slope, late_minus_early and mean"
        ),
    )
    versus_key: str | None = Field(
        None, description="read this key on the versus side instead of `key` (e.g. cancel/flip_neg vs cancel/flip_pos)"
    )

    @model_validator(mode="after")
    def _keys(self) -> CurveMetric:
        if self.key is None and self.default_key is None:
            raise ValueError(f"metric.key is required for kind {self.kind!r}")
        if self.versus_key is not None and "*" in self.resolved_key:
            raise ValueError("metric.versus_key cannot be combined with a '*' pattern in metric.key")
        return self

    @property
    def resolved_key(self) -> str:
        """`key`, or the kind's default."""
        return self.key if self.key is not None else str(self.default_key)

    @property
    def noun(self) -> str:
        return _NOUNS[self.kind]

    @property
    def label(self) -> str:
        return f"{self.noun} of {self.resolved_key}" + (f" vs {self.versus_key}" if self.versus_key else "")


class FinalMetric(CurveMetric):
    """final: the last logged value (an eval score) [D eq. 22]; every eval benchmark by default."""

    default_key: ClassVar[str | None] = EVAL_KEYS
    kind: Literal["final"] = Field(description="the last logged value")


class StepsToKappaMetric(CurveMetric):
    """steps_to_kappa: the first step where `key` reaches κ [D eq. 19, Table 2]."""

    kind: Literal["steps_to_kappa"] = Field(description="the first step at κ")
    kappa: float | None = Field(None, description="the threshold κ; default: the report's kappa")
    smooth_window: int = Field(1, ge=1, description="trailing mean over this many points before the crossing")


class ComputeToKappaMetric(StepsToKappaMetric):
    """compute_to_kappa: the cumulative compute where `key` reaches κ [D eq. 19, Table 2]."""

    kind: Literal["compute_to_kappa"] = Field(description="the cumulative compute at κ")  # type: ignore[assignment]
    compute: ComputeAxis = _compute_field()

    @property
    def noun(self) -> str:
        return f"{self.compute} to κ"


class CurveShapeMetric(CurveMetric):
    """jitter2: second-difference jitter of the curve [D eq. 20] (the reward by default); slope:
    least-squares slope per step [H §2]; mean: mean over logged steps (these two need `key`)."""

    kind: Literal["jitter2", "slope", "mean"] = Field(description="a statistic of the whole curve")

    @property
    def default_key(self) -> str | None:  # type: ignore[override]
        return REWARD_KEY if self.kind == "jitter2" else None


class LateMinusEarlyMetric(CurveMetric):
    """late_minus_early: mean of the last `window` of the curve minus mean of the first."""

    default_key: ClassVar[str | None] = None
    kind: Literal["late_minus_early"] = Field(description="the late mean minus the early mean")
    window: float = Field(0.25, gt=0, le=0.5, description="fraction of the curve at each end")


class ScalingMetric(CurveMetric):
    """asymptote / efficiency: A / B of ScaleRL's curve R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)
    fitted to `key` against cumulative `compute` per run [ScaleRL, arXiv 2510.13786]."""

    kind: Literal["asymptote", "efficiency"] = Field(description="a parameter of the run's compute-scaling fit")
    compute: ComputeAxis = _compute_field()

    @property
    def label(self) -> str:
        return f"{self.noun} (fit on {self.compute}) of {self.resolved_key}" + (
            f" vs {self.versus_key}" if self.versus_key else "")


class OutcomeMetric(_Metric):
    rule: RuleNames = Field(
        ...,
        description="the monitor rule(s) (spec `monitor:`) whose first alert is the run's collapse; a list: the first "
        "alert of any of them",
    )

    @property
    def rules(self) -> list[str]:
        return list(dict.fromkeys(self.rule))

    @property
    def read_rules(self) -> list[str]:
        """Every rule the claim reads (an alert order's `first` too)."""
        return self.rules

    @property
    def resolved_key(self) -> str:
        """The rule name(s), '+'-joined."""
        return "+".join(self.rules)


class CollapseMetric(OutcomeMetric):
    """collapse_rate: the share of an arm's runs that collapse; time_to_collapse: the steps to the
    collapse (a run that never collapses is censored at its last step)."""

    kind: Literal["collapse_rate", "time_to_collapse"] = Field(description="how often or how soon runs collapse")
    event: Literal["alert", "stop"] = Field(
        "alert",
        description="a run collapses at the rule's first alert (warn or stop), or only where the rule stopped it",
    )

    @property
    def label(self) -> str:
        rules = " or ".join(self.rules)
        if self.kind == "collapse_rate":
            return f"share of runs {'stopped' if self.event == 'stop' else 'alerted'} by {rules}"
        return f"steps to the first {rules} {self.event}"


class AlertOrderMetric(OutcomeMetric):
    """alert_order: whether `first` alerts before the collapse rule(s) in the runs that collapse
    ([H] App. D: mismatch grows before entropy and reward collapse)."""

    kind: Literal["alert_order"] = Field(description="which rule alerts first")
    first: RuleName = Field(
        ..., description="the rule predicted to alert before the collapse (e.g. mismatch_growth [H App. D])"
    )

    @model_validator(mode="after")
    def _two_rules(self) -> AlertOrderMetric:
        if self.first in self.rules:
            raise ValueError(f"metric.first {self.first!r} is also in metric.rule: an order needs two different rules")
        return self

    @property
    def read_rules(self) -> list[str]:
        return [*self.rules, self.first]

    @property
    def label(self) -> str:
        return f"{self.first} alert before {' or '.join(self.rules)}"


ClaimMetric = Annotated[
    FinalMetric | StepsToKappaMetric | ComputeToKappaMetric | CurveShapeMetric | LateMinusEarlyMetric
    | ScalingMetric | CollapseMetric | AlertOrderMetric,
    Field(discriminator="kind"),
]
