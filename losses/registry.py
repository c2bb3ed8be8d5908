"""Name → loss. One registry for the lab and verl (`losses.verl_plugin` registers these names
prefixed `cancel_` in verl's own registry)."""

from __future__ import annotations

from losses.dfpo import dfpo
from losses.pg import dapo, grpo, grpo_symclip, gspo
from losses.weights import LossFn

_LOSSES: dict[str, LossFn] = {
    "grpo": grpo,
    "dapo": dapo,
    "gspo": gspo,
    "grpo_symclip": grpo_symclip,
    "dfpo": dfpo,
}

# losses whose value needs `group_ids` (refuse to run without them)
NEEDS_GROUPS = frozenset({"dfpo"})


def names() -> list[str]:
    """Registered loss names, in SPEC's table order."""
    return list(_LOSSES)


def get(name: str) -> LossFn:
    """The loss called `name`: fn(old_log_prob, log_prob, advantages, response_mask,
    loss_agg_mode=..., config=None, rollout_is_weights=None, group_ids=None) -> (loss, metrics)."""
    try:
        return _LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; registered: {', '.join(_LOSSES)}") from None
