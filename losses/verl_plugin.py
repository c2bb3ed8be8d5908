"""verl plugin: our losses in verl's policy-loss registry as `cancel_<name>`.

Loaded at `import verl` through the `verl.plugins` entry point declared in pyproject.toml
(../shared/notes/verl-0.9.1.md §3), in every process that imports verl, so the actor workers
see the names. The only module of `losses/` that imports verl.

Aggregation: our `losses.aggregation.agg_loss` is verl's `agg_loss` op for op; the tests check
bitwise equality on every mode with and without `global_batch_info`, so the registered losses
aggregate exactly as verl would.

DFPO options live in `config.policy_loss`; verl's `PolicyLossConfig` has no such fields, so point
`actor_rollout_ref.actor.policy_loss._target_` at `losses.verl_plugin.CancelPolicyLossConfig` and
set `+actor_rollout_ref.actor.policy_loss.transform=...` (notes §3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.trainer.ppo.core_algos import register_policy_loss
from verl.workers.config.actor import PolicyLossConfig

from losses.config import TRANSFORMS
from losses.registry import NEEDS_GROUPS, get, names

PREFIX = "cancel_"


@dataclass
class CancelPolicyLossConfig(PolicyLossConfig):
    """verl's PolicyLossConfig plus the DFPO options read by `losses.dfpo`."""

    transform: str = "min_replace"
    stop_grad: bool = True
    scale: Optional[float] = None
    eps1: float = 0.05
    group_size: Optional[int] = None

    def __post_init__(self):
        parent_post_init = getattr(super(), "__post_init__", None)
        if parent_post_init is not None:
            parent_post_init()
        if self.transform not in TRANSFORMS:
            raise ValueError(f"policy_loss.transform={self.transform!r}; expected one of {', '.join(TRANSFORMS)}")


def _needs_groups(name: str):
    loss_fn = get(name)

    def grouped(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="seq-mean-token-mean", config=None,
                rollout_is_weights=None, group_ids=None):
        if group_ids is None:
            raise ValueError(
                f"{PREFIX}{name} needs the group id (uid) of every row, but verl 0.9.1's ppo_loss passes only per-token "
                "tensors to a registered policy loss. Group-aware calls from inside verl (a replaced ppo_loss that "
                "forwards data['uid']) are a later issue; until then run dfpo in the CPU lab."
            )
        return loss_fn(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask,
                       loss_agg_mode=loss_agg_mode, config=config, rollout_is_weights=rollout_is_weights,
                       group_ids=group_ids)

    grouped.__name__ = grouped.__qualname__ = f"{PREFIX}{name}"
    return grouped


def register_all() -> list[str]:
    """Register every loss of `losses.names()` under `cancel_<name>`; returns the names."""
    registered = []
    for name in names():
        register_policy_loss(PREFIX + name)(_needs_groups(name) if name in NEEDS_GROUPS else get(name))
        registered.append(PREFIX + name)
    return registered


REGISTERED = register_all()
