"""The papers' objectives as backend-neutral torch (docs/losses.md).

Losses take verl's keyword signature plus `group_ids` and return `(loss, metrics)`; the CPU lab
and verl (through `losses.verl_plugin`, loaded by verl's plugin entry point) call the same code.
Nothing here imports verl. Attributes load lazily (PEP 562), so `losses.catalog` — the names a spec
validates against — imports without torch.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_EXPORTS = {
    "group_advantages": "losses.advantages",
    "row_advantages": "losses.advantages",
    "AGG_MODES": "losses.aggregation",
    "agg_loss": "losses.aggregation",
    "TRANSFORMS": "losses.catalog",
    "LossConfig": "losses.config",
    "PolicyLossOptions": "losses.config",
    "WrapperOptions": "losses.wrappers",
    "wrap_loss": "losses.wrappers",
    "dfpo": "losses.dfpo",
    "dfpo_asym": "losses.metrics",
    "dfpo_ortho_residual": "losses.metrics",
    "hacking_j": "losses.metrics",
    "mismatch_metrics": "losses.metrics",
    "dapo": "losses.pg",
    "grpo": "losses.pg",
    "grpo_symclip": "losses.pg",
    "gspo": "losses.pg",
    "sequence_ratio": "losses.ratios",
    "sign_aware_clip": "losses.ratios",
    "symmetric_clip": "losses.ratios",
    "token_ratio": "losses.ratios",
    "get": "losses.registry",
    "names": "losses.registry",
    "min_replace": "losses.transforms",
    "orth_proj": "losses.transforms",
    "pos_orth_qp": "losses.transforms",
    "transform": "losses.transforms",
    "trunc_rebalance": "losses.transforms",
    "DeviceGenerators": "losses.weights",
    "delta_weights": "losses.weights",
    "inject_delta": "losses.weights",
    "inject_noise": "losses.weights",
    "negative_only": "losses.weights",
    "noise_weights": "losses.weights",
    "positive_only": "losses.weights",
    "sign_weights": "losses.weights",
    "tis": "losses.weights",
    "tis_weights": "losses.weights",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'losses' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


class _Package(types.ModuleType):
    """`losses.dfpo` is the loss, not its module (as before the lazy exports): importing the submodule
    `losses.dfpo` makes Python set the package attribute to the module; bind the function instead."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
