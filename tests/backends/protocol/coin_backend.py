"""A toy backend for tests/backends/protocol/test_toy_backend.py: a "coin" whose heads rate rises from 0.5 toward
`0.5 + algorithm.clip_high` over the run; each step's reward is that rate plus a seeded wobble, so a
sweep over it has a known answer. It trains nothing: it is what a backend owes cancelctl, and no more."""

from __future__ import annotations

import math
import random

from cancelctl.backends.protocol import BaseBackend
from cancelctl.spec.run import updates_per_step

WOBBLE = 0.01  # the seeded noise on each step's reward
RISE_STEPS = 2.0  # the rate's time constant, in steps


def coin_reward(clip_high: float, seed: int, step: int) -> float:
    """The step's reward: the heads rate after `step` steps, plus the seed's wobble."""
    rate = 0.5 + clip_high * (1 - math.exp(-step / RISE_STEPS))
    return rate + random.Random(seed * 100_003 + step).uniform(-WOBBLE, WOBBLE)


class CoinBackend(BaseBackend):
    name = "coin"
    default_lr = 1e-3

    def train(self, run, run_dir, logger, cache_dir):
        spec = run.spec
        tokens = spec.budget.prompts_per_step * spec.rollout.G * spec.max_new_tokens  # every toss a full response
        updates = updates_per_step(spec)
        for step in range(1, spec.budget.steps + 1):
            logger.log(step, {"critic/score/mean": coin_reward(spec.algorithm.clip_high, run.seed, step),
                              "compute/gen_tokens": tokens, "compute/gen_tokens_cum": tokens * step,
                              "compute/update_steps_cum": step * updates})
        logger.flush()
        return {"critic/score/mean": coin_reward(spec.algorithm.clip_high, run.seed, spec.budget.steps)}
