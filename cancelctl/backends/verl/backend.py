"""verl as a `Backend` (`cancelctl.backends.protocol`): each part delegates to the verl backend's own
module, imported when asked (this module is imported when a spec names verl: it imports no verl)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cancelctl.backends.protocol import BaseBackend, PlanColumns

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from cancelctl.backends.protocol import FileResult, ValidateOptions, ValidationStatus
    from cancelctl.jobs.time_limit import StepCost
    from cancelctl.spec.expand import Sweep
    from cancelctl.spec.experiment import ExperimentSpec
    from cancelctl.spec.run import RunSpec
    from cancelctl.tracking.logger import MetricLogger


class VerlBackend(BaseBackend):
    name = "verl"
    default_lr = 1e-6

    def check_spec(self, spec: ExperimentSpec) -> None:
        if not spec.data.train_files:
            raise ValueError("backend verl needs data.train_files (parquet files of prompts)")
        if spec.model.path.startswith("lab://"):
            raise ValueError("backend verl needs model.path to be a HF model id or directory, not lab://")

    def validate_warnings(self, runs: list[RunSpec]) -> list[str]:
        from cancelctl.backends.verl.validation import builtin_loss_warnings

        return builtin_loss_warnings(runs)

    def validate_files(self, results: list[FileResult], sweeps: dict[Path, Sweep], runs: dict[Path, list[RunSpec]],
                       options: ValidateOptions, progress: Callable[[str], None] | None) -> ValidationStatus:
        """Composed against verl's installed Hydra config, the data files verl reads, the prompts kept
        under max_prompt_length, per-GPU memory (`verl.validation`)."""
        from cancelctl.backends.verl.validation import validate_files

        return validate_files(results, sweeps, runs, options, progress)

    def launch_refusals(self, run: RunSpec) -> list[str]:
        from cancelctl.backends.verl.planning import launch_refusals

        return launch_refusals(run)

    def plan_columns(self, runs: list[RunSpec]) -> PlanColumns:
        """Each GPU run's memory estimate per GPU (`memory_check`, where the model's config.json is on this
        machine) and the prompts verl keeps under max_prompt_length (`prompt_lengths`, where the data and
        the tokenizer are)."""
        from cancelctl.backends.verl.memory_check import estimate_runs
        from cancelctl.backends.verl.prompt_lengths import measure_runs

        memory, memory_skipped = estimate_runs(runs)
        checks, lengths_skipped = measure_runs(runs)
        lengths = {run_id: [c.to_json() for c in found] for run_id, found in checks.items()}
        return PlanColumns(memory, memory_skipped, lengths, lengths_skipped)

    def step_cost(self, run: RunSpec) -> StepCost | None:
        from cancelctl.backends.verl.step_cost import step_cost

        return step_cost(run)

    def workload_lines(self, run: RunSpec, run_dir: Path) -> list[str]:
        from cancelctl.backends.verl import format_command
        from cancelctl.backends.verl.command import job_command
        from cancelctl.backends.verl.cpu.render import job_env

        return [format_command(job_command(run, run_dir), job_env(run))]

    def rendered_run(self, run: RunSpec) -> str:
        """verl's command with its environment."""
        from cancelctl.backends.verl import format_command, render_command
        from cancelctl.backends.verl.cpu.render import job_env

        return format_command(render_command(run), job_env(run))

    def render_notes(self, run: RunSpec) -> list[str]:
        """verl's rollout precision on this machine's CPU."""
        from cancelctl.backends.verl.render import rollout_precision_note
        from cancelctl.jobs.hardware import cpu_flags

        note = rollout_precision_note(run, cpu_flags())
        return [note] if note else []

    def smoke_checked(self, run: RunSpec) -> bool:
        return True  # a verl configuration fails only once its job holds GPUs: smoke runs it on CPU first

    def train(self, run: RunSpec, run_dir: Path, logger: MetricLogger, cache_dir: Path) -> dict[str, float]:
        from cancelctl.backends.verl.supervisor import train

        return train(run, run_dir, logger, cache_dir)
