"""The loss a spec asks for, built from `losses/` by name, and the per-row weights it applies.

Wrapper order (innermost first): probe, inject_delta, inject_noise, tis. All multiply detached
per-token weights, so the order changes nothing but the label.
"""

from __future__ import annotations

import torch

import losses
from cancelctl.spec import AlgorithmSpec

# Losses whose value needs whole groups (SPEC "DFPO, exactly" 5).
GROUP_LOSSES = frozenset({"dfpo"})


def loss_config(algorithm: AlgorithmSpec, G: int) -> losses.LossConfig:
    """verl ActorConfig mirror from the spec (clip ε_low/ε_high, dual clip c, agg mode, DFPO options)."""
    dfpo = algorithm.dfpo
    return losses.LossConfig(
        clip_ratio_low=algorithm.clip_low,
        clip_ratio_high=algorithm.clip_high,
        clip_ratio_c=algorithm.clip_dual_c,
        loss_agg_mode=algorithm.agg_mode,
        policy_loss=losses.PolicyLossOptions(
            loss_mode=algorithm.loss,
            transform=dfpo.transform,
            stop_grad=dfpo.stop_grad,
            scale=dfpo.scale,
            eps1=dfpo.eps1,
            group_size=G,
        ),
    )


def build_loss(algorithm: AlgorithmSpec, noise_generator: torch.Generator):
    """The registered loss wrapped as the spec says; accepts group_ids= and rollout_log_prob=."""
    fn = losses.get(algorithm.loss)
    if algorithm.probe == "positive_only":
        fn = losses.positive_only(fn)
    elif algorithm.probe == "negative_only":
        fn = losses.negative_only(fn)
    if algorithm.inject_delta is not None:
        fn = losses.inject_delta(fn, delta=algorithm.inject_delta.delta, p_low=algorithm.inject_delta.p_low)
    if algorithm.inject_noise is not None:
        fn = losses.inject_noise(fn, sigma=algorithm.inject_noise.sigma, generator=noise_generator)
    if algorithm.tis is not None:
        fn = losses.tis(fn, cap=algorithm.tis.cap)
    return fn


def needs_groups(algorithm: AlgorithmSpec) -> bool:
    return algorithm.loss in GROUP_LOSSES


def row_weights(
    algorithm: AlgorithmSpec,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
) -> torch.Tensor:
    """w_i of [D eq. 23]: the post-clip weight the loss puts on row i.

    gspo: s̄_i, the sign-aware clipped sequence ratio [D eq. 46-47]; dfpo: s̃ = T(s̄, Â) within the
    groups given (whole groups, as in the loss) or scale·s̄ [D App. B, Table 3]; grpo/dapo: the
    token mean of the sign-aware clipped token ratio, so Σ_t Â r̄_t / |y_i| = Â w_i; grpo_symclip:
    the token mean of clip(r, 0, 1+ε) [D eq. 79]. Wrapper weights (tis, δ, noise, probes) are not
    part of w: asym measures the modulation that comes from the ratios.
    """
    if algorithm.loss in ("gspo", "dfpo"):
        s = losses.sequence_ratio(log_prob, old_log_prob, response_mask)
        post_clip = losses.sign_aware_clip(s, advantages, algorithm.clip_low, algorithm.clip_high)
        if algorithm.loss == "gspo":
            return post_clip
        dfpo = algorithm.dfpo
        if dfpo.scale is not None:
            return dfpo.scale * post_clip
        options = {"eps1": dfpo.eps1} if dfpo.transform == "trunc_rebalance" else {}
        return losses.transform(dfpo.transform, post_clip, advantages, group_ids, **options)
    r = losses.token_ratio(log_prob, old_log_prob)
    if algorithm.loss == "grpo_symclip":
        clipped = losses.symmetric_clip(r, algorithm.clip_high)
    else:
        clipped = losses.sign_aware_clip(
            r, advantages.unsqueeze(-1).expand_as(r), algorithm.clip_low, algorithm.clip_high
        )
    return (clipped * response_mask).sum(-1) / response_mask.sum(-1).clamp(min=1)
