"""Group bookkeeping: rows → dense group index, and per-group reductions by scatter (no loops)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GroupIndex:
    """`inverse[i]` is row i's group in 0..num_groups-1; `ids[k]` the original id of group k."""

    inverse: torch.Tensor  # [N] long
    ids: torch.Tensor  # [K]
    counts: torch.Tensor  # [K] long
    num_groups: int


def group_index(group_ids: torch.Tensor) -> GroupIndex:
    group_ids = torch.as_tensor(group_ids)
    if group_ids.dim() != 1:
        raise ValueError(f"group_ids must be 1-D (one id per row), got shape {tuple(group_ids.shape)}")
    ids, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    return GroupIndex(inverse=inverse, ids=ids, counts=counts, num_groups=int(ids.numel()))


def group_sum(values: torch.Tensor, index: GroupIndex) -> torch.Tensor:
    """[K]: Σ over each group's rows."""
    return values.new_zeros(index.num_groups).index_add(0, index.inverse, values)


def group_min(values: torch.Tensor, index: GroupIndex) -> torch.Tensor:
    """[K]: min over each group's rows (differentiable, ties share the gradient)."""
    init = values.new_full((index.num_groups,), float("inf"))
    return init.scatter_reduce(0, index.inverse, values, reduce="amin", include_self=False)


def group_mean(values: torch.Tensor, index: GroupIndex) -> torch.Tensor:
    return group_sum(values, index) / index.counts.to(values.dtype)


def require_whole_groups(
    index: GroupIndex,
    expected_size: int | None = None,
    what: str = "dfpo",
    rows: torch.Tensor | None = None,
    fix: str = "keep every group inside one micro-batch, or compute s~ over the whole mini-batch first",
    size_from: str = "policy_loss.group_size",
    labels: list | None = None,
) -> None:
    """Refuse partial groups (docs/losses.md#dfpo, step 5): every group has `expected_size` rows or,
    when that is unknown, the size most groups have (a group that differs is the partial one).

    `rows` (bool [N]) marks the rows that count; the others (verl V1's zero-token padding rows,
    trainer/ppo/padding_utils.py:144-190) take no part, and a group made only of them is ignored.
    `fix` ends the message: what the caller's user should change; `labels[id]` names a group id
    (verl's uid string) in it."""
    counts = index.counts
    if rows is not None:
        counts = torch.bincount(index.inverse[rows.bool()], minlength=index.num_groups)
    if counts.numel() == 0:
        return
    present = counts > 0
    if expected_size is None:
        expected = torch.bincount(counts[present]).argmax() if bool(present.any()) else counts.new_zeros(())
        source = "the other groups"  # most common size; ties → the smaller
    else:
        expected = torch.tensor(int(expected_size), device=counts.device)
        source = size_from
    differs = (counts != expected) & present
    n_bad, first_bad, size = torch.stack([differs.sum(), differs.int().argmax(), expected]).tolist()  # one sync
    if n_bad:
        raise ValueError(
            f"{what}: group {_label(index.ids[first_bad].item(), labels)} has {counts[first_bad].item()} rows but {source} "
            f"say G={size} ({n_bad} of {int(present.sum())} groups differ). The group transform needs whole "
            f"groups (docs/losses.md#dfpo, step 5): {fix}."
        )


def _label(group_id: int, labels: list | None) -> str:
    return f"id {group_id}" if labels is None else f"{labels[group_id]!r}"
