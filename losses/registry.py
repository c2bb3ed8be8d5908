"""Name → loss function and row-weight function, resolved from `losses.catalog` (one registry for the
lab and verl; `losses.verl_plugin` registers these names prefixed `cancel_` in verl's own registry)."""

from __future__ import annotations

import importlib
from typing import Callable

from losses.catalog import loss_info, loss_names, needs_groups
from losses.weights import LossFn

RowWeightFn = Callable[..., "object"]


def _resolve(target: str):
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def names() -> list[str]:
    """Registered loss names, in the order of docs/losses.md's table."""
    return list(loss_names())


def get(name: str) -> LossFn:
    """The loss called `name`: fn(old_log_prob, log_prob, advantages, response_mask,
    loss_agg_mode=..., config=None, rollout_is_weights=None, group_ids=None) -> (loss, metrics)."""
    return _resolve(loss_info(name).function)


def row_weights(name: str) -> RowWeightFn:
    """w_i of [D eq. 23] for the loss called `name`: fn(log_prob, old_log_prob, advantages [N],
    response_mask, group_ids, config) -> [N]."""
    return _resolve(loss_info(name).row_weights)


__all__ = ["get", "names", "needs_groups", "row_weights"]
