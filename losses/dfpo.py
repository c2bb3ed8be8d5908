"""DFPO: GSPO with a group transformation of the post-clip sequence weights (docs/losses.md#dfpo).

1. s_i [D eq. 44] → sign-aware post-clip weight s̄_i [eq. 46-47], so Σ Â s̄ is GSPO's objective [eq. 49].
2. s̃ = T(s̄, Â) inside every group (`losses.transforms`), under stop-gradient by default.
3. Per token of row i the coefficient on ∇log π is s̃_i Â_i / |y_i| [eq. 68, 85]: the token form
   s̃_i Â_i · (1 + log π − sg(log π)) reports the value s̃_i Â_i on every token and gives each token
   gradient s̃_i Â_i, which seq-mean-token-mean (DFPO's mode) divides by |y_i| (and by the number
   of rows). Clipped rows are not zeroed: the clip only shapes the value of s̄
   (docs/losses.md#dfpo, step 3).
4. Ablations [D Table 3]: `stop_grad=False` keeps s̃(θ) differentiable and minimises
   −Σ_i Â_i s̃_i(θ) ℓ_i(θ), ℓ_i the row's mean log-prob (docs/losses.md#dfpo, step 4); `scale=c` uses
   s̃ = c·s̄, no transform.
5. Partial groups are refused (`losses.groups.require_whole_groups`). G is `policy_loss.group_size`,
   else verl's `rollout_n`, else the size most groups have. Zero-token rows (verl V1's padding
   rows) take no part in the check: their loss terms are masked out anyway.
"""

from __future__ import annotations

from typing import Any

import torch

from losses.advantages import row_advantages
from losses.aggregation import aggregate, masked_mean
from losses.config import DEFAULT_CONFIG, TRANSFORMS, clip_bounds, policy_option
from losses.groups import GroupIndex, group_index, require_whole_groups
from losses.metrics import group_asymmetry, ortho_residual, pg_metrics, weight_dispersion
from losses.ratios import compute_float, sequence_ratio, sign_aware_clip
from losses.transforms import apply_transform

NEEDS_GROUPS = (
    "dfpo needs group_ids (LongTensor [N], one id per row, e.g. verl's uid): its weight transform "
    "acts inside each group of rollouts of one prompt"
)


def dfpo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DFPO loss; options from `config.policy_loss`: transform, stop_grad, scale, eps1, group_size."""
    if group_ids is None:
        raise ValueError(NEEDS_GROUPS)
    config = DEFAULT_CONFIG if config is None else config
    transform_name = policy_option(config, "transform", "min_replace")
    if transform_name not in TRANSFORMS:
        raise ValueError(f"policy_loss.transform={transform_name!r}; expected one of {', '.join(TRANSFORMS)}")
    stop_grad = bool(policy_option(config, "stop_grad", True))

    old_log_prob, log_prob = compute_float(old_log_prob), compute_float(log_prob)
    index = group_index(torch.as_tensor(group_ids, device=log_prob.device))
    if index.inverse.numel() != log_prob.shape[0]:
        raise ValueError(f"dfpo: group_ids has {index.inverse.numel()} entries for {log_prob.shape[0]} rows")
    group_size, size_from = expected_group_size(config)
    require_whole_groups(index, group_size, rows=response_mask.bool().any(-1), size_from=size_from)

    adv = row_advantages(compute_float(advantages), response_mask)  # Â_i [N]
    clip_low, clip_high = clip_bounds(config)
    seq_ratio = sequence_ratio(log_prob, old_log_prob, response_mask)  # s_i [N]
    if stop_grad:
        seq_ratio = seq_ratio.detach()
    post_clip = sign_aware_clip(seq_ratio, adv, clip_low, clip_high)  # s̄_i
    exact = transformed_weights(post_clip, adv, index, config)  # s̃_i
    weights = exact.to(post_clip.dtype)

    coef = (adv * weights).unsqueeze(-1)  # s̃_i Â_i per row
    if stop_grad:
        token_objective = coef * (1.0 + (log_prob - log_prob.detach()))  # value exactly s̃Â
    else:
        token_objective = coef * log_prob
    token_loss = -token_objective
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    loss = aggregate(token_loss, response_mask, loss_agg_mode, config)

    clipped_rows = ((post_clip != seq_ratio) & (adv != 0)).float().unsqueeze(-1).expand_as(response_mask)
    metrics = pg_metrics(
        masked_mean(clipped_rows, response_mask),
        masked_mean(old_log_prob - log_prob, response_mask),
        post_clip.new_zeros(()),
        **{
            "dfpo/asym": group_asymmetry(exact, adv, index),
            "dfpo/ortho_residual": ortho_residual(exact, adv, index),
            "dfpo/weight_dispersion": weight_dispersion(exact, adv, index),
        },
    )
    return loss, metrics


def transformed_weights(post_clip: torch.Tensor, advantages: torch.Tensor, index: GroupIndex, config: Any) -> torch.Tensor:
    """s̃ = T(s̄, Â) inside each group [D eq. 18, 50-55] (float64), or scale·s̄ for the scale ablation
    [D Table 3]; options from `config.policy_loss`."""
    scale = policy_option(config, "scale", None)
    if scale is not None:
        return scale * post_clip
    name = policy_option(config, "transform", "min_replace")
    options = {"eps1": policy_option(config, "eps1", 0.05)} if name == "trunc_rebalance" else {}
    return apply_transform(name, post_clip, advantages, index, **options)


def dfpo_row_weights(log_prob, old_log_prob, advantages, response_mask, group_ids, config=None):
    """w_i of [D eq. 23] for dfpo: s̃ within the groups given (whole groups, as in the loss)."""
    config = DEFAULT_CONFIG if config is None else config
    clip_low, clip_high = clip_bounds(config)
    post_clip = sign_aware_clip(sequence_ratio(log_prob, old_log_prob, response_mask), advantages, clip_low, clip_high)
    index = group_index(torch.as_tensor(group_ids, device=post_clip.device))
    return transformed_weights(post_clip, advantages, index, config).to(post_clip.dtype)


def expected_group_size(config: Any) -> tuple[int | None, str]:
    """(G, where it came from): `policy_loss.group_size`, else verl's ActorConfig `rollout_n`."""
    size = policy_option(config, "group_size", None)
    if size is not None:
        return int(size), "policy_loss.group_size"
    rollout_n = getattr(config, "rollout_n", None)
    if isinstance(rollout_n, int) and rollout_n > 0:
        return rollout_n, "actor.rollout_n"
    return None, "policy_loss.group_size"
