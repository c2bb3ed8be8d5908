"""The papers' objectives as backend-neutral torch (see ../shared/SPEC.md).

Losses take verl's keyword signature plus `group_ids` and return `(loss, metrics)`; the CPU lab
and verl (through `losses.verl_plugin`, loaded by verl's plugin entry point) call the same code.
Nothing here imports verl.
"""

from losses.advantages import group_advantages, row_advantages
from losses.aggregation import AGG_MODES, agg_loss
from losses.config import TRANSFORMS, LossConfig, PolicyLossOptions
from losses.dfpo import dfpo
from losses.metrics import dfpo_asym, dfpo_ortho_residual, hacking_j, mismatch_metrics
from losses.pg import dapo, grpo, grpo_symclip, gspo
from losses.ratios import sequence_ratio, sign_aware_clip, symmetric_clip, token_ratio
from losses.registry import get, names
from losses.transforms import min_replace, orth_proj, pos_orth_qp, transform, trunc_rebalance
from losses.weights import (
    DeviceGenerators,
    delta_weights,
    inject_delta,
    inject_noise,
    negative_only,
    noise_weights,
    positive_only,
    sign_weights,
    tis,
    tis_weights,
)

__all__ = [
    "AGG_MODES",
    "TRANSFORMS",
    "DeviceGenerators",
    "LossConfig",
    "PolicyLossOptions",
    "agg_loss",
    "dapo",
    "delta_weights",
    "dfpo",
    "dfpo_asym",
    "dfpo_ortho_residual",
    "get",
    "group_advantages",
    "grpo",
    "grpo_symclip",
    "gspo",
    "hacking_j",
    "inject_delta",
    "inject_noise",
    "min_replace",
    "mismatch_metrics",
    "names",
    "negative_only",
    "noise_weights",
    "orth_proj",
    "pos_orth_qp",
    "positive_only",
    "row_advantages",
    "sequence_ratio",
    "sign_aware_clip",
    "sign_weights",
    "symmetric_clip",
    "tis",
    "tis_weights",
    "token_ratio",
    "transform",
    "trunc_rebalance",
]
