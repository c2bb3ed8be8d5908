"""Small lab runs for tests: a fast spec (short warm start, few steps, tiny batches) and a logger
that keeps every point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cancelctl.backends.lab import train
from cancelctl.spec.expand import deep_merge
from cancelctl.spec.experiment import ExperimentSpec
from cancelctl.spec.run import RunSpec, make_run
from cancelctl.tracking.runfiles import encode_metrics_line
from cancelctl.workdir import RunFolder

FAST: dict[str, Any] = {
    "backend": "lab",
    "executor": "debug",
    "model": {"path": "lab://tiny"},
    "rollout": {"G": 4, "precision": "bf16", "max_new_tokens": 16},
    "algorithm": {"loss": "grpo", "lr": 5e-4, "mini_batch_size": 2},
    "budget": {"steps": 4, "prompts_per_step": 4},
    "eval": {"every": 2, "k": 2, "prompts": 8},
    # the demo's warm start (one cached file per seed for the whole session)
    "lab": {"n_layers": 1, "d_model": 64, "max_operand": 9, "warmstart_steps": 600, "checkpoint_every": 2},
}


class ListLogger:
    def __init__(self) -> None:
        self.points: list[tuple[int, dict[str, float]]] = []
        self.flushes = 0

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.points.append((step, dict(metrics)))

    def flush(self, wait: bool = True) -> None:
        self.flushes += 1

    def steps(self) -> dict[int, dict[str, float]]:
        """Metrics by step (a step logged twice, e.g. replayed after a resume, keeps the last)."""
        return {step: metrics for step, metrics in self.points}


class JsonlLogger(ListLogger):
    """A ListLogger that also appends each point to the run folder's metrics.jsonl, as RunLogger does
    (what a later attempt reads to know which steps are logged)."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__()
        self.path = RunFolder(run_dir).metrics

    def log(self, step: int, metrics: dict[str, float]) -> None:
        super().log(step, metrics)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as handle:
            handle.write(encode_metrics_line(step, 0, metrics))


def lab_run(patch: dict[str, Any] | None = None, seed: int = 0) -> RunSpec:
    spec = ExperimentSpec.model_validate(deep_merge(FAST, patch or {}))
    return make_run("lab-test", "arm", {}, seed, spec, "")


def run_lab(run: RunSpec, run_dir: Path, cache_dir: Path) -> tuple[dict[str, float], ListLogger]:
    logger = ListLogger()
    final = train(run, run_dir, logger, cache_dir)
    return final, logger


def without_wall_clock(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if k != "compute/hours_cum"}
