"""Batching strategies [C §4] (docs/losses.md#batching-strategies): which rows share an optimizer mini-batch.

`minibatches` splits one update batch into lists of row indices; `RewardBalancedBuffer` decides
which rollouts form the update batch at all under `reward_balanced`.
"""

from __future__ import annotations

import math

import torch

from cancelctl.backends.lab.rollout import RolloutBatch
from cancelctl.backends.lab.task import Problem


def minibatches(
    strategy: str, advantages: torch.Tensor, group_ids: torch.Tensor, rows_per_minibatch: int, g: torch.Generator
) -> list[torch.Tensor]:
    """Row indices of each optimizer mini-batch, in update order.

    default / reward_balanced: rows shuffled across mini-batches (verl scatters groups).
    query_preserved: whole groups shuffled, so every mini-batch holds complete groups.
    sign_split (negative control): Â>0 rows and Â<0 rows in separate mini-batches; Â=0 rows carry
    no policy gradient and join none, so the number of optimizer steps follows the sign counts.
    """
    N = advantages.shape[0]
    if strategy in ("default", "reward_balanced"):
        return list(torch.randperm(N, generator=g).split(rows_per_minibatch))
    if strategy == "query_preserved":
        ids = torch.unique(group_ids)
        order = ids[torch.randperm(len(ids), generator=g)]
        rows = torch.cat([torch.nonzero(group_ids == gid).squeeze(-1) for gid in order])
        return list(rows.split(rows_per_minibatch))
    if strategy == "sign_split":
        batches: list[torch.Tensor] = []
        for rows in (torch.nonzero(advantages > 0).squeeze(-1), torch.nonzero(advantages < 0).squeeze(-1)):
            batches += list(rows[torch.randperm(len(rows), generator=g)].split(rows_per_minibatch))
        order = torch.randperm(len(batches), generator=g).tolist()
        return [batches[i] for i in order]
    raise ValueError(f"unknown batching strategy {strategy!r}")


def holds_whole_groups(rows: torch.Tensor, group_ids: torch.Tensor) -> bool:
    """True if every group touched by `rows` has all its rows in `rows`."""
    inside = group_ids[rows]
    for gid in torch.unique(inside):
        if int((inside == gid).sum()) != int((group_ids == gid).sum()):
            return False
    return True


class RewardBalancedBuffer:
    """Rollouts accumulated across generation rounds until an update batch B of `groups` whole
    groups with n⁺ ≥ η|B| and n⁻ ≥ η|B| (rows with Â>0, Â<0) can be chosen [C §4, App. B].

    Groups stay whole (Â is a property of the group, and DFPO needs groups). Selection is greedy:
    each slot takes the group that most reduces the remaining n⁺/n⁻ deficit; ties go to groups with
    any Â ≠ 0, then to the oldest, so stale rollouts leave first. After a selection at most
    `capacity` groups are kept (newest); the rest are discarded — generated, never used, but
    counted as compute.
    """

    def __init__(self, groups: int, min_frac: float, capacity: int) -> None:
        self.groups = groups
        self.min_frac = min_frac
        self.capacity = capacity
        self.pending: RolloutBatch | None = None

    def add(self, batch: RolloutBatch) -> None:
        if batch.advantages is None:
            raise ValueError("buffer rows need advantages (computed per group at generation)")
        self.pending = batch if self.pending is None else RolloutBatch.concat([self.pending, batch])

    def _group_rows(self) -> list[torch.Tensor]:
        ids = self.pending.group_ids
        _, first = _first_occurrence(ids)
        return [torch.nonzero(ids == ids[i]).squeeze(-1) for i in first.tolist()]

    def choose(self) -> tuple[list[int], bool]:
        """Greedy choice of group slots (indices into the buffer's groups, oldest first) and whether
        it meets the balance constraint."""
        if self.pending is None:
            return [], False
        groups = self._group_rows()
        adv = self.pending.advantages
        pos = [int((adv[r] > 0).sum()) for r in groups]
        neg = [int((adv[r] < 0).sum()) for r in groups]
        rows_in_batch = sum(len(r) for r in groups[: self.groups])
        need = math.ceil(self.min_frac * rows_in_batch)
        chosen: list[int] = []
        have_pos = have_neg = 0
        remaining = list(range(len(groups)))
        for _ in range(min(self.groups, len(groups))):
            gap_pos, gap_neg = max(need - have_pos, 0), max(need - have_neg, 0)
            best = max(remaining, key=lambda k: (min(pos[k], gap_pos) + min(neg[k], gap_neg), pos[k] + neg[k] > 0, -k))
            remaining.remove(best)
            chosen.append(best)
            have_pos, have_neg = have_pos + pos[best], have_neg + neg[best]
        ok = len(chosen) == self.groups and have_pos >= need and have_neg >= need
        return sorted(chosen), ok

    def take(self, chosen: list[int]) -> tuple[RolloutBatch, int]:
        """Remove the chosen groups as the update batch; drop the oldest leftovers beyond capacity.
        Returns (batch, number of discarded rollouts)."""
        groups = self._group_rows()
        rows = torch.cat([groups[k] for k in chosen])
        left = [k for k in range(len(groups)) if k not in set(chosen)]
        kept, dropped = left[max(len(left) - self.capacity, 0) :], left[: max(len(left) - self.capacity, 0)]
        discarded = sum(len(groups[k]) for k in dropped)
        batch = self.pending.select(rows)
        self.pending = self.pending.select(torch.cat([groups[k] for k in kept])) if kept else None
        return batch, discarded

    # ---------------------------------------------------------------- checkpoint

    def state_dict(self) -> dict:
        if self.pending is None:
            return {"pending": None}
        b = self.pending
        return {
            "pending": {
                "ids": b.ids,
                "valid": b.valid,
                "prompt_len": b.prompt_len,
                "response_mask": b.response_mask,
                "rollout_log_prob": b.rollout_log_prob,
                "group_ids": b.group_ids,
                "rewards": b.rewards,
                "advantages": b.advantages,
                "problems": torch.tensor([[p.a, p.b, p.template] for p in b.problems], dtype=torch.long),
            }
        }

    def load_state_dict(self, state: dict) -> None:
        p = state["pending"]
        if p is None:
            self.pending = None
            return
        problems = [Problem(*row) for row in p["problems"].tolist()]
        self.pending = RolloutBatch(**{k: v for k, v in p.items() if k != "problems"}, problems=problems)


def _first_occurrence(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unique ids in order of first appearance, and the row index of each first appearance."""
    seen: dict[int, int] = {}
    for i, gid in enumerate(ids.tolist()):
        seen.setdefault(gid, i)
    return torch.tensor(list(seen)), torch.tensor(list(seen.values()))
