"""Importance ratios and the clips applied to them (docs/losses.md#notation, [D App. B, F, H])."""

from __future__ import annotations

import torch

from losses.aggregation import row_mean

LOG_RATIO_CLAMP = 20.0  # token log-ratio clamp before exp (docs/losses.md#notation; verl vanilla)
SEQ_LOG_RATIO_MAX = 10.0  # sequence log-ratio clamp, as verl's gspo (core_algos.py:1590)


def compute_float(t: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 upcast to fp32 (gradients still reach the original tensor); fp32/fp64 unchanged."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def token_log_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    """log r = log π_θ − log π_old, clamped to ±20 [H eq. 2]."""
    return torch.clamp(log_prob - old_log_prob, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)


def token_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    """r_{i,t} = π_θ / π_old per token."""
    return torch.exp(token_log_ratio(log_prob, old_log_prob))


def sequence_log_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """log s_i = (1/|y_i|) Σ_t (log π_θ − log π_old) over response tokens [D eq. 44]; [N]."""
    return row_mean(log_prob - old_log_prob, response_mask)


def sequence_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """s_i = exp(log s_i), log s_i clamped at 10 like verl's gspo; [N], differentiable."""
    return torch.exp(torch.clamp(sequence_log_ratio(log_prob, old_log_prob, response_mask), max=SEQ_LOG_RATIO_MAX))


def sequence_ratio_token_form(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """GSPO's token form [D eq. 42-44]: log s_{i,t} = log π_t − sg(log π_t) + sg(log s_i), clamped at 10.

    Every token's value is s_i while its gradient flows through that token's own log-prob; [N, T].
    """
    seq = sequence_log_ratio(log_prob, old_log_prob, response_mask)
    log_s = log_prob - log_prob.detach() + seq.detach().unsqueeze(-1)
    return torch.exp(torch.clamp(log_s, max=SEQ_LOG_RATIO_MAX))


def ppo_clip_loss(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """−min(wÂ, clip(w, 1−ε_low, 1+ε_high)Â), written max(−Âw, −Â clip(w)) as verl does [H eq. 2,
    D eq. 42], for a token ratio (grpo) or a sequence ratio (gspo); also where the clip is active."""
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    return torch.maximum(unclipped, clipped), torch.gt(clipped, unclipped)


def sign_aware_clip(ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float) -> torch.Tensor:
    """Post-clip weight w̄ with min(wA, clip(w)A) = A·w̄ [D eq. 46-47, 78]: min(w, c) if A ≥ 0 else max(w, c)."""
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    return torch.where(advantages >= 0, torch.minimum(ratio, clipped), torch.maximum(ratio, clipped))


def symmetric_clip(ratio: torch.Tensor, clip_high: float) -> torch.Tensor:
    """φ(r) = clip(r, 0, 1 + ε), the same for both advantage signs [D App. H eq. 79]."""
    return torch.clamp(ratio, 0.0, 1 + clip_high)
