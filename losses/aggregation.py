"""Loss aggregation, op for op as verl 0.9.1 `core_algos.agg_loss` (tests compare bit for bit).

Inside verl the loss of one micro-batch must already be "my share of the global mini-batch ×
dp_size" (FSDP backprops it as is and DDP-averages gradients), hence the global denominators in
`global_batch_info`; without them the local counts are used.
"""

from __future__ import annotations

from typing import Any

import torch

from losses.catalog import ALL_AGG_MODES as AGG_MODES
from losses.config import batch_info


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis=None) -> torch.Tensor:
    # where() first: NaN/inf outside the mask must not leak into the sum (verl_F.masked_sum). verl then
    # multiplies by the mask, which for a bool mask changes no bit (×1 exact, masked entries already
    # +0.0), so that full-tensor pass is skipped for bool masks; float masks (weights) are multiplied.
    valid = torch.where(mask.bool(), values, 0.0)
    return (valid if mask.dtype == torch.bool else valid * mask).sum(axis=axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis=None) -> torch.Tensor:
    return masked_sum(values, mask, axis) / (mask.sum(axis=axis) + 1e-8)


def row_mean(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per row, the mean of `values` over its response tokens: (1/|y_i|) Σ_t x_{i,t}, [N, T] -> [N]; a
    row without tokens gives 0 (its length counts as 1). The token mean of the sequence ratio [D eq. 44]
    and of the grpo row weights; unlike `masked_mean` no ε is added, so it is exact."""
    return (values * response_mask).sum(-1) / response_mask.sum(-1).clamp(min=1)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: int | None = None,
    global_batch_size: int | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Scalar loss from a [N, T] token-loss matrix; the five verl modes."""
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
            batch_num_tokens = loss_mask.sum()
        return masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask) * dp_size
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)
        seq_mask = (torch.sum(loss_mask, dim=-1) > 0).float()  # fully masked rows do not count
        if global_batch_size is None:
            if dp_size > 1:
                raise ValueError("global_batch_size is required when dp_size > 1")
            global_batch_size = seq_mask.sum()
        loss = masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
        if loss_agg_mode == "seq-mean-token-sum-norm":
            loss /= loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor
        return loss
    if loss_agg_mode == "seq-mean-token-mean":
        seq_len = torch.sum(loss_mask, dim=-1)
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_len + 1e-8)
        seq_mask = (seq_len > 0).float()
        if global_batch_size is None:
            if dp_size > 1:
                raise ValueError("global_batch_size is required when dp_size > 1")
            global_batch_size = seq_mask.sum()
        return masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
    raise ValueError(f"invalid loss_agg_mode {loss_agg_mode!r}; expected one of {', '.join(AGG_MODES)}")


def aggregate(loss_mat: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str, config: Any) -> torch.Tensor:
    """`agg_loss` with `config.global_batch_info` (see `losses.config.batch_info`)."""
    return agg_loss(loss_mat, response_mask, loss_agg_mode, **batch_info(config))
