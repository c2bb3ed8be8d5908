"""Rollout–trainer conformance of one step: how far the rollout engine's token log-probs are from the
trainer's recomputation of the same tokens under the same weights (docs/validate-smoke.md#conformance).

The rollout (hf_cpu, vLLM, SGLang: whichever produced the batch) returns a log-prob per generated token,
which verl stores as `rollout_log_probs`; the trainer recomputes them as `old_log_probs` before the
update. With the same weights, tokenizer, prompt and precision they agree to rounding; a stale weight
sync, a different prompt rendering or another dtype shows up here. Over the step's response tokens:

- |Δ log π| = |log π_train(y_t) − log π_infer(y_t)|: mean, p99 (nearest rank) and max;
- the importance ratio ρ_t = π_train / π_infer = exp(Δ) [H eq. 5]: std and max.

Plain torch: computed by cancelctl's verl trainer (trainer.py) from verl's batch, read by the smoke's
gate (cancelctl.smoke.conformance).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the keys are read where torch is not installed (the smoke's gate)
    import torch

PREFIX = "conformance/"
DIFF_MEAN = PREFIX + "logprob_diff_mean"
DIFF_P99 = PREFIX + "logprob_diff_p99"
DIFF_MAX = PREFIX + "logprob_diff_max"
RATIO_STD = PREFIX + "ratio_std"
RATIO_MAX = PREFIX + "ratio_max"
TOKENS = PREFIX + "tokens"
FIGURES = (DIFF_MEAN, DIFF_P99, DIFF_MAX, RATIO_STD, RATIO_MAX)
LOG_RATIO_CLAMP = 20.0  # exp(±20): a ratio that large is reported as huge, not inf


def nearest_rank(values: torch.Tensor, q: float) -> torch.Tensor:
    """The q-quantile by nearest rank (an observed value; torch.quantile refuses > 16M elements)."""
    k = max(1, math.ceil(q * values.numel()))
    return values.kthvalue(k).values


def conformance_figures(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                        response_mask: torch.Tensor) -> dict[str, float]:
    """The figures above over the response tokens of `response_mask` (all three [rows, tokens])."""
    import torch

    mask = response_mask.bool()
    train = old_log_prob.detach().to(torch.float64)[mask]
    infer = rollout_log_prob.detach().to(torch.float64)[mask]
    if train.numel() == 0:
        return {TOKENS: 0.0}
    delta = train - infer
    gap = delta.abs()
    rho = torch.exp(delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return {
        DIFF_MEAN: float(gap.mean()),
        DIFF_P99: float(nearest_rank(gap, 0.99)),
        DIFF_MAX: float(gap.max()),
        RATIO_STD: float(rho.std()) if rho.numel() > 1 else 0.0,
        RATIO_MAX: float(rho.max()),
        TOKENS: float(train.numel()),
    }
