"""The compute keys (docs/metrics.md#compute) of a verl run, derived from verl's own per-step metrics.

verl 0.9.1 logs no generated-token count (docs/verl-internals.md#compute-accounting),
so the report's compute axes are derived here, per step, from what it does log:
- `compute/gen_tokens`      = `response_length/mean` × trained trajectories (prompts per step × G): the
                              response tokens of the step's batch, when every rollout is trained; under
                              `reward_balanced` the sampler (sampler.py) logs `batching/gen_tokens`, the
                              response tokens of every rollout generated that step, discarded ones
                              included, and that is taken instead;
- `compute/update_steps_cum` = step × ppo_epochs × mini-batches per step (each mini-batch is one optimizer
                              step in verl, as in `plan.updates_per_step`);
- `compute/hours_cum`       = Σ `timing_s/step` × GPUs (nodes × gpus_per_node) / 3600: GPU-hours;
- `batching/discarded_rollouts_cum` = Σ the sampler's per-step `batching/discarded_rollouts` (its own
                              running count restarts with each verl process, not with the checkpoint).
Cumulative keys are sums over steps ≤ the current one, so a requeued verl that resumes from its own
checkpoint at step k (and logs k+1… again) gets the same totals as an uninterrupted run: the values of
earlier attempts are read back from the run's metrics.jsonl.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from cancelctl.spec.run import RunSpec, updates_per_step
from cancelctl.tracking.runfiles import iter_metrics_lines

RESPONSE_LENGTH = "response_length/mean"
SAMPLER_GEN_TOKENS = "batching/gen_tokens"  # sampler.RewardBalancedReplayBuffer
STEP_SECONDS = "timing_s/step"
GEN_TOKENS_CUM = "compute/gen_tokens_cum"
DISCARDED = "batching/discarded_rollouts"  # sampler.RewardBalancedReplayBuffer, per step
DISCARDED_CUM = "batching/discarded_rollouts_cum"


class ComputeAccount:
    """Adds the compute keys to each step's verl metrics."""

    def __init__(self, run: RunSpec, history: Iterable[tuple[int, Mapping[str, float]]] = ()) -> None:
        spec = run.spec
        self.trajectories = spec.budget.prompts_per_step * spec.rollout.G
        self.updates_per_step = updates_per_step(spec)
        self.gpus = spec.cluster.nodes * max(spec.cluster.gpus_per_node, 1)
        self.tokens: dict[int, float] = {}
        self.seconds: dict[int, float] = {}
        self.discarded: dict[int, float] = {}
        for step, metrics in history:
            self._record(step, metrics)

    @classmethod
    def from_run_dir(cls, run: RunSpec, metrics_jsonl: Path) -> ComputeAccount:
        return cls(run, ((line.step, line.metrics) for line in iter_metrics_lines(metrics_jsonl)))

    def _record(self, step: int, metrics: Mapping[str, float]) -> None:
        if "compute/gen_tokens" in metrics:  # a line this class wrote (an earlier attempt)
            self.tokens[step] = metrics["compute/gen_tokens"]
        elif SAMPLER_GEN_TOKENS in metrics:
            self.tokens[step] = metrics[SAMPLER_GEN_TOKENS]
        elif RESPONSE_LENGTH in metrics:
            self.tokens[step] = metrics[RESPONSE_LENGTH] * self.trajectories
        if STEP_SECONDS in metrics:
            self.seconds[step] = metrics[STEP_SECONDS]
        if DISCARDED in metrics:
            self.discarded[step] = metrics[DISCARDED]

    def gen_tokens_through(self, step: int) -> float:
        """Generated tokens of the steps up to `step`."""
        return sum(v for s, v in self.tokens.items() if s <= step)

    def add(self, step: int, metrics: Mapping[str, float]) -> dict[str, float]:
        """`metrics` plus the compute keys of `step` (those whose inputs verl logged at that step)."""
        self._record(step, metrics)
        out = dict(metrics)
        if step in self.tokens:
            out["compute/gen_tokens"] = self.tokens[step]
            out[GEN_TOKENS_CUM] = self.gen_tokens_through(step)
        out["compute/update_steps_cum"] = float(step * self.updates_per_step)
        if step in self.seconds:
            out["compute/hours_cum"] = sum(v for s, v in self.seconds.items() if s <= step) * self.gpus / 3600
        if step in self.discarded:
            out[DISCARDED_CUM] = sum(v for s, v in self.discarded.items() if s <= step)
        return out
