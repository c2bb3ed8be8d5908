"""Token/sequence policy-gradient losses: grpo, dapo, gspo, grpo_symclip.

All take verl's keyword signature plus `group_ids` (unused here) and return `(loss, metrics)`;
loss = −objective. `grpo` and `gspo` follow verl 0.9.1's `vanilla` and `gspo` op for op
(core_algos.py:1285, :1545), so they equal verl's to rounding on every aggregation mode.
"""

from __future__ import annotations

from typing import Any

import torch

from losses.aggregation import aggregate, masked_mean, row_mean
from losses.config import DEFAULT_CONFIG, clip_bounds, dual_clip
from losses.metrics import pg_metrics
from losses.ratios import (
    compute_float,
    ppo_clip_loss,
    sequence_ratio,
    sequence_ratio_token_form,
    sign_aware_clip,
    symmetric_clip,
    token_log_ratio,
    token_ratio,
)


def _inputs(old_log_prob, log_prob, advantages, config):
    # verl broadcasts Â to [N, T]; a [N] vector is accepted and broadcast the same way
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1).expand_as(log_prob)
    config = DEFAULT_CONFIG if config is None else config
    return compute_float(old_log_prob), compute_float(log_prob), compute_float(advantages), config


def grpo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token PPO clip min(rÂ, clip(r, 1−ε_low, 1+ε_high)Â) with dual clip c for Â < 0 [H eq. 2]."""
    old_log_prob, log_prob, advantages, config = _inputs(old_log_prob, log_prob, advantages, config)
    clip_low, clip_high = clip_bounds(config)
    clip_c = dual_clip(config)

    log_ratio = token_log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(log_ratio)
    token_loss, clip_active = ppo_clip_loss(ratio, advantages, clip_low, clip_high)
    clipfrac = masked_mean(clip_active.float(), response_mask)
    if clip_c is None:
        lower_frac = clipfrac.new_zeros(())
    else:
        # dual clip [Ye et al. 2020]: for Â < 0 the loss is capped at −Â·c
        dual = -advantages * clip_c
        lower_frac = masked_mean(torch.gt(token_loss, dual) * (advantages < 0).float(), response_mask)
        token_loss = torch.where(advantages < 0, torch.min(dual, token_loss), token_loss)
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    loss = aggregate(token_loss, response_mask, loss_agg_mode, config)
    return loss, pg_metrics(clipfrac, masked_mean(-log_ratio, response_mask), lower_frac)


def dapo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """`grpo` with token-mean aggregation whatever mode is passed [H §4.3]; clip-higher
    (ε_high > ε_low) comes from the config."""
    return grpo(old_log_prob, log_prob, advantages, response_mask, "token-mean", config, rollout_is_weights)


def gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Sequence-ratio clip min(sÂ, clip(s)Â) in verl's token form [D eq. 42-44]; no dual clip.

    Aggregated with the mode passed (verl passes `config.loss_agg_mode`; GSPO's paper form is
    seq-mean-token-mean).
    """
    old_log_prob, log_prob, advantages, config = _inputs(old_log_prob, log_prob, advantages, config)
    clip_low, clip_high = clip_bounds(config)

    seq_ratio = sequence_ratio_token_form(log_prob, old_log_prob, response_mask)
    token_loss, clip_active = ppo_clip_loss(seq_ratio, advantages, clip_low, clip_high)
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    loss = aggregate(token_loss, response_mask, loss_agg_mode, config)
    clipfrac = masked_mean(clip_active.float(), response_mask)
    kl = masked_mean(old_log_prob - log_prob, response_mask)
    return loss, pg_metrics(clipfrac, kl, clipfrac.new_zeros(()))


def grpo_symclip(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO-fix: Â · clip(r, 0, 1+ε) per token [D App. H eq. 79-80].

    ε is `clip_ratio_high` (the upper clip is the only one the symmetric form keeps; with
    ε_low = ε_high it is the paper's single ε). No dual clip: it depends on the sign of Â, which is
    exactly what eq. 79 removes.
    """
    old_log_prob, log_prob, advantages, config = _inputs(old_log_prob, log_prob, advantages, config)
    _, clip_high = clip_bounds(config)

    log_ratio = token_log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(log_ratio)
    token_loss = -advantages * symmetric_clip(ratio, clip_high)
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    loss = aggregate(token_loss, response_mask, loss_agg_mode, config)
    clipfrac = masked_mean(torch.gt(ratio, 1 + clip_high).float(), response_mask)
    return loss, pg_metrics(clipfrac, masked_mean(-log_ratio, response_mask), clipfrac.new_zeros(()))


# Row weights w_i of [D eq. 23] (the catalog's `row_weights`): the post-clip weight each loss puts on a
# row. Wrapper weights (tis, δ, noise, probes) are not part of w: asym measures the ratios' modulation.


def sequence_row_weights(log_prob, old_log_prob, advantages, response_mask, group_ids=None, config=None):
    """gspo: s̄_i, the sign-aware clipped sequence ratio [D eq. 46-47]."""
    clip_low, clip_high = clip_bounds(DEFAULT_CONFIG if config is None else config)
    return sign_aware_clip(sequence_ratio(log_prob, old_log_prob, response_mask), advantages, clip_low, clip_high)


def token_row_weights(log_prob, old_log_prob, advantages, response_mask, group_ids=None, config=None):
    """grpo/dapo: the token mean of the sign-aware clipped token ratio, so Σ_t Â r̄_t / |y_i| = Â w_i."""
    clip_low, clip_high = clip_bounds(DEFAULT_CONFIG if config is None else config)
    ratio = token_ratio(log_prob, old_log_prob)
    clipped = sign_aware_clip(ratio, advantages.unsqueeze(-1).expand_as(ratio), clip_low, clip_high)
    return row_mean(clipped, response_mask)


def symclip_row_weights(log_prob, old_log_prob, advantages, response_mask, group_ids=None, config=None):
    """grpo_symclip: the token mean of clip(r, 0, 1+ε) [D eq. 79]."""
    _, clip_high = clip_bounds(DEFAULT_CONFIG if config is None else config)
    return row_mean(symmetric_clip(token_ratio(log_prob, old_log_prob), clip_high), response_mask)
