"""Group-relative advantages [D eq. 43] and the per-row view of verl's broadcast advantages."""

from __future__ import annotations

import torch

from losses.groups import group_index, group_sum

STD_EPS = 1e-6


def group_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, std_normalize: bool = True) -> torch.Tensor:
    """Â_i = (R_i − mean_g R) / (std_g R + 1e-6), unbiased std as verl's GRPO estimator [D eq. 43].

    `std_normalize=False` gives R_i − mean_g R [D eq. 29]. A group whose rewards are all equal
    (including a single-row group) gets Â = 0 exactly (docs/losses.md#notation; verl instead leaves a single row's
    reward unnormalised). Computed in float64; returned in the rewards' float dtype (fp32 for ints).
    """
    rewards = torch.as_tensor(rewards)
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    r = rewards.to(torch.float64)
    index = group_index(torch.as_tensor(group_ids, device=r.device))
    if index.inverse.numel() != r.numel():
        raise ValueError(f"rewards has {r.numel()} rows but group_ids has {index.inverse.numel()}")
    counts = index.counts.to(torch.float64)
    centred = r - (group_sum(r, index) / counts)[index.inverse]
    constant = (
        r.new_full((index.num_groups,), float("-inf")).scatter_reduce(0, index.inverse, r, "amax")
        == r.new_full((index.num_groups,), float("inf")).scatter_reduce(0, index.inverse, r, "amin")
    )[index.inverse]
    adv = centred
    if std_normalize:
        var = group_sum(centred * centred, index) / (counts - 1).clamp(min=1)
        adv = centred / (var.sqrt() + STD_EPS)[index.inverse]
    return torch.where(constant, torch.zeros_like(adv), adv).to(out_dtype)


def row_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Â_i per row from verl's [N, T] broadcast: the value at the row's first response token
    (exact, unlike a mean over tokens). A 1-D [N] input is returned as is."""
    if advantages.dim() == 1:
        return advantages
    first = response_mask.to(torch.int8).argmax(dim=-1, keepdim=True)  # 0 for an empty row
    return advantages.gather(-1, first).squeeze(-1)


def token_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[N, T] view: a 1-D per-row advantage is broadcast over tokens (verl's layout)."""
    return advantages.unsqueeze(-1).expand_as(response_mask) if advantages.dim() == 1 else advantages
