"""`cancelctl plan`'s rows, one builder for its table and its `--json`: each run with its planned
compute, the allocations of `cluster.time_min` a SLURM run is expected to need, and what its backend
adds — a GPU verl run's memory estimate per GPU (where the model's config.json is on this machine) and
the prompts verl keeps under max_prompt_length (where the data and the tokenizer are). The lab adds
nothing: it runs on this machine's CPU. The CLI only formats these rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from cancelctl.spec.batching import minibatch_order

if TYPE_CHECKING:
    from cancelctl.jobs.time_limit import TimeLimitPlan
    from cancelctl.spec.expand import Sweep
    from cancelctl.spec.run import RunSpec

# how a cell reads: as it is, a warning, or a refusal
Level = Literal["", "warn", "refused"]


@dataclass
class PlanRow:
    run: RunSpec
    time_limit: TimeLimitPlan | None = None
    gpu_memory: Any = None  # backends.verl.memory_check.MemoryCheck
    prompt_lengths: list[dict] | None = None  # backends.verl.prompt_lengths' checks, as JSON

    def to_json(self) -> dict[str, Any]:
        r = self.run
        return {
            "name": r.name,
            "arm": r.arm,
            "axes": r.axes,
            "seed": r.seed,
            "run_id": r.run_id,
            "group": r.group,
            "backend": r.spec.backend,
            "executor": r.spec.executor,
            "clip_low": r.spec.algorithm.clip_low,
            "clip_high": r.spec.algorithm.clip_high,
            "batching": r.spec.batching.strategy,
            "minibatch_order": minibatch_order(r.spec),  # what the update does, the same on every backend
            "budget_axis": r.spec.budget.axis,
            "budget": r.spec.budget.amount,
            **{f"planned_{k}": v for k, v in r.planned_compute().items()},
            "prompt_lengths": self.prompt_lengths,
            "gpu_memory": self.gpu_memory.to_json() if self.gpu_memory is not None else None,
            "time_limit": self.time_limit.to_json() if self.time_limit is not None else None,
        }

    def memory_cell(self) -> tuple[str, Level]:
        if self.gpu_memory is None:
            return "-", ""
        return self.gpu_memory.note(), "refused" if self.gpu_memory.problem else ""

    def prompts_cell(self) -> tuple[str, Level]:
        """"train 16,837/17,398 · val 38/38": prompts verl keeps under max_prompt_length, of those in the files."""
        from cancelctl.backends.verl.prompt_lengths import TRAIN

        checks = self.prompt_lengths
        if not checks:
            return "-", ""
        text = " · ".join(f"{'train' if c['field'] == TRAIN else 'val'} {c['kept']:,}/{c['prompts']:,}" for c in checks)
        return text, "refused" if any(c["refused"] for c in checks) else ("warn" if any(c["dropped"] for c in checks) else "")


@dataclass
class PlanRows:
    rows: list[PlanRow]
    has_time_limits: bool = False
    has_gpu_memory: bool = False
    has_prompt_lengths: bool = False
    prompt_lengths_skipped: str = ""  # why they were not measured, where the data or tokenizer is elsewhere
    gpu_memory_skipped: str = ""


def plan_rows(sweep: Sweep) -> PlanRows:
    """Every run of the sweep as a plan row, with its backend's columns."""
    from cancelctl.executors.registry import get_executor
    from cancelctl.jobs.time_limit import time_limit_plan

    limits = {r.run_id: time_limit_plan(r) for r in sweep.runs if get_executor(r.spec.executor).has_time_limit}
    memory, memory_skipped = _gpu_memory(sweep.runs)
    lengths, lengths_skipped = _prompt_lengths(sweep.runs)
    rows = [PlanRow(r, limits.get(r.run_id), memory.get(r.run_id), lengths.get(r.run_id)) for r in sweep.runs]
    return PlanRows(rows, has_time_limits=bool(limits), has_gpu_memory=bool(memory), has_prompt_lengths=bool(lengths),
                    prompt_lengths_skipped=lengths_skipped, gpu_memory_skipped=memory_skipped)


def _verl_runs(runs: list[RunSpec]) -> list[RunSpec]:
    return [r for r in runs if r.spec.backend == "verl"]


def _prompt_lengths(runs: list[RunSpec]) -> tuple[dict[str, list[dict]], str]:
    """Each verl run's prompt counts under max_prompt_length (backends.verl.prompt_lengths), and why
    they were not measured, where the data or the tokenizer is not on this machine."""
    if not _verl_runs(runs):
        return {}, ""
    from cancelctl.backends.verl.prompt_lengths import measure_runs

    checks, skipped = measure_runs(runs)
    return {run_id: [c.to_json() for c in found] for run_id, found in checks.items()}, skipped


def _gpu_memory(runs: list[RunSpec]) -> tuple[dict, str]:
    """Each GPU verl run's memory estimate (backends.verl.memory_check), and why it was not estimated."""
    if not _verl_runs(runs):
        return {}, ""  # the lab runs on this machine's CPU: no GPU memory
    from cancelctl.backends.verl.memory_check import estimate_runs

    return estimate_runs(runs)
