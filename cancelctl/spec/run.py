"""One run of a sweep: `RunSpec`, its resolved spec, seed and stable run id, and the compute it plans.

The run id is a hash of the resolved spec and seed without the fields that say where and how it
executes (`EXECUTION_FIELDS`): the same science moved from a laptop to SLURM keeps its id, and a
run is never run twice. The compute a run plans is what the compute-matched protocol compares
[D §4.5]: generated-token budget, update steps and G.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from cancelctl.spec.experiment import ExperimentSpec

# Fields that say where/how a run executes, not what it computes: excluded from the run id so the
# same science moved from the laptop to SLURM keeps its id (and is never run twice); the monitor's
# alert rules are operations too (tightening a threshold is not a new experiment).
EXECUTION_FIELDS = ("executor", "cluster", "tracking", "monitor")


@dataclass(frozen=True)
class RunSpec:
    sweep: str
    arm: str
    axes: dict[str, Any]
    seed: int
    spec: ExperimentSpec
    run_id: str
    name: str
    group: str
    spec_hash: str

    @property
    def G(self) -> int:
        return self.spec.rollout.G

    def planned_compute(self) -> dict[str, int]:
        return planned_compute(self.spec)

    def to_json(self) -> dict[str, Any]:
        return {
            "sweep": self.sweep,
            "arm": self.arm,
            "axes": self.axes,
            "seed": self.seed,
            "run_id": self.run_id,
            "name": self.name,
            "group": self.group,
            "spec_hash": self.spec_hash,
            "spec": self.spec.model_dump(mode="json"),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSpec:
        fields = {k: v for k, v in data.items() if k != "spec"}
        return cls(spec=ExperimentSpec.model_validate(data["spec"]), **fields)


def updates_per_step(spec: ExperimentSpec) -> int:
    """Optimizer steps per training step: ppo_epochs × mini-batches (one optimizer step each)."""
    return spec.algorithm.ppo_epochs * (spec.budget.prompts_per_step // spec.mini_batch_prompts)


def max_step_tokens(spec: ExperimentSpec) -> int:
    """The most tokens one training step generates once: every rollout at the response cap."""
    return spec.budget.prompts_per_step * spec.rollout.G * spec.max_new_tokens


def planned_steps(spec: ExperimentSpec) -> int | None:
    """Training steps the budget runs, when known before the run: a step budget, or an update-step
    budget (a fixed number of optimizer steps per step); None for a generated-token budget."""
    budget = spec.budget
    if budget.update_steps is not None:
        return -(-budget.update_steps // updates_per_step(spec))
    return budget.steps


def planned_compute(spec: ExperimentSpec) -> dict[str, int | None]:
    """Budget the compute-matched protocol compares [D §4.5]: generated-token budget, updates, G.

    Step and update-step budgets: tokens are one generation round a step with every response at the
    cap. A token budget: the budget itself (a run ends at the first step reaching it, so it overshoots
    by less than its last step's tokens) and update steps unknown (None) until the run ends."""
    steps = planned_steps(spec)
    return {
        "G": spec.rollout.G,
        "gen_tokens": spec.budget.gen_tokens if steps is None else steps * max_step_tokens(spec),
        "update_steps": None if steps is None else steps * updates_per_step(spec),
    }


def make_run(sweep: str, arm: str, axes: dict[str, Any], seed: int, spec: ExperimentSpec, group: str) -> RunSpec:
    spec = spec.model_copy(update={"seed": seed})
    science = spec.model_dump(mode="json", exclude=set(EXECUTION_FIELDS))
    spec_hash = hashlib.sha256(json.dumps(science, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return RunSpec(
        sweep=sweep,
        arm=arm,
        axes=dict(axes),
        seed=seed,
        spec=spec,
        run_id=spec_hash[:12],
        name=run_name(arm, axes, seed),
        group=group,
        spec_hash=spec_hash,
    )


def run_name(arm: str, axes: dict[str, Any], seed: int) -> str:
    shorts = [p.rsplit(".", 1)[-1] for p in axes]
    clash = len(set(shorts)) != len(shorts)
    parts = [arm] + [f"{p if clash else s}={_fmt(v)}" for (p, v), s in zip(axes.items(), shorts)] + [f"s{seed}"]
    return "-".join(parts)


def group_label(axes: dict[str, Any]) -> str:
    return ",".join(f"{p}={_fmt(v)}" for p, v in axes.items())


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)
