"""The loss hyper-parameters, shaped like the attributes verl's ActorConfig exposes.

Losses read their options with getattr defaults, so a `LossConfig` (CPU lab), verl's real
`ActorConfig` (whose `policy_loss` lacks our DFPO fields unless the verl backend's
`CancelPolicyLossConfig` is its `_target_`; absent fields take the defaults below) or any namespace
with the same names works. `.get` mirrors verl's `BaseConfig.get`, so verl's own losses accept a `LossConfig` too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from losses.catalog import TRANSFORMS  # noqa: F401  (re-exported: losses.dfpo, losses.transforms)


@dataclass
class PolicyLossOptions:
    """Mirror of verl's `actor.policy_loss` plus the DFPO options [D App. B, Table 3]."""

    loss_mode: str = "grpo"
    transform: str = "min_replace"
    stop_grad: bool = True
    scale: float | None = None  # ablation: s~ = scale * s-bar, no group transform
    eps1: float = 0.05  # trunc_rebalance floor [D eq. 52]
    group_size: int | None = None  # expected G; None: every group must have the same size

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


@dataclass
class LossConfig:
    """The ActorConfig attributes the losses read (verl names and defaults, actor.py)."""

    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None  # None: clip_ratio
    clip_ratio_high: float | None = None  # None: clip_ratio
    clip_ratio_c: float | None = 3.0  # dual clip for A < 0; None disables it (verl always applies 3.0)
    loss_agg_mode: str = "token-mean"
    loss_scale_factor: float | None = None
    # verl's ppo_loss fills dp_size, batch_num_tokens, global_batch_size, loss_scale_factor per micro-batch
    global_batch_info: dict = field(default_factory=dict)
    policy_loss: PolicyLossOptions = field(default_factory=PolicyLossOptions)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


DEFAULT_CONFIG = LossConfig()


def clip_bounds(config: Any) -> tuple[float, float]:
    """(ε_low, ε_high), each falling back to `clip_ratio` as verl does."""
    config = DEFAULT_CONFIG if config is None else config
    clip_ratio = getattr(config, "clip_ratio", 0.2)
    low = getattr(config, "clip_ratio_low", None)
    high = getattr(config, "clip_ratio_high", None)
    return (clip_ratio if low is None else low), (clip_ratio if high is None else high)


def dual_clip(config: Any) -> float | None:
    """verl's `config.get("clip_ratio_c", 3.0)`; None (only possible off verl) disables it."""
    config = DEFAULT_CONFIG if config is None else config
    c = getattr(config, "clip_ratio_c", 3.0)
    if c is not None and not c > 1.0:
        raise ValueError(f"clip_ratio_c (dual clip) must be > 1.0, got {c}")
    return c


def policy_option(config: Any, name: str, default: Any) -> Any:
    """`config.policy_loss.<name>`, or `default` when absent or None (dataclass, dict or DictConfig)."""
    options = getattr(config, "policy_loss", None) if config is not None else None
    if options is None:
        return default
    if hasattr(options, "get"):
        value = options.get(name, None)
    else:
        value = getattr(options, name, None)
    return default if value is None else value


def batch_info(config: Any) -> dict:
    """Keyword arguments for `agg_loss`: `config.global_batch_info`, as verl passes them.

    verl's ppo_loss always copies `config.loss_scale_factor` into global_batch_info; when the
    dict lacks it (CPU lab, direct calls) we take the attribute, so both paths scale alike.
    """
    info = dict(getattr(config, "global_batch_info", None) or {}) if config is not None else {}
    if "loss_scale_factor" not in info and config is not None:
        factor = getattr(config, "loss_scale_factor", None)
        if factor is not None:
            info["loss_scale_factor"] = factor
    return info
