"""The sweep file itself: `SweepSpec`, a `base` spec, named `arms` (patches on base), optional `grid`
/ `zip` axes over dotted paths, `seeds`, the `baseline` arm and the papers' `claims`. Its expansion
into runs is `cancelctl.spec.expand`."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from cancelctl.names import MAX_NAME_LENGTH, SWEEP_NAME, name_problem
from cancelctl.spec.claims import ClaimSpec, claims_arm_errors
from cancelctl.spec.experiment import MAX_SEED
from cancelctl.spec.strict import Strict

# Refused before expansion: a sweep this large is a typo (a grid axis too many), not an experiment.
MAX_RUNS = 20_000


def _a_name(name: str) -> str:
    # the rule every verb applies to a sweep name (`cancelctl.names`): validate passes what sweep runs
    problem = name_problem(name)
    if problem is not None:
        raise PydanticCustomError("sweep_name", "sweep name {problem}", {"problem": problem})
    return name


class SweepSpec(Strict):
    """The YAML file. Arms are patches (nested mappings) applied on `base`."""

    name: Annotated[str, AfterValidator(_a_name)] = Field(
        ...,
        json_schema_extra={"pattern": SWEEP_NAME.pattern, "maxLength": MAX_NAME_LENGTH},
        description="the sweep's name: its folder in the work dir and, by default, its MLflow experiment",
    )
    description: str = Field("", description="free text on what the sweep is for")
    base: dict[str, Any] = Field(default_factory=dict, description="an ExperimentSpec (partial)")
    arms: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {"default": {}}, description="arm name -> patch on base"
    )
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="dotted path -> values (cartesian)")
    zip: dict[str, list[Any]] = Field(default_factory=dict, description="dotted paths -> paired value lists")
    seeds: list[Annotated[int, Field(ge=0, le=MAX_SEED)]] = Field(
        default_factory=lambda: [0], min_length=1, description="the seeds every arm runs at every grid point"
    )
    baseline: str | None = Field(None, description="the arm the report compares the others with (report --baseline overrides it)")
    claims: list[ClaimSpec] = Field(
        default_factory=list, description="the papers' testable claims this sweep can judge (cancelctl.verdicts)"
    )

    @field_validator("claims")
    @classmethod
    def _claims_name_arms(cls, claims: list[ClaimSpec], info: ValidationInfo) -> list[ClaimSpec]:
        if "arms" in info.data:  # absent when the arms themselves failed validation
            errors = claims_arm_errors(claims, list(info.data["arms"]))
            if errors:
                raise ValueError("; ".join(errors))
        return claims

    @field_validator("arms")
    @classmethod
    def _arm_names(cls, arms: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        if not arms:
            raise ValueError("at least one arm is needed")
        for name in arms:
            problem = name_problem(name)
            if problem is not None:
                raise ValueError(f"arm name {name!r} {problem}")
        return arms

    @field_validator("grid", "zip")
    @classmethod
    def _non_empty_axes(cls, axes: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for path, values in axes.items():
            if not values:
                raise ValueError(f"axis {path!r} has no values")
        return axes

    # Cross-field checks are field validators (fields validate in declaration order), so an error
    # points at the field's line in the file rather than at 1:1.
    @field_validator("zip")
    @classmethod
    def _zip_axes(cls, axes: dict[str, list[Any]], info: ValidationInfo) -> dict[str, list[Any]]:
        lengths = {len(v) for v in axes.values()}
        if len(lengths) > 1:
            raise ValueError(f"zip lists must have equal lengths, got {sorted(lengths)}")
        both = set(info.data.get("grid") or {}) & set(axes)
        if both:
            raise ValueError(f"paths both in grid and zip: {sorted(both)}")
        return axes

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int], info: ValidationInfo) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError("seeds contain duplicates")
        return seeds

    @field_validator("baseline")
    @classmethod
    def _baseline_is_an_arm(cls, baseline: str | None, info: ValidationInfo) -> str | None:
        arms = info.data.get("arms")
        if baseline is not None and arms is not None and baseline not in arms:
            raise ValueError(f"baseline {baseline!r} is not an arm (arms: {', '.join(arms)})")
        return baseline

    @model_validator(mode="after")
    def _bounded(self) -> SweepSpec:
        runs = self.n_runs
        if runs > MAX_RUNS:
            axes = " x ".join(
                [f"{len(self.arms)} arms"]
                + [f"{len(v)} {path}" for path, v in self.grid.items()]
                + ([f"{len(next(iter(self.zip.values())))} zip points"] if self.zip else [])
                + [f"{len(self.seeds)} seeds"]
            )
            raise ValueError(f"the sweep expands to {runs:,} runs ({axes}); the limit is {MAX_RUNS:,}")
        return self

    @property
    def n_runs(self) -> int:
        """Runs this sweep expands to, computed without expanding it."""
        runs = len(self.arms) * len(self.seeds)
        for values in self.grid.values():
            runs *= len(values)
        if self.zip:
            runs *= len(next(iter(self.zip.values())))
        return runs
