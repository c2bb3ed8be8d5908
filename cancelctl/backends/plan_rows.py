"""`cancelctl plan`'s rows, one builder for its table and its `--json`: each run with its planned
compute, the allocations of `cluster.time_min` a SLURM run is expected to need, and what its backend
adds (`Backend.plan_columns`) — a GPU verl run's memory estimate per GPU (where the model's
config.json is on this machine) and the prompts verl keeps under max_prompt_length (where the data
and the tokenizer are). The lab adds nothing: it runs on this machine's CPU. The CLI only formats
these rows; neither knows a backend by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from cancelctl.backends.protocol import PlanColumns
from cancelctl.backends.registry import get_backend
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
    gpu_memory: Any = None  # a backend's memory check: note(), problem, to_json()
    prompt_lengths: list[dict] | None = None  # a backend's prompt-length checks, as JSON

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
        """"train 16,837/17,398 · val 38/38": prompts kept under max_prompt_length, of those in the files
        (each check's field, data.train_files or data.val_files, named by its middle word)."""
        checks = self.prompt_lengths
        if not checks:
            return "-", ""
        text = " · ".join(f"{_files_label(c['field'])} {c['kept']:,}/{c['prompts']:,}" for c in checks)
        return text, "refused" if any(c["refused"] for c in checks) else ("warn" if any(c["dropped"] for c in checks) else "")


@dataclass
class PlanRows:
    rows: list[PlanRow]
    has_time_limits: bool = False
    has_gpu_memory: bool = False
    has_prompt_lengths: bool = False
    prompt_lengths_skipped: str = ""  # why they were not measured, where the data or tokenizer is elsewhere
    gpu_memory_skipped: str = ""


def _files_label(field: str) -> str:
    """"data.train_files" -> "train"."""
    return field.rsplit(".", 1)[-1].removesuffix("_files")


def plan_rows(sweep: Sweep) -> PlanRows:
    """Every run of the sweep as a plan row, with its backend's columns."""
    from cancelctl.executors.registry import get_executor
    from cancelctl.jobs.time_limit import time_limit_plan

    limits = {r.run_id: time_limit_plan(r) for r in sweep.runs if get_executor(r.spec.executor).has_time_limit}
    columns = backend_columns(sweep.runs)
    memory, lengths = columns.gpu_memory, columns.prompt_lengths
    rows = [PlanRow(r, limits.get(r.run_id), memory.get(r.run_id), lengths.get(r.run_id)) for r in sweep.runs]
    return PlanRows(rows, has_time_limits=bool(limits), has_gpu_memory=bool(memory), has_prompt_lengths=bool(lengths),
                    prompt_lengths_skipped=columns.prompt_lengths_skipped, gpu_memory_skipped=columns.gpu_memory_skipped)


def backend_columns(runs: list[RunSpec]) -> PlanColumns:
    """Each backend's columns for its runs, merged; a reason a column was skipped is said once."""
    by_backend: dict[str, list[RunSpec]] = {}
    for run in runs:
        by_backend.setdefault(run.spec.backend, []).append(run)
    merged = PlanColumns()
    for name, of in by_backend.items():
        columns = get_backend(name).plan_columns(of)
        merged.gpu_memory.update(columns.gpu_memory)
        merged.prompt_lengths.update(columns.prompt_lengths)
        merged.gpu_memory_skipped = merged.gpu_memory_skipped or columns.gpu_memory_skipped
        merged.prompt_lengths_skipped = merged.prompt_lengths_skipped or columns.prompt_lengths_skipped
    return merged

