"""The batching strategies (docs/losses.md#batching-strategies) inside verl 0.9.1's V1 trainer, on verl's own batch objects (no GPU, no Ray).

- query_preserved / sign_split: the registered trainer's `_balance_batch` reorders a real V1 batch
  (a TransferQueue `KVBatchMeta`); the rows then go through verl's own DP chunking
  (`BatchData.chunk`), mini-batch iterator (`tensordict_utils.make_iterator`) and micro-batcher
  (`engine.utils.prepare_micro_batches`, fixed and dynamic), as `train_mini_batch` runs them.
- reward_balanced: the sampler is built by verl's own `PPOTrainer._build_replay_buffer` from the
  rendered config, over an in-memory stand-in for the TransferQueue store (kv_list / kv_batch_get /
  kv_clear: TQ itself needs Ray actors) filled with synthetic finished groups.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

pytestmark = pytest.mark.verl

tq = pytest.importorskip("transfer_queue", reason="verl's V1 trainer needs TransferQueue (verl[verl-core])")
pytest.importorskip("verl")

from omegaconf import OmegaConf, open_dict  # noqa: E402
from transfer_queue import KVBatchMeta  # noqa: E402

import cancelctl.backends.verl.plugin_trainer  # noqa: E402,F401  (what the verl.plugins entry point loads)
from cancelctl.backends.verl import compose_run  # noqa: E402
from cancelctl.backends.verl.compute import ComputeAccount  # noqa: E402
from cancelctl.backends.verl.render import render_overrides  # noqa: E402
from cancelctl.backends.verl.sampler import RewardBalancedReplayBuffer  # noqa: E402
from cancelctl.backends.verl.trainer import CancelctlTrainer, advantage_signs  # noqa: E402
from verl.protocol import BatchData  # noqa: E402
from verl.trainer.ppo.v1 import PPOTrainer, PPOTrainerSync, get_trainer_cls  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.engine.utils import prepare_micro_batches  # noqa: E402

G, PROMPTS, DP, MINI_PROMPTS = 4, 16, 2, 4  # 64 rows, mini-batches of 16 rows, 8 per rank


# ------------------------------------------------------------------ a V1 batch, as verl builds it


def v1_batch(rewards_by_group: list[list[float]], seed: int = 0):
    """A sampled V1 batch in completion order (rows of groups interleaved), and its row data."""
    rng = random.Random(seed)
    rows = []
    for g, rewards in enumerate(rewards_by_group):
        uid = f"u{g:03d}x"
        for s, r in enumerate(rewards):
            rows.append((f"{uid}_{s}_0", uid, r, rng.randint(8, 200)))
    rng.shuffle(rows)
    meta = KVBatchMeta(
        keys=[k for k, *_ in rows],
        tags=[{"status": "success", "seq_len": n, "response_len": n - 4} for *_, n in rows],
        partition_id="train",
    )
    data = {k: (uid, r, n) for k, uid, r, n in rows}
    return meta, data


def row_tensordict(meta: KVBatchMeta, data) -> "tu.TensorDict":
    """The rows of `meta`, in its order, as the worker's TensorDict (nested input_ids, uid)."""
    lengths = [data[k][2] for k in meta.keys]
    return tu.get_tensordict(
        {
            "input_ids": torch.nested.as_nested_tensor([torch.ones(n, dtype=torch.long) for n in lengths], layout=torch.jagged),
            "uid": [data[k][0] for k in meta.keys],
            "reward": torch.tensor([data[k][1] for k in meta.keys]),
        }
    )


class ActorWorkers:
    """The actor worker group as the trainer sees it: DP size, and `update_actor` recording its batch."""

    def __init__(self):
        self._dispatch_info = {"actor": list(range(DP))}
        self.updated = None

    def update_actor(self, batch):
        self.updated = batch
        return {"metrics": {"mfu": [0.0]}}


def trainer_for(batching: str, dynamic: bool = False) -> CancelctlTrainer:
    """The registered trainer with the config keys it reads, without the Ray workers __init__ starts."""
    cfg = OmegaConf.create(
        {
            "trainer": {"critic_warmup": 0, "v1": {"trainer_mode": "cancelctl", "cancelctl": {"batching": batching}}},
            "actor_rollout_ref": {
                "actor": {
                    "ppo_mini_batch_size": MINI_PROMPTS, "shuffle": False, "use_dynamic_bsz": dynamic,
                    "calculate_entropy": False, "entropy_coeff": 0.0, "ppo_epochs": 1, "data_loader_seed": 0,
                },
                "rollout": {"n": G, "temperature": 1.0},
            },
        }
    )
    trainer = object.__new__(CancelctlTrainer)
    trainer.config, trainer.batching, trainer.use_critic, trainer.global_steps = cfg, batching, False, 1
    trainer.actor_rollout_wg = ActorWorkers()
    trainer.tokenizer = type("Tok", (), {"eos_token_id": 0})()
    return trainer


def update_info(trainer: CancelctlTrainer, meta: KVBatchMeta) -> dict:
    """What the trainer's `_update_actor` hands verl's workers with the batch (its extra_info)."""
    trainer._update_actor(meta, {})
    return dict(trainer.actor_rollout_wg.updated.extra_info)


def slots_through_verl(meta, data, extra_info: dict, *, dynamic: bool, micro_rows: int = G):
    """(rank, mini-batch, micro-batch) -> uids, through verl's own DP chunking, the worker's copy of the
    batch's extra_info into non-tensor fields (`transferqueue_utils._async_meta_to_realdata`), its
    mini-batch iterator (`train_mini_batch`) and micro-batcher (`prepare_micro_batches`)."""
    out = {}
    for rank, part in enumerate(BatchData(row_tensordict(meta, data)).chunk(DP)):
        part = part.unlock_()  # a worker's copy, fetched from TransferQueue, is not locked
        for key, val in extra_info.items():
            tu.assign_non_tensor_data(tensor_dict=part, key=key, val=val)
        mini_rows = tu.pop(part, key="mini_batch_size", default=None) // DP
        shuffle = tu.pop(part, key="dataloader_kwargs", default={})
        minis = tu.make_iterator(part, mini_batch_size=mini_rows, epochs=1, seed=rank, dataloader_kwargs=shuffle)
        for k, mini in enumerate(minis):
            # train_batch's defaults for keys the batch does not set (engine_workers.py)
            tu.assign_non_tensor(mini, use_dynamic_bsz=dynamic, micro_batch_size_per_gpu=micro_rows, max_token_len_per_gpu=1000)
            micro_batches, _ = prepare_micro_batches(mini)
            for m, micro in enumerate(micro_batches):
                out[(rank, k, m)] = list(micro["uid"])
    return out


def split_groups(slots, level: int) -> int:
    """Groups whose rows fall in more than one slot, slots keyed by the first `level` coordinates."""
    where = {}
    for key, uids in slots.items():
        for uid in uids:
            where.setdefault(uid, set()).add(key[:level])
    return sum(len(s) > 1 for s in where.values())


def random_groups(seed=1):
    rng = random.Random(seed)
    return [[float(rng.random() < 0.5) for _ in range(G)] for _ in range(PROMPTS)]


# ------------------------------------------------------------------ query_preserved


def test_the_plugin_registers_the_trainer_with_verl():
    assert get_trainer_cls("cancelctl") is CancelctlTrainer and issubclass(CancelctlTrainer, PPOTrainerSync)


def test_the_trainer_hands_verl_the_sync_mode(monkeypatch):
    seen = {}
    monkeypatch.setattr(PPOTrainer, "__init__", lambda self, config: seen.update(mode=config.trainer.v1.trainer_mode))
    cfg = OmegaConf.create(
        {"trainer": {"v1": {"trainer_mode": "cancelctl", "cancelctl": {"batching": "sign_split"}}},
         "actor_rollout_ref": {"actor": {"shuffle": False}}}
    )
    OmegaConf.set_struct(cfg, True)
    trainer = CancelctlTrainer(cfg)
    assert seen["mode"] == "sync" and trainer.batching == "sign_split"
    cfg.trainer.v1.trainer_mode, cfg.actor_rollout_ref.actor.shuffle = "cancelctl", True
    with pytest.raises(ValueError, match="shuffle=False"):
        CancelctlTrainer(cfg)


def test_the_trainer_sets_the_replay_buffer_poll(monkeypatch):
    """verl fixes the poll at 2 s; `trainer.v1.cancelctl.poll_interval` (the CPU overrides) shortens it."""
    from cancelctl.backends.verl.compose import VerlComposer, verl_config_dir
    from cancelctl.backends.verl.cpu.overrides import CPU_OVERRIDES, POLL_INTERVAL_S

    monkeypatch.setattr(PPOTrainer, "__init__", lambda self, config: setattr(self, "config", config))
    cfg = VerlComposer(verl_config_dir(), deep=False).compose("ppo_trainer", list(CPU_OVERRIDES))
    trainer = CancelctlTrainer(cfg)
    trainer.trainer_mode, trainer._add_prompts_to_generate = "sync", lambda k: None
    assert trainer._build_replay_buffer().poll_interval == POLL_INTERVAL_S < 2.0
    with open_dict(cfg):
        del cfg.trainer.v1.cancelctl.poll_interval
    plain = CancelctlTrainer(cfg)
    plain.trainer_mode, plain._add_prompts_to_generate = "sync", lambda k: None
    assert plain._build_replay_buffer().poll_interval == 2.0  # verl's default when not set
    with open_dict(cfg):
        cfg.trainer.v1.cancelctl.poll_interval = 0
    with pytest.raises(ValueError, match="poll_interval"):
        CancelctlTrainer(cfg)


@pytest.mark.parametrize("dynamic", [False, True], ids=["fixed-micro", "dynamic-bsz"])
def test_query_preserved_keeps_every_group_whole_on_ranks_minibatches_and_microbatches(dynamic):
    meta, data = v1_batch(random_groups())
    metrics = {}
    trainer = trainer_for("query_preserved", dynamic=dynamic)
    out = trainer._balance_batch(meta, metrics)
    info = update_info(trainer, out)
    assert info.get("force_group_size") == (G if dynamic else None)  # fixed micro-batches: multiples of G
    slots = slots_through_verl(out, data, info, dynamic=dynamic)
    assert len({k[:2] for k in slots}) == DP * PROMPTS // MINI_PROMPTS  # 2 ranks x 4 mini-batches
    assert split_groups(slots, 1) == split_groups(slots, 2) == split_groups(slots, 3) == 0
    assert sum(len(u) for u in slots.values()) == PROMPTS * G and metrics["batching/split_groups"] == 0
    assert any(len(u) > G for u in slots.values()) == dynamic  # dynamic micro-batches hold several groups
    assert "global_seqlen/min" in metrics  # verl's own balance statistics


def test_verls_default_order_splits_groups_through_the_same_path():
    """The check above can fail: verl's own _balance_batch on the same batch scatters groups."""
    meta, data = v1_batch(random_groups())
    trainer = trainer_for("default")
    out = PPOTrainer._balance_batch(trainer, meta, {})
    slots = slots_through_verl(out, data, update_info(trainer, out), dynamic=False)
    assert split_groups(slots, 1) > 0 and split_groups(slots, 3) > 0


def test_query_preserved_balances_tokens_over_ranks():
    meta, data = v1_batch(random_groups(), seed=3)
    out = trainer_for("query_preserved")._balance_batch(meta, {})
    per_rank = [sum(data[k][2] for k in out.keys[r * 32 : (r + 1) * 32]) for r in range(DP)]
    total = sum(per_rank)
    assert max(per_rank) - min(per_rank) < 0.1 * total  # whole groups, still near-even ranks


def test_query_preserved_refuses_an_incomplete_group():
    groups = random_groups()
    groups[3], groups[4] = groups[3][:3], groups[4] + [1.0]  # a failed rollout (64 rows: no padding)
    meta, _ = v1_batch(groups)
    with pytest.raises(ValueError, match=r"group u00[34]x has [35] rows, not G=4"):
        trainer_for("query_preserved")._balance_batch(meta, {})


# ------------------------------------------------------------------ sign_split


def kv_rewards(data, monkeypatch):
    def kv_batch_get(keys, partition_id, select_fields=None):
        scores = [torch.tensor([0.0, data[k][1]]) for k in keys]
        return {"rm_scores": torch.nested.as_nested_tensor(scores, layout=torch.jagged)}

    monkeypatch.setattr(tq, "kv_batch_get", kv_batch_get)


def minibatch_signs(meta, data):
    """Global mini-batch k = rank r's k-th slot for every r (verl's dispatch + iterator)."""
    signs = dict(zip(meta.keys, advantage_signs([data[k][0] for k in meta.keys], [data[k][1] for k in meta.keys])))
    slots = {}
    per_rank, per_slot = len(meta) // DP, MINI_PROMPTS * G // DP
    for r in range(DP):
        for k in range(per_rank // per_slot):
            keys = meta.keys[r * per_rank + k * per_slot : r * per_rank + (k + 1) * per_slot]
            slots.setdefault(k, set()).update(signs[key] for key in keys)
    return slots


def test_sign_split_separates_positive_and_negative_rows(monkeypatch):
    # 8 groups with 2 of 4 correct + 8 all-wrong: 16 rows Â>0, 16 Â<0, 32 Â=0 between them
    groups = [[1.0, 1.0, 0.0, 0.0]] * 8 + [[0.0] * 4] * 8
    meta, data = v1_batch(groups)
    kv_rewards(data, monkeypatch)
    metrics = {}
    out = trainer_for("sign_split")._balance_batch(meta, metrics)
    signs = minibatch_signs(out, data)
    assert all(not ({1, -1} <= s) for s in signs.values()) and metrics["batching/sign_mixed_minibatches"] == 0
    assert {1} in signs.values() and {-1} in signs.values()


def test_sign_split_mixes_at_most_the_boundary_minibatch(monkeypatch):
    groups = [[1.0, 0.0, 0.0, 0.0]] * PROMPTS  # 16 pos, 48 neg, no zero rows to pad the boundary
    groups[0] = [1.0, 1.0, 0.0, 0.0]  # 17 pos: one mini-batch must mix
    meta, data = v1_batch(groups)
    kv_rewards(data, monkeypatch)
    metrics = {}
    out = trainer_for("sign_split")._balance_batch(meta, metrics)
    mixed = sum({1, -1} <= s for s in minibatch_signs(out, data).values())
    assert mixed == metrics["batching/sign_mixed_minibatches"] == 1


# ------------------------------------------------------------------ reward_balanced


class FakeStore:
    """The three TransferQueue calls verl's replay buffer makes, over a dict (tags, rm_scores)."""

    def __init__(self):
        self.partition = "train"
        self.tags: dict[str, dict] = {}
        self.scores: dict[str, float] = {}
        self.next_uid = 0
        self.step = 1

    def add_groups(self, reward_lists):
        for rewards in reward_lists:
            uid = f"g{self.next_uid:04d}x"
            self.next_uid += 1
            self.tags[uid] = {"is_prompt": True, "status": "finished", "global_steps": self.step}
            for s, r in enumerate(rewards):
                self.tags[f"{uid}_{s}_0"] = {"status": "success", "response_len": 10, "seq_len": 14, "global_steps": self.step}
                self.scores[f"{uid}_{s}_0"] = r

    def kv_list(self, partition_id=None):
        return {self.partition: dict(self.tags)} if self.tags else {}

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        return {"rm_scores": [torch.tensor([0.0, self.scores[k]]) for k in keys]}

    def kv_clear(self, keys, partition_id):
        for k in keys:
            self.tags.pop(k, None)


@pytest.fixture
def store(monkeypatch):
    s = FakeStore()
    for name in ("kv_list", "kv_batch_get", "kv_clear"):
        monkeypatch.setattr(tq, name, getattr(s, name))
    return s


def sampler_through_verl(make_run, refill, min_frac=0.25):
    """verl's own _build_replay_buffer on the rendered config of a reward_balanced run."""
    run = make_run(f"{{batching: {{strategy: reward_balanced, min_frac: {min_frac}}}}}", G=G)
    cfg = compose_run(run)
    trainer = object.__new__(PPOTrainerSync)
    trainer.config, trainer.trainer_mode = cfg, "sync"
    trainer._add_prompts_to_generate = refill
    buffer = PPOTrainer._build_replay_buffer(trainer)
    buffer.poll_interval = 0.0
    return buffer


ALL_RIGHT, ONE_RIGHT, HALF = [1.0] * G, [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]


def test_reward_balanced_sampler_accumulates_rounds_until_balanced(make_run, store):
    rounds = iter([[HALF, HALF, [0.0] * G, [0.0] * G]])
    refills = []

    def refill(k):
        refills.append(k)
        store.add_groups(next(rounds))
        return k

    buffer = sampler_through_verl(make_run, refill)
    assert isinstance(buffer, RewardBalancedReplayBuffer) and buffer.min_frac == 0.25
    store.add_groups([ALL_RIGHT, ALL_RIGHT, ALL_RIGHT, ONE_RIGHT])  # round 1 (prepare_step): 1 pos, 3 neg
    batch, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=4)
    uids = Counter(k.split("_")[0] for k in batch.keys)
    assert refills == [4] and len(uids) == 4 and set(uids.values()) == {G}  # 4 whole groups
    pos, neg = metrics["batching/pos_frac"] * 16, metrics["batching/neg_frac"] * 16
    assert pos >= 4 and neg >= 4 and metrics["batching/balanced"] == 1
    assert metrics["batching/gen_rounds"] == 2 and metrics["batching/generated_rollouts"] == 32
    assert metrics["batching/gen_tokens"] == 320 and metrics["batching/discarded_rollouts"] == 0
    assert not any(uid in store.tags for uid in uids)  # selected prompts leave (verl clears their rows after the step)
    assert sum(t.get("is_prompt", False) for t in store.tags.values()) == 4  # the 4 leftovers wait for step 2


def test_reward_balanced_sampler_settles_after_max_rounds_and_counts_discards(make_run, store):
    def refill(k):
        store.add_groups([ALL_RIGHT] * k)
        return k

    buffer = sampler_through_verl(make_run, refill)
    store.add_groups([ALL_RIGHT] * 4)
    batch, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=4)
    assert metrics["batching/balanced"] == 0 and metrics["batching/gen_rounds"] == buffer.max_rounds == 8
    # 32 groups generated, 4 trained, the newest 4 kept, 24 discarded
    assert metrics["batching/generated_rollouts"] == 128 and metrics["batching/discarded_rollouts"] == 96
    assert metrics["batching/discarded_gen_tokens"] == 960 and len(batch) == 16
    assert sum(t.get("is_prompt", False) for t in store.tags.values()) == 4

    # the generated tokens, discarded ones included, are what the compute account counts
    run = make_run("{batching: {strategy: reward_balanced}}", G=G)
    out = ComputeAccount(run).add(1, {**metrics, "response_length/mean": 10.0})
    assert out["compute/gen_tokens"] == 128 * 10


def test_reward_balanced_validation_samples_like_verl(make_run, store):
    buffer = sampler_through_verl(make_run, lambda k: k)
    store.partition = "val"
    store.add_groups([ALL_RIGHT, ALL_RIGHT])  # zero-variance groups: validation keeps every group
    batch, metrics = buffer.sample(global_steps=1, partition_id="val", batch_size=2)
    assert len(batch) == 2 * G and metrics == {}


def test_sampler_constructor_matches_verls_call():
    import inspect

    params = list(inspect.signature(RewardBalancedReplayBuffer.__init__).parameters)[1:]
    assert params == [
        "trainer_mode", "trainer_config", "max_off_policy_threshold", "max_off_policy_strategy", "sampler_kwargs", "refill_fn",
    ]


def test_reward_balanced_without_streamed_rewards_says_what_it_needs(make_run, store, monkeypatch):
    buffer = sampler_through_verl(make_run, lambda k: k)
    store.add_groups([HALF] * 4)

    def no_scores(keys, partition_id, select_fields=None):
        raise KeyError("rm_scores")

    monkeypatch.setattr(tq, "kv_batch_get", no_scores)
    with pytest.raises(RuntimeError, match="rule-based reward"):
        buffer.sample(global_steps=1, partition_id="train", batch_size=4)


# ------------------------------------------------------------------ one meaning on the lab and on verl

SAME_SPEC = f"""\
name: same
base:
  backend: {{backend}}
  model: {{{{path: {{model}}}}}}
  data: {{{{train_files: [train.parquet]}}}}
  rollout: {{{{G: {G}}}}}
  budget: {{{{prompts_per_step: {PROMPTS}}}}}
  algorithm: {{{{mini_batch_size: {MINI_PROMPTS}}}}}
  cluster: {{{{gpus_per_node: {DP}}}}}
arms:
  dfpo: {{{{algorithm: {{{{loss: dfpo}}}}}}}}
  grpo: {{{{algorithm: {{{{loss: grpo}}}}}}}}
"""


def lab_minibatch_groups(run, seed: int = 0) -> list[set[str]]:
    """The groups of each mini-batch of one lab update on the same G x PROMPTS batch."""
    from cancelctl.backends.lab.batching import minibatches
    from cancelctl.spec.batching import minibatch_order

    group_ids = torch.arange(PROMPTS).repeat_interleave(G)
    advantages = torch.randn(PROMPTS * G, generator=torch.Generator().manual_seed(seed))
    g = torch.Generator().manual_seed(seed)
    return [
        {f"u{int(i):03d}x" for i in group_ids[rows]}
        for rows in minibatches(minibatch_order(run.spec), advantages, group_ids, MINI_PROMPTS * G, g)
    ]


def verl_minibatch_groups(run) -> list[set[str]]:
    """The groups of each mini-batch (all ranks) of verl's update, in the trainer the renderer picks."""
    rendered = dict(line.split("=", 1) for line in render_overrides(run))
    order = rendered.get("+trainer.v1.cancelctl.batching", "default")
    meta, data = v1_batch(random_groups())
    trainer = trainer_for(order)
    out = trainer._balance_batch(meta, {}) if order != "default" else PPOTrainer._balance_batch(trainer, meta, {})
    minis: dict[int, set[str]] = {}
    for (rank, k, m), uids in slots_through_verl(out, data, update_info(trainer, out), dynamic=False).items():
        minis.setdefault(k, set()).update(uids)
    return [minis[k] for k in sorted(minis)]


def test_a_dfpo_spec_has_whole_groups_per_minibatch_on_the_lab_and_on_verl_under_default_batching(write_yaml):
    """`batching: default` with dfpo: every group in exactly one mini-batch on both backends, the same
    number of mini-batches of the same number of groups; grpo stays scattered on both."""
    from cancelctl.spec.expand import load_sweep

    def runs(backend: str):
        model = "lab://tiny" if backend == "lab" else "Qwen/Qwen2.5-0.5B"
        path = write_yaml(SAME_SPEC.format(backend=backend, model=model), name=f"{backend}.yaml")
        return {r.arm: r for r in load_sweep(path, allow_unmatched=True).runs}

    lab, verl = runs("lab"), runs("verl")
    for arm, whole in (("dfpo", True), ("grpo", False)):
        sides = {"lab": lab_minibatch_groups(lab[arm]), "verl": verl_minibatch_groups(verl[arm])}
        for side, minibatches in sides.items():
            members = Counter(uid for groups in minibatches for uid in groups)  # mini-batches holding each group
            assert (set(members.values()) == {1}) == whole, (arm, side, members)
            if whole:
                assert len(minibatches) == PROMPTS // MINI_PROMPTS and {len(g) for g in minibatches} == {MINI_PROMPTS}
