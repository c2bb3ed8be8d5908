"""cancelctl's V1 trainer for verl 0.9.1: the stock sync trainer with the batch orders of [C] §4
(docs/losses.md#batching-strategies).

Registered with verl's own `@register_trainer("cancelctl")` and selected with
`trainer.v1.trainer_mode=cancelctl` plus `+trainer.v1.cancelctl.batching=<order>` (layout.py writes
both) and optionally `+trainer.v1.cancelctl.poll_interval=<s>` (the replay buffer's poll); the
TaskRunner imports this module through the `verl.plugins` entry point (plugin_trainer.py).
No fork and no patching: it overrides three of `PPOTrainer`'s methods.

- `_balance_batch` (verl runs it on every step, between reward and old-log-prob, so *before*
  advantages exist) reorders the sampled batch. verl then gives DP rank r the r-th contiguous slice
  of the batch, and each rank iterates its slice in consecutive mini-batches of
  `ppo_mini_batch_size × n / dp` rows (`actor.shuffle` off), so the order decides which rows share a
  (mini-batch, rank) slot:
  * `query_preserved`: groups are cut, in arrival order, into mini-batches of whole groups, and each
    mini-batch's groups are spread over the DP ranks by verl's own balancer
    (`get_seqlen_balanced_partitions`, equal counts) on summed group workloads. Every mini-batch
    and every rank's share of it holds whole groups; micro-batches then hold whole groups too:
    fixed micro-batches are a multiple of G (layout.py), dynamic ones get `force_group_size=G`
    (`_update_actor`, honoured by verl's `rearrange_micro_batches`).
  * `sign_split` (negative control): rows with reward above their group's mean (Â > 0), then
    reward equal to it (Â = 0), then below it (Â < 0), cut into mini-batches and balanced over
    ranks row by row. The sign comes from `rm_scores`: for GRPO (`norm_adv_by_std_in_grpo`, no
    KL in reward) sign(Â_i) = sign(R_i − mean_group R) exactly. verl's mini-batches have one fixed
    size, so a mini-batch mixes signs only where P and N rows do not fill whole mini-batches and
    the Â = 0 rows cannot pad the gap; `batching/sign_mixed_minibatches` counts such mini-batches.
  * `default`: verl's own `_balance_batch`.
- verl's padding rows (`trainer/ppo/padding_utils.py`: one shared `pad…` uid, zero tokens, zero
  reward) are cut into pseudo-groups of G, so they never share a slot with a real group.
- `batching/split_groups` counts real groups whose rows land in more than one (mini-batch, rank)
  slot, logged every step: 0 under query_preserved.

Pitfall handled in `__init__`: verl switches behaviour on `trainer_mode != "sync"` (the async
paths), and "sync" cannot be re-registered, so the mode is set back to "sync" before
`PPOTrainer.__init__` reads it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np
import torch
from omegaconf import open_dict
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions, log_seqlen_unbalance

from cancelctl.jobs.heartbeat import beat_phase

logger = logging.getLogger(__name__)

TRAINER_NAME = "cancelctl"
ORDERS = ("default", "query_preserved", "sign_split")
PADDING_UID_PREFIX = "pad"  # verl's padding rows: uid f"pad{uuid4().hex}" (padding_utils.py)


def row_group_ids(keys: Sequence[str]) -> list[str]:
    """The group (prompt uid) of each row; verl's TransferQueue key is `{uid}_{session}_{index}`."""
    return [key.split("_")[0] for key in keys]


def group_units(group_ids: Sequence[str], group_size: int) -> list[list[int]]:
    """Rows of each group, groups in order of first appearance; padding rows in chunks of G.

    Raises if a real group does not hold exactly G rows: a slot of whole groups needs equal groups.
    """
    rows: dict[str, list[int]] = {}
    for i, gid in enumerate(group_ids):
        rows.setdefault(gid, []).append(i)
    units: list[list[int]] = []
    for gid, members in rows.items():
        if gid.startswith(PADDING_UID_PREFIX):
            if len(members) % group_size:
                raise ValueError(f"{len(members)} padding rows do not fill whole groups of {group_size}")
            units += [members[i : i + group_size] for i in range(0, len(members), group_size)]
        elif len(members) != group_size:
            raise ValueError(
                f"query_preserved needs every group complete: group {gid} has {len(members)} rows, not "
                f"G={group_size} (a failed rollout); whole-group mini-batches cannot be formed"
            )
        else:
            units.append(members)
    return units


def slot_order(units: Sequence[Sequence[int]], workloads: Sequence[float], dp_size: int, rows_per_minibatch: int):
    """Row order for verl's dispatch: units cut into mini-batches in order, each mini-batch's units
    spread over the DP ranks by verl's balancer at equal counts. Returns (order, rank_partitions)
    where rank_partitions[r] lists the rows rank r receives (for verl's balance metrics).

    Units within a mini-batch must have equal sizes (groups of G, or single rows).
    """
    n_rows = sum(len(u) for u in units)
    if n_rows % rows_per_minibatch:
        raise ValueError(f"{n_rows} rows are not whole mini-batches of {rows_per_minibatch}")
    slots: list[list[list[int]]] = [[] for _ in range(dp_size)]  # rank -> list of mini-batch slots
    start = 0
    while start < len(units):
        minibatch, rows = [], 0
        while rows < rows_per_minibatch:
            minibatch.append(units[start])
            rows += len(units[start])
            start += 1
        if rows != rows_per_minibatch or len(minibatch) % dp_size:
            raise ValueError(
                f"a mini-batch of {rows_per_minibatch} rows cannot hold whole units of {len(minibatch[0])} "
                f"rows split equally over {dp_size} data-parallel ranks"
            )
        unit_loads = [sum(workloads[i] for i in unit) for unit in minibatch]
        for rank, part in enumerate(get_seqlen_balanced_partitions(unit_loads, k_partitions=dp_size, equal_size=True)):
            slots[rank].append([i for u in sorted(part) for i in minibatch[u]])
    rank_rows = [[i for slot in rank_slots for i in slot] for rank_slots in slots]
    return [i for rows in rank_rows for i in rows], rank_rows


def query_preserved_order(group_ids, seq_lens, dp_size: int, rows_per_minibatch: int, group_size: int):
    units = group_units(group_ids, group_size)
    return slot_order(units, _workloads(seq_lens), dp_size, rows_per_minibatch)


def advantage_signs(group_ids: Sequence[str], rewards: Sequence[float]) -> np.ndarray:
    """sign(R_i − mean of R over the row's group): the sign of the GRPO advantage [D eq. 43]."""
    rewards = np.asarray(rewards, dtype=np.float64)
    ids = np.asarray(group_ids, dtype=object)
    signs = np.zeros(len(rewards), dtype=np.int64)
    for gid in dict.fromkeys(group_ids):
        rows = np.nonzero(ids == gid)[0]
        centered = rewards[rows] - rewards[rows].mean()
        signs[rows] = np.where(np.abs(centered) <= 1e-9 * (1 + np.abs(rewards[rows]).max()), 0, np.sign(centered))
    return signs


def sign_split_order(group_ids, rewards, seq_lens, dp_size: int, rows_per_minibatch: int):
    signs = advantage_signs(group_ids, rewards)
    rows = [i for sign in (1, 0, -1) for i in np.nonzero(signs == sign)[0].tolist()]
    return slot_order([[i] for i in rows], _workloads(seq_lens), dp_size, rows_per_minibatch)


def minibatch_slots(n_rows: int, dp_size: int, rows_per_minibatch: int) -> list[list[list[int]]]:
    """Positions (after reordering) that verl puts in each (mini-batch, rank) slot: [k][r] -> positions."""
    per_rank = n_rows // dp_size
    per_slot = rows_per_minibatch // dp_size
    return [
        [list(range(r * per_rank + k * per_slot, r * per_rank + (k + 1) * per_slot)) for r in range(dp_size)]
        for k in range(per_rank // per_slot)
    ]


def split_groups(group_ids: Sequence[str], slots: Sequence[Sequence[Sequence[int]]]) -> int:
    """Real groups whose rows are in more than one (mini-batch, rank) slot (positions → group ids)."""
    where: dict[str, set[tuple[int, int]]] = {}
    for k, ranks in enumerate(slots):
        for r, positions in enumerate(ranks):
            for p in positions:
                where.setdefault(group_ids[p], set()).add((k, r))
    return sum(len(s) > 1 for gid, s in where.items() if not gid.startswith(PADDING_UID_PREFIX))


def sign_mixed_minibatches(signs: Sequence[int], slots: Sequence[Sequence[Sequence[int]]]) -> int:
    """Mini-batches holding both Â > 0 and Â < 0 rows (positions → sign)."""
    mixed = 0
    for ranks in slots:
        present = {signs[p] for positions in ranks for p in positions}
        mixed += 1 in present and -1 in present
    return mixed


def _workloads(seq_lens) -> list[float]:
    return calculate_workload(torch.as_tensor(list(seq_lens), dtype=torch.int64)).tolist()


@register_trainer(TRAINER_NAME)
class CancelctlTrainer(PPOTrainerSync):
    """verl's sync V1 trainer with group-preserving / sign-split batch orders (module docstring)."""

    def __init__(self, config):
        settings = config.trainer.v1.get(TRAINER_NAME, None) or {}
        self.batching = settings.get("batching", "default")
        if self.batching not in ORDERS:
            raise ValueError(f"trainer.v1.{TRAINER_NAME}.batching={self.batching!r}: expected one of {ORDERS}")
        actor = config.actor_rollout_ref.actor
        if self.batching != "default" and actor.shuffle:
            raise ValueError(
                f"trainer.v1.{TRAINER_NAME}.batching={self.batching} needs actor_rollout_ref.actor.shuffle=False: "
                "verl's mini-batch iterator would shuffle rows across the order this trainer builds"
            )
        poll = settings.get("poll_interval", None)
        if poll is not None and not float(poll) > 0:
            raise ValueError(f"trainer.v1.{TRAINER_NAME}.poll_interval={poll!r}: expected seconds > 0")
        self.poll_interval = None if poll is None else float(poll)
        with open_dict(config):  # verl's own code paths test `trainer_mode != "sync"` (module doc)
            config.trainer.v1.trainer_mode = "sync"
        super().__init__(config)

    def _build_replay_buffer(self):
        """verl's replay buffer (or the custom sampler), polling every `poll_interval` s if set.

        verl fixes the poll at 2.0 s (`trainer/ppo/v1/replay_buffer.py:144`; no config key reaches it for
        its own buffer, `trainer_base.py:155-185`), and a step's generation phase cannot end sooner
        than one poll: on CPU that poll was most of a step (cpu/overrides.py sets 0.05 s).
        """
        buffer = super()._build_replay_buffer()
        if self.poll_interval is not None:
            buffer.poll_interval = self.poll_interval
        return buffer

    # ------------------------------------------------------------------ batch order

    def _actor_dp_size(self) -> int:
        worker_group = self.actor_rollout_wg
        if "actor" not in worker_group._dispatch_info:
            worker_group._dispatch_info["actor"] = worker_group._query_dispatch_info("actor")
        return max(worker_group._dispatch_info["actor"]) + 1

    def _rows_per_minibatch(self) -> int:
        return self.config.actor_rollout_ref.actor.ppo_mini_batch_size * self.config.actor_rollout_ref.rollout.n

    # ------------------------------------------------------------------ progress

    # A step's phases, each one a beat for the stall watchdog (cancelctl.jobs.heartbeat): a step that
    # takes many minutes (long rollouts) still shows progress between its logged ends.
    def _validate(self):
        metrics = super()._validate()
        beat_phase("validation")
        return metrics

    def _save_checkpoint(self):
        super()._save_checkpoint()
        beat_phase("checkpoint")

    def _compute_old_log_prob(self, batch, metrics):
        batch = super()._compute_old_log_prob(batch, metrics)
        beat_phase("old log-probs")
        return batch

    # ------------------------------------------------------------------ batch order

    def _balance_batch(self, batch, metrics, logging_prefix="global_seqlen", keep_minibatch=False):
        beat_phase("rollout")  # verl balances a step's batch once its rollouts and rewards are in
        if self.batching == "default":
            return super()._balance_batch(batch, metrics, logging_prefix=logging_prefix, keep_minibatch=keep_minibatch)
        from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size

        dp_size = self._actor_dp_size()
        batch = upsample_batch_to_divisible_size(
            batch, self._get_required_batch_multiple(dp_size), self.tokenizer.eos_token_id
        )
        rewards = self._sequence_rewards(batch) if self.batching == "sign_split" else None
        metrics.update(
            order_batch(
                batch,
                self.batching,
                dp_size=dp_size,
                rows_per_minibatch=self._rows_per_minibatch(),
                group_size=self.config.actor_rollout_ref.rollout.n,
                rewards=rewards,
                logging_prefix=logging_prefix,
            )
        )
        return batch

    @staticmethod
    def _sequence_rewards(batch) -> list[float]:
        import transfer_queue as tq

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["rm_scores"])
        return [float(row.sum()) for row in data["rm_scores"]]

    # ------------------------------------------------------------------ rollout–trainer conformance

    def _compute_old_log_prob(self, batch, metrics):
        """verl's old-log-prob pass, then the step's conformance figures (conformance.py) from the batch's
        `rollout_log_probs` and the `old_log_probs` just written, whichever rollout produced them. Not in
        bypass mode (old_log_probs are then the rollout's own) or without rollout log-probs."""
        batch = super()._compute_old_log_prob(batch, metrics)
        corr = self.config.algorithm.get("rollout_correction", None)
        if self.config.actor_rollout_ref.rollout.calculate_log_probs and not (corr and corr.get("bypass_mode", False)):
            metrics.update(self._conformance(batch))
        return batch

    @staticmethod
    def _conformance(batch) -> dict[str, float]:
        import transfer_queue as tq

        from cancelctl.backends.verl.conformance import conformance_figures

        fields = ["old_log_probs", "rollout_log_probs", "response_mask"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        old, rollout, mask = (data[f].to_padded_tensor(padding=0.0) if data[f].is_nested else data[f] for f in fields)
        width = min(old.shape[-1], rollout.shape[-1], mask.shape[-1])  # responses start at column 0
        return conformance_figures(old[:, :width], rollout[:, :width], mask[:, :width])

    def _update_actor(self, batch, metrics):
        if self.batching == "query_preserved" and self.config.actor_rollout_ref.actor.use_dynamic_bsz:
            # token-balanced micro-batches keep G consecutive rows (one group, by our order) together
            batch.extra_info["force_group_size"] = self.config.actor_rollout_ref.rollout.n
        batch = super()._update_actor(batch, metrics)
        beat_phase("update")
        return batch


def order_batch(batch, batching: str, *, dp_size, rows_per_minibatch, group_size, rewards=None, logging_prefix="global_seqlen"):
    """Reorder a V1 batch (a KVBatchMeta: keys, tags with `seq_len`) in place for `batching`;
    returns the step metrics (verl's balance statistics plus the order's own checks)."""
    group_ids = row_group_ids(batch.keys)
    seq_lens = [int(tag["seq_len"]) for tag in batch.tags]
    if batching == "query_preserved":
        order, rank_rows = query_preserved_order(group_ids, seq_lens, dp_size, rows_per_minibatch, group_size)
    elif batching == "sign_split":
        if rewards is None:
            raise ValueError("sign_split needs the rows' rewards")
        order, rank_rows = sign_split_order(group_ids, rewards, seq_lens, dp_size, rows_per_minibatch)
    else:
        raise ValueError(f"no cancelctl order for batching {batching!r}")
    batch.reorder(order)
    metrics = log_seqlen_unbalance(seqlen_list=seq_lens, partitions=rank_rows, prefix=logging_prefix)
    slots = minibatch_slots(len(order), dp_size, rows_per_minibatch)
    ordered_ids = [group_ids[i] for i in order]
    metrics["batching/split_groups"] = float(split_groups(ordered_ids, slots))
    if rewards is not None:
        signs = advantage_signs(group_ids, rewards)
        metrics["batching/sign_mixed_minibatches"] = float(sign_mixed_minibatches([int(signs[i]) for i in order], slots))
    metrics["batching/minibatches"] = float(math.ceil(len(order) / rows_per_minibatch))
    return metrics
