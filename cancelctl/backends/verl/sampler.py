"""`reward_balanced(min_frac=η)` on verl 0.9.1's V1 trainer: a custom replay-buffer sampler [C §4].

Plugged in with verl's own setting `trainer.v1.sampler.custom_sampler.{path,name}` (loaded by
`PPOTrainer._build_replay_buffer`, which passes exactly `trainer_mode, trainer_config,
max_off_policy_threshold, max_off_policy_strategy, sampler_kwargs, refill_fn`). layout.py passes
`sampler_kwargs.min_frac` and `.max_rounds` and sets `data.gen_batch_size=1`, so `refill_fn(k)`
accepts any k.

Per training step (docs/losses.md#batching-strategies, the lab's `RewardBalancedBuffer` semantics):
1. wait until no prompt of the step is pending or running (sync mode is on-policy: the rollout
   replicas sleep after sampling, so nothing may stay in flight);
2. choose `batch_size` whole finished groups greedily (`choose_balanced_groups`) so that the update
   batch B has n⁺ ≥ η|B| and n⁻ ≥ η|B|; if that fails, generate another round of `batch_size`
   prompts through verl's `refill_fn` and go to 1, at most `max_rounds` rounds a step, after which
   the best batch found is trained (`batching/balanced` = 0 says so);
3. keep the newest `batch_size` leftover groups for the next step and discard older ones
   (generated, never trained, counted as compute).
Advantages do not exist at sampling time (verl computes them after `_balance_batch`), so n⁺ / n⁻
count rows whose reward (`rm_scores` summed over tokens) is above / below their group's mean:
the sign of the GRPO advantage [D eq. 43]. `rm_scores` is written by the streaming reward loop
(`reward_model.enable=False` or its own resource pool), as for verl's own DAPO filter.

Metrics (the lab's keys): `batching/gen_rounds`, `generated_rollouts`, `discarded_rollouts`,
`discarded_rollouts_cum`, `balanced`, `pos_frac`, `neg_frac`, and the response tokens
`batching/gen_tokens` (every rollout generated this step, discarded ones included) and
`batching/discarded_gen_tokens`; compute.py takes `compute/gen_tokens` from `batching/gen_tokens`.
Validation (`partition_id="val"`) samples as verl's own buffer does.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import transfer_queue as tq
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer


@dataclass(frozen=True)
class GroupStats:
    """One finished prompt group in the buffer."""

    uid: str
    rows: int
    pos: int  # rows with reward above the group mean (Â > 0)
    neg: int  # rows with reward below it (Â < 0)
    tokens: int  # response tokens of the group's rollouts
    global_steps: int  # the step that generated it


def choose_balanced_groups(
    groups: list[GroupStats], n_groups: int, min_frac: float
) -> tuple[list[int], bool]:
    """Greedy choice of `n_groups` groups (indices into `groups`, oldest first) for an update batch B
    with n⁺ ≥ η|B| and n⁻ ≥ η|B|, and whether the choice meets it.

    The lab's rule (backends/lab/batching.py, `RewardBalancedBuffer.choose`): each slot takes the
    group that most reduces the remaining n⁺/n⁻ deficit; ties go to groups with any Â ≠ 0, then
    to the oldest, so stale rollouts leave first.
    """
    if not groups:
        return [], False
    rows_in_batch = sum(g.rows for g in groups[:n_groups])
    need = math.ceil(min_frac * rows_in_batch)
    chosen: list[int] = []
    have_pos = have_neg = 0
    remaining = list(range(len(groups)))
    for _ in range(min(n_groups, len(groups))):
        gap_pos, gap_neg = max(need - have_pos, 0), max(need - have_neg, 0)
        best = max(
            remaining,
            key=lambda k: (min(groups[k].pos, gap_pos) + min(groups[k].neg, gap_neg), groups[k].pos + groups[k].neg > 0, -k),
        )
        remaining.remove(best)
        chosen.append(best)
        have_pos, have_neg = have_pos + groups[best].pos, have_neg + groups[best].neg
    rows = sum(groups[k].rows for k in chosen)
    ok = len(chosen) == n_groups and have_pos >= min_frac * rows and have_neg >= min_frac * rows
    return sorted(chosen), ok


def reward_signs(rewards: list[float]) -> tuple[int, int]:
    """(rows above, rows below) the group's mean reward."""
    r = np.asarray(rewards, dtype=np.float64)
    centered = r - r.mean()
    tol = 1e-9 * (1 + np.abs(r).max()) if len(r) else 0.0
    return int((centered > tol).sum()), int((centered < -tol).sum())


class RewardBalancedReplayBuffer(ReplayBuffer):
    """verl's sync replay buffer with reward-balanced selection of the update batch (module doc)."""

    def __init__(
        self,
        trainer_mode,
        trainer_config,
        max_off_policy_threshold,
        max_off_policy_strategy,
        sampler_kwargs,
        refill_fn=None,
    ):
        if trainer_mode != "sync":
            raise ValueError(f"RewardBalancedReplayBuffer runs with the sync trainer, not {trainer_mode!r}")
        if refill_fn is None:
            raise ValueError("RewardBalancedReplayBuffer needs verl's refill_fn to generate more rounds")
        kwargs = dict(sampler_kwargs or {})
        super().__init__(
            trainer_mode=trainer_mode,
            trainer_config=trainer_config,
            max_off_policy_threshold=max_off_policy_threshold,
            max_off_policy_strategy=max_off_policy_strategy,
            sampler_kwargs=sampler_kwargs,
            poll_interval=float(kwargs.get("poll_interval", 2.0)),
            refill_fn=refill_fn,
        )
        self.min_frac = float(kwargs.get("min_frac", 0.25))
        self.max_rounds = int(kwargs.get("max_rounds", 8))
        if not 0 < self.min_frac <= 0.5 or self.max_rounds < 1:
            raise ValueError(f"sampler_kwargs min_frac in (0, 0.5] and max_rounds >= 1, got {kwargs}")
        self.discarded_cum = 0
        self._stats_cache: dict[str, GroupStats] = {}

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        if partition_id == "val":
            return super().sample(global_steps, partition_id, batch_size)
        rounds, last_debug = 1, time.time()  # round 1 was submitted by the trainer's prepare_step
        while True:
            self._sync_metadata_from_transfer_queue()
            if self.pending_keys[partition_id] or self.running_keys[partition_id]:
                last_debug = self._wait_for_next_poll(partition_id, last_debug)
                continue
            groups = self._finished_groups(partition_id)
            chosen, balanced = choose_balanced_groups(groups, batch_size, self.min_frac)
            if len(groups) >= batch_size and (balanced or rounds >= self.max_rounds):
                break
            more = batch_size if rounds < self.max_rounds else batch_size - len(groups)
            self.refill_fn(more)
            rounds += 1
        return self._take(partition_id, groups, chosen, balanced, rounds, global_steps, batch_size)

    def _finished_groups(self, partition_id: str) -> list[GroupStats]:
        """Terminal groups with trajectories, oldest first; empty failed groups are dropped."""
        partition = self.partitions[partition_id]
        keys_by_uid: dict[str, list[str]] = {}
        for key in partition:
            keys_by_uid.setdefault(key.split("_")[0], []).append(key)
        terminal = self.finished_keys[partition_id] | self.failure_keys[partition_id]
        empty = {uid for uid in terminal if uid not in keys_by_uid}
        self._clear_groups(partition_id, empty)
        terminal -= empty
        new = [uid for uid in terminal if uid not in self._stats_cache]
        if new:
            keys = [k for uid in new for k in keys_by_uid[uid]]
            try:
                data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["rm_scores"])
            except Exception as exc:  # noqa: BLE001 - say what the sampler needs, with verl's reason
                raise RuntimeError(
                    "reward_balanced selects on rewards at sampling time, but the finished rollouts carry no "
                    "rm_scores: use a rule-based reward (reward.reward_model.enable=False) or a reward model "
                    f"with its own resource pool (enable_resource_pool=True); TransferQueue said: {exc}"
                ) from exc
            rewards: dict[str, list[float]] = {}
            for key, row in zip(keys, data["rm_scores"], strict=True):
                rewards.setdefault(key.split("_")[0], []).append(float(row.sum()))
            for uid in new:
                pos, neg = reward_signs(rewards[uid])
                self._stats_cache[uid] = GroupStats(
                    uid=uid,
                    rows=len(keys_by_uid[uid]),
                    pos=pos,
                    neg=neg,
                    tokens=sum(int(partition[k].get("response_len", 0)) for k in keys_by_uid[uid]),
                    global_steps=int(self.prompt_global_steps[partition_id].get(uid, 0)),
                )
        steps = self.prompt_global_steps[partition_id]
        return [self._stats_cache[uid] for uid in sorted(terminal, key=lambda u: (steps.get(u, 0), u))]

    def _take(self, partition_id, groups, chosen, balanced, rounds, global_steps, batch_size):
        chosen_set = set(chosen)
        left = [k for k in range(len(groups)) if k not in chosen_set]
        n_drop = max(len(left) - batch_size, 0)  # keep the newest batch_size leftovers (groups are oldest first)
        dropped = [groups[k] for k in left[:n_drop]]
        self._clear_groups(partition_id, {g.uid for g in dropped})
        for g in dropped:
            self._stats_cache.pop(g.uid, None)
        picked = [groups[k] for k in chosen]
        for g in picked:
            self._stats_cache.pop(g.uid, None)
        batch = self._materialize_batch(partition_id, [g.uid for g in picked], dict(self.partitions[partition_id]))

        fresh = [g for g in groups if g.global_steps == global_steps]
        discarded = sum(g.rows for g in dropped)
        self.discarded_cum += discarded
        rows = sum(g.rows for g in picked)
        metrics = {
            "batching/gen_rounds": float(rounds),
            "batching/generated_rollouts": float(sum(g.rows for g in fresh)),
            "batching/gen_tokens": float(sum(g.tokens for g in fresh)),
            "batching/discarded_rollouts": float(discarded),
            "batching/discarded_rollouts_cum": float(self.discarded_cum),
            "batching/discarded_gen_tokens": float(sum(g.tokens for g in dropped)),
            "batching/balanced": float(balanced),
            "batching/pos_frac": sum(g.pos for g in picked) / max(rows, 1),
            "batching/neg_frac": sum(g.neg for g in picked) / max(rows, 1),
        }
        return batch, metrics
