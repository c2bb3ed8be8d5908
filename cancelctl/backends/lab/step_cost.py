"""The lab's estimate of one step, one checkpoint write and a job's start-up, for the time limit's
plan (`cancelctl.jobs.time_limit`): the signal's lead time, the allocations a run needs, `validate`'s
warning. Estimates are conservative (slow): a lead too long costs a little of each allocation, one too
short costs the step in flight. A job that has run replaces them with what it measured (`jobs.deadline`).

The lab's is here (its `train` imports torch; `plan` and `validate` must not), asked for through
`LabBackend.step_cost`; verl's reads the model's shape (`verl.step_cost`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cancelctl.jobs.time_limit import StepCost

if TYPE_CHECKING:
    from cancelctl.spec.run import RunSpec

# The lab on one CPU core, fitted to tiny to 3M-parameter lab runs measured on a loaded 2-core machine
# (0.9 to 7.6 s a step): a fixed cost (eval bookkeeping, metrics), a per-token cost of the token-by-token
# rollout in Python, and the arithmetic at a slow core's rate.
LAB_STEP_BASE_S = 1.0
LAB_TOKEN_S = 0.0012  # per (row x generated position)
LAB_FLOPS = 2e10  # per second, one core
LAB_STARTUP_S = 20.0  # python, torch, MLflow, the run folder; plus the warm start when not cached:
LAB_WARMSTART_STEP_S = 0.02
LAB_DISK_BYTES_S = 100e6
LAB_LEAD_FLOOR_S = 10.0  # the signal's timing jitter on a busy node
# Test support: seconds each lab step is held before its boundary (lab.train), so a test on a real
# scheduler gets a run of a known length whatever the machine's speed; counted in the estimate, as the
# launcher sees it too. An environment variable, as monitor.LR_SPIKE_ENV: fault injection, not part of
# any experiment, never in a run's id.
STEP_PAUSE_ENV = "CANCELCTL_TEST_STEP_PAUSE_S"


def lab_params(run: RunSpec) -> int:
    """The lab policy's parameters (policy.TinyCausalLM: token and position embeddings, per block a
    qkv + output projection and a 4x MLP or `moe.experts` of them with a router, an untied lm_head)."""
    lab, d = run.spec.lab, run.spec.lab.d_model
    vocab, max_len = 64, 16 + lab.max_response_tokens  # the task's vocabulary and prompt length, rounded up
    experts = lab.moe.experts if lab.moe else 1
    block = 4 * d * d + 4 * d + experts * (8 * d * d + 5 * d) + (d * experts if lab.moe else 0) + 4 * d
    return vocab * d + max_len * d + lab.n_layers * block + d * vocab


def lab_step_cost(run: RunSpec) -> StepCost:
    spec = run.spec
    rounds = spec.lab.balance_max_rounds if spec.batching.strategy == "reward_balanced" else 1
    rows = spec.budget.prompts_per_step * spec.rollout.G * rounds + spec.eval.prompts * spec.eval.k / spec.eval.every
    tokens = rows * spec.max_new_tokens
    passes = 4 + 3 * spec.algorithm.ppo_epochs + (1 if spec.algorithm.kl_coef > 0 else 0)  # forward = 1, backward = 2
    params = lab_params(run)
    step_s = LAB_STEP_BASE_S + LAB_TOKEN_S * tokens + 2 * params * tokens * passes / LAB_FLOPS + step_pause()
    checkpoint_bytes = 12 * params  # fp32 weights and Adam's two moments
    return StepCost(
        step_s=step_s,
        checkpoint_s=0.5 + checkpoint_bytes / LAB_DISK_BYTES_S,
        startup_s=LAB_STARTUP_S + LAB_WARMSTART_STEP_S * spec.lab.warmstart_steps,
        lead_floor_s=LAB_LEAD_FLOOR_S,
        checkpoint_every=spec.lab.checkpoint_every,
    )


def step_pause() -> float:
    raw = os.environ.get(STEP_PAUSE_ENV, "")
    try:
        return max(0.0, float(raw)) if raw else 0.0
    except ValueError:
        raise ValueError(f"${STEP_PAUSE_ENV}={raw!r}: expected seconds, e.g. 2.5") from None
