"""The tiny verl world both conformance smokes run (test_smoke_conformance.py on hf_cpu, test_smoke_vllm.py on
verl's vLLM): its model, data and a reward that tells answers apart, the base of their sweep file, and the
gate's figures read back from the smoke table."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "verl"))
from tiny_verl import TinyVerl, build_tiny_verl  # noqa: E402

# a reward that tells any two answers apart, so a group's rewards differ and step 1's update is never empty
# (with equal rewards every advantage is 0, the weights stay, and a stale sync could not show in step 2's
# log-probs; the tiny world's own reward scores most random answers 0)
DISTINCT_REWARD = """\
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return (sum(map(ord, solution_str)) % 101) / 100
"""
FIGURES = re.compile(r"\|Δ log π\| mean (\S+) p99 (\S+) max (\S+), ρ std (\S+) max (\S+)")


def tiny_world(folder: Path) -> TinyVerl:
    tiny = build_tiny_verl(folder, steps=2)
    tiny.reward.write_text(DISTINCT_REWARD)
    return tiny


def base_spec(tiny: TinyVerl, rollout: dict[str, Any]) -> dict[str, Any]:
    """The sweep's `base`: one fp32 local CPU run of the tiny world, with `rollout` (G 4 unless it says)."""
    return {
        "backend": "verl", "executor": "local",
        "model": {"path": str(tiny.model), "dtype": "fp32"},
        "data": {"train_files": [str(tiny.train)], "val_files": [str(tiny.val)], "max_prompt_length": 128,
                 "max_response_length": 16, "reward_function": f"{tiny.reward}:{tiny.reward_name}"},
        # a step that visibly moves the tiny policy: what the rollout must then follow
        "algorithm": {"mini_batch_size": 4, "micro_batch_size_per_gpu": 4, "lr": 1e-3},
        "rollout": {"G": 4, **rollout},
        "budget": {"steps": 10, "prompts_per_step": 8},
        "eval": {"every": 5, "k": 1},
        "cluster": {"partition": "cpu", "device": "cpu"},
    }


def figures(row: str) -> list[float]:
    """|Δ log π| mean, p99, max and ρ std, max of a smoke table row."""
    found = FIGURES.search(row)
    assert found, row
    return [float(x) for x in found.groups()]
