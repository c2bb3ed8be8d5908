"""A verl run's step, checkpoint write and start-up in seconds, for its time limit's plan
(`cancelctl.jobs.time_limit`), from the model's shape (`model_shape`, as the memory estimate reads it)
and the step's tokens. Conservative on purpose: an A100's bf16 peak at low utilisation, every response
at the cap, 1 GB/s a node to the checkpoint's file system. None where the model's config.json is not on
this machine (the job then gets submitit's 90 s lead and its default time-out count).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cancelctl.backends.verl.model_shape import MemorySkipped, ModelShape, model_shape
from cancelctl.jobs.time_limit import SUBMITIT_LEAD_S, StepCost

if TYPE_CHECKING:
    from cancelctl.spec.run import RunSpec

GPU_FLOPS = 312e12  # an A100's dense bf16 peak (an H100 is faster: the estimate errs slow)
TRAIN_UTILISATION = 0.25  # of the peak in the log-prob passes and the update
ROLLOUT_UTILISATION = 0.05  # decoding is memory-bound
CPU_CORE_FLOPS = 2e10  # cluster.device cpu: verl's loop on CPU cores
STEP_OVERHEAD_S = 20.0  # weight sync to the rollout engine, batching, metrics
NODE_DISK_BYTES_S = 1e9  # one node's write (and read) rate to the checkpoint's shared file system
CHECKPOINT_OVERHEAD_S = 10.0  # barriers, metadata, the tracker file
STARTUP_S = 180.0  # Ray, the workers, the rollout engine's start (CUDA graphs), before loading weights
CHECKPOINT_BYTES_PER_PARAM = {"adamw": 12, "adam": 12, "sgd": 4}  # fp32 weights + the optimizer's fp32 moments


def active_params(shape: ModelShape) -> float:
    """Parameters a token passes through: an MoE's routed experts count by top-k over experts."""
    if shape.experts <= 1:
        return float(shape.params)
    return shape.params - shape.expert_params * (1 - shape.experts_per_token / shape.experts)


def step_cost(run: RunSpec) -> StepCost | None:
    try:
        shape = model_shape(run.spec.model.path)
    except MemorySkipped:
        return None
    return step_cost_of(run, shape)


def step_cost_of(run: RunSpec, shape: ModelShape) -> StepCost:
    spec, cluster = run.spec, run.spec.cluster
    if cluster.device == "cpu":
        rate = CPU_CORE_FLOPS * cluster.cpus_per_task * cluster.nodes
        train_rate = rollout_rate = rate
    else:
        rate = GPU_FLOPS * max(1, cluster.gpus_per_node) * cluster.nodes
        train_rate, rollout_rate = rate * TRAIN_UTILISATION, rate * ROLLOUT_UTILISATION
    sequences = spec.budget.prompts_per_step * spec.rollout.G
    generated = sequences * spec.max_new_tokens
    trained = sequences * (spec.data.max_prompt_length + spec.max_new_tokens)
    # forward passes (2N flops a token) per trained token: old log-probs, the reference's with a KL
    # loss, and per PPO epoch a forward, a backward (2 forwards) and the checkpointed forward again
    forwards = 1 + (1 if spec.algorithm.kl_coef > 0 else 0) + 4 * spec.algorithm.ppo_epochs
    n = active_params(shape)
    step_s = STEP_OVERHEAD_S + 2 * n * generated / rollout_rate + 2 * n * forwards * trained / train_rate
    extra = 2 if spec.model.strategy == "megatron" else 0  # megatron keeps bf16 weights beside fp32 masters
    checkpoint_bytes = (CHECKPOINT_BYTES_PER_PARAM[spec.algorithm.optimizer] + extra) * shape.params
    write_s = checkpoint_bytes / (NODE_DISK_BYTES_S * cluster.nodes)
    load_s = 2 * shape.params / NODE_DISK_BYTES_S  # every node reads the bf16 weights
    return StepCost(
        step_s=step_s,
        checkpoint_s=CHECKPOINT_OVERHEAD_S + write_s,
        startup_s=STARTUP_S + load_s + write_s,  # a resumed attempt reads its checkpoint back
        lead_floor_s=SUBMITIT_LEAD_S,
        checkpoint_every=spec.budget.checkpoint_every,  # None: verl saves only at the end
    )
