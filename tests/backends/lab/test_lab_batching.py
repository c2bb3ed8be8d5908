import pytest
import torch

import losses
from cancelctl.backends.lab.batching import RewardBalancedBuffer, holds_whole_groups, minibatches
from cancelctl.backends.lab.rollout import RolloutBatch
from cancelctl.backends.lab.task import Problem


def synthetic(rewards: list[list[float]], first_group: int = 0, T: int = 3) -> RolloutBatch:
    """Groups of rows with the given 0/1 rewards (no real tokens needed by the batching code)."""
    G = len(rewards[0])
    n = len(rewards) * G
    group_ids = torch.arange(len(rewards)).repeat_interleave(G) + first_group
    r = torch.tensor([x for group in rewards for x in group])
    batch = RolloutBatch(
        ids=torch.ones(n, 2 + T, dtype=torch.long),
        valid=torch.ones(n, 2 + T, dtype=torch.bool),
        prompt_len=2,
        response_mask=torch.ones(n, T),
        rollout_log_prob=torch.zeros(n, T),
        group_ids=group_ids,
        rewards=r,
        problems=[Problem(1, 2, 0)] * n,
    )
    batch.advantages = losses.group_advantages(r, group_ids)
    return batch


REWARDS = [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [0, 1, 0, 0]]


@pytest.mark.parametrize("strategy", ["default", "reward_balanced", "query_preserved"])
def test_every_row_in_exactly_one_minibatch(strategy):
    b = synthetic(REWARDS)
    parts = minibatches(strategy, b.advantages, b.group_ids, 8, torch.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [8, 8, 8]
    assert sorted(torch.cat(parts).tolist()) == list(range(24))


def test_default_shuffles_rows_across_groups():
    b = synthetic(REWARDS)
    parts = minibatches("default", b.advantages, b.group_ids, 8, torch.Generator().manual_seed(0))
    assert not all(holds_whole_groups(p, b.group_ids) for p in parts)


def test_query_preserved_minibatches_hold_whole_groups():
    b = synthetic(REWARDS)
    for seed in range(5):
        parts = minibatches("query_preserved", b.advantages, b.group_ids, 8, torch.Generator().manual_seed(seed))
        assert all(holds_whole_groups(p, b.group_ids) for p in parts)
        assert all(len(torch.unique(b.group_ids[p])) == 2 for p in parts)


def test_sign_split_separates_signs_and_drops_zero_rows():
    b = synthetic(REWARDS)
    parts = minibatches("sign_split", b.advantages, b.group_ids, 4, torch.Generator().manual_seed(0))
    signs = [set(torch.sign(b.advantages[p]).tolist()) for p in parts]
    assert all(s in ({1.0}, {-1.0}) for s in signs)
    used = torch.cat(parts)
    assert sorted(used.tolist()) == torch.nonzero(b.advantages != 0).squeeze(-1).tolist()
    assert {1.0} in signs and {-1.0} in signs


def test_reward_balanced_honours_min_frac():
    buffer = RewardBalancedBuffer(groups=4, min_frac=0.25, capacity=4)
    # round 1: mostly solved or unsolved groups -> 3 positives among 16 rows is below 0.25 * 16
    buffer.add(synthetic([[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]]))
    chosen, ok = buffer.choose()
    assert not ok
    buffer.add(synthetic([[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]], first_group=4))
    chosen, ok = buffer.choose()
    assert ok
    batch, discarded = buffer.take(chosen)
    assert batch.size == 16
    n_pos, n_neg = int((batch.advantages > 0).sum()), int((batch.advantages < 0).sum())
    assert n_pos >= 4 and n_neg >= 4
    assert holds_whole_groups(torch.arange(16), batch.group_ids)
    assert discarded == 0  # 4 groups left, capacity 4
    assert buffer.pending.size == 16


def test_reward_balanced_discards_beyond_capacity_oldest_first():
    buffer = RewardBalancedBuffer(groups=2, min_frac=0.25, capacity=1)
    buffer.add(synthetic([[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]]))
    buffer.add(synthetic([[1, 1, 0, 0], [1, 1, 1, 1]], first_group=3))
    chosen, ok = buffer.choose()
    assert ok
    batch, discarded = buffer.take(chosen)
    assert set(batch.group_ids.tolist()) == {2, 3}  # the informative groups
    assert discarded == 8  # of groups 0, 1, 4 only the newest (4) is kept
    assert set(buffer.pending.group_ids.tolist()) == {4}


def test_reward_balanced_buffer_state_round_trip():
    buffer = RewardBalancedBuffer(groups=2, min_frac=0.25, capacity=2)
    buffer.add(synthetic([[0, 1, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0]]))
    buffer.take(buffer.choose()[0])
    other = RewardBalancedBuffer(groups=2, min_frac=0.25, capacity=2)
    other.load_state_dict(buffer.state_dict())
    assert torch.equal(other.pending.ids, buffer.pending.ids)
    assert torch.equal(other.pending.advantages, buffer.pending.advantages)
    assert other.pending.problems == buffer.pending.problems
