"""The lab as a `Backend` (`cancelctl.backends.protocol`): the spec rules, estimates and entry the rest
of cancelctl asks for, each delegating to the lab's own module. Imports no torch (the spec imports it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cancelctl.backends.protocol import BaseBackend

if TYPE_CHECKING:
    from pathlib import Path

    from cancelctl.jobs.time_limit import StepCost
    from cancelctl.spec.experiment import ExperimentSpec
    from cancelctl.spec.run import RunSpec
    from cancelctl.tracking.logger import MetricLogger


class LabBackend(BaseBackend):
    name = "lab"
    default_lr = 5e-4  # an LLM's learning rate would leave the tiny lab policy frozen
    preloaded = True  # the local worker imports what a lab run does (`cancelctl.jobs.zygote.PRELOAD`)

    def max_new_tokens(self, spec: ExperimentSpec, cap: int) -> int:
        return min(cap, spec.lab.max_response_tokens)  # the task's answers fit; the policy's positions end there

    def check_spec(self, spec: ExperimentSpec) -> None:
        if spec.algorithm.verl_loss_mode is not None:
            raise ValueError(
                f"algorithm.verl_loss_mode ({spec.algorithm.verl_loss_mode}) names a loss of verl's registry; "
                "backend lab runs cancelctl's losses: use algorithm.loss"
            )
        if not spec.model.path.startswith("lab://"):
            raise ValueError("backend lab runs the built-in policy: model.path must be lab://tiny")

    def step_cost(self, run: RunSpec) -> StepCost:
        from cancelctl.backends.lab.step_cost import lab_step_cost

        return lab_step_cost(run)

    def workload_lines(self, run: RunSpec, run_dir: Path) -> list[str]:
        return ["# the lab backend trains in the rank-0 process itself (cancelctl.backends.lab.train)"]

    def train(self, run: RunSpec, run_dir: Path, logger: MetricLogger, cache_dir: Path) -> dict[str, float]:
        from cancelctl.backends.lab.train import train

        return train(run, run_dir, logger, cache_dir)
