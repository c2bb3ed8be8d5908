"""Group advantages [D eq. 43] (docs/losses.md#notation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import losses


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(2, 9), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
    binary=st.booleans(),
)
def test_matches_the_formula_per_group(sizes, seed, binary):
    rng = np.random.default_rng(seed)
    gid = np.repeat(np.arange(len(sizes)) * 5 + 1, sizes)
    rng.shuffle(gid)
    rewards = rng.integers(0, 2, len(gid)).astype(float) if binary else rng.normal(size=len(gid))
    adv = losses.group_advantages(torch.tensor(rewards), torch.tensor(gid)).numpy()
    for g in np.unique(gid):
        r = rewards[gid == g]
        expected = np.zeros_like(r) if np.all(r == r[0]) else (r - r.mean()) / (r.std(ddof=1) + 1e-6)
        np.testing.assert_allclose(adv[gid == g], expected, rtol=1e-12, atol=1e-15)
        assert abs(adv[gid == g].sum()) < 1e-12


def test_constant_groups_are_exactly_zero_and_dtypes():
    rewards = torch.tensor([0.1, 0.1, 0.1, 1.0, 0.0, 7.0])  # group 0 all equal (0.1 is inexact in binary)
    gid = torch.tensor([0, 0, 0, 1, 1, 2])  # group 2 has one row
    adv = losses.group_advantages(rewards, gid)
    assert adv.dtype == torch.float32
    assert torch.equal(adv[[0, 1, 2, 5]], torch.zeros(4))
    assert adv[3].item() == pytest.approx(0.5 / (0.5**0.5 + 1e-6))
    assert losses.group_advantages(torch.tensor([1, 0, 1, 1]), torch.tensor([0, 0, 1, 1])).dtype == torch.float32


def test_std_normalize_false_is_the_centred_reward():
    adv = losses.group_advantages(
        torch.tensor([0.0, 1.0, 1.0, 3.0, 5.0]), torch.tensor([4, 4, 4, 9, 9]), std_normalize=False
    )
    torch.testing.assert_close(adv, torch.tensor([-2 / 3, 1 / 3, 1 / 3, -1.0, 1.0]))


def test_row_advantages_take_the_first_response_token():
    adv = torch.tensor([[0.0, 2.0, 2.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[False, True, True], [True, True, False]])
    assert torch.equal(losses.row_advantages(adv, mask), torch.tensor([2.0, -1.0]))
