"""The loss a spec asks for, built from `losses/` by name, and the per-row weights it applies.

The loss and its row weights come from the registry (`losses.catalog`), the wrappers from the one
composer `losses.wrappers.wrap_loss`, so this module knows no loss by name.
"""

from __future__ import annotations

import torch

import losses
from cancelctl.spec.experiment import AlgorithmSpec
from losses.catalog import needs_groups as _loss_needs_groups
from losses.wrappers import WrapperOptions, wrap_loss
from losses.registry import row_weights as registered_row_weights


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


def wrapper_options(algorithm: AlgorithmSpec) -> WrapperOptions:
    return WrapperOptions(
        probe=algorithm.probe,
        inject_delta=algorithm.inject_delta.delta if algorithm.inject_delta is not None else None,
        inject_delta_p_low=algorithm.inject_delta.p_low if algorithm.inject_delta is not None else 0.1,
        inject_noise_sigma=algorithm.inject_noise.sigma if algorithm.inject_noise is not None else None,
        tis_cap=algorithm.tis.cap if algorithm.tis is not None else None,
    )


def build_loss(algorithm: AlgorithmSpec, noise_generator: torch.Generator):
    """The registered loss wrapped as the spec says; accepts group_ids= and rollout_log_prob=."""
    return wrap_loss(losses.get(algorithm.loss), wrapper_options(algorithm), noise_generator)


def needs_groups(algorithm: AlgorithmSpec) -> bool:
    return _loss_needs_groups(algorithm.loss)


def row_weights(
    algorithm: AlgorithmSpec,
    config: losses.LossConfig,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
) -> torch.Tensor:
    """w_i of [D eq. 23]: the post-clip weight the loss puts on row i (the loss's registered row weights)."""
    return registered_row_weights(algorithm.loss)(log_prob, old_log_prob, advantages, response_mask, group_ids, config)
