"""Batches, helpers and the verl fixture shared by the loss tests (imported as `loss_helpers`).

No conftest.py here on purpose: conftest.py modules of sibling test folders shadow each other when
imported by name.

Gradients are taken with autograd on the per-token log-probs (`log_prob` is the leaf). Losses are
minimised, so dLoss/dlog π = −(objective coefficient) × the aggregation's normalisation.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest
import torch

import losses

# set by the verl_core fixture when it is the first to import verl: did `import verl` load our plugin?
PLUGIN_LOADED_BY_VERL: bool | None = None

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")),
]


@dataclass
class Batch:
    old_log_prob: torch.Tensor
    log_prob: torch.Tensor  # leaf, requires grad
    advantages: torch.Tensor  # [N, T], verl's broadcast layout
    response_mask: torch.Tensor  # bool [N, T]
    group_ids: torch.Tensor
    rewards: torch.Tensor

    def kwargs(self, **extra) -> dict:
        return dict(
            old_log_prob=self.old_log_prob,
            log_prob=self.log_prob,
            advantages=self.advantages,
            response_mask=self.response_mask,
            **extra,
        )

    @property
    def row_adv(self) -> torch.Tensor:
        return self.advantages[:, 0]

    @property
    def lengths(self) -> torch.Tensor:
        return self.response_mask.sum(-1)


def make_batch(
    groups: int = 4,
    group_size: int = 4,
    tokens: int = 12,
    seed: int = 0,
    spread: float = 0.3,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    shuffle: bool = True,
) -> Batch:
    """Random right-padded batch: rows of `groups` groups (ids not contiguous, rows shuffled),
    binary-ish rewards, GRPO advantages, log-ratios ~ N(0, spread²)."""
    g = torch.Generator().manual_seed(seed)
    n = groups * group_size
    group_ids = torch.arange(groups).repeat_interleave(group_size) * 7 + 3
    if shuffle:
        group_ids = group_ids[torch.randperm(n, generator=g)]
    rewards = torch.randint(0, 3, (n,), generator=g).double()
    adv = losses.group_advantages(rewards, group_ids).to(torch.float64)
    lengths = torch.randint(1, tokens + 1, (n,), generator=g)
    mask = torch.arange(tokens)[None, :] < lengths[:, None]
    old = -torch.rand(n, tokens, generator=g, dtype=torch.float64) * 3
    new = old + spread * torch.randn(n, tokens, generator=g, dtype=torch.float64)
    return Batch(
        old_log_prob=old.to(dtype=dtype, device=device),
        log_prob=new.to(dtype=dtype, device=device).requires_grad_(True),
        advantages=adv[:, None].expand(n, tokens).to(dtype=dtype, device=device),
        response_mask=mask.to(device),
        group_ids=group_ids.to(device),
        rewards=rewards,
    )


def grad_of(loss: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    (grad,) = torch.autograd.grad(loss, leaf)
    return grad


PLUGIN = "losses.verl_plugin"


@pytest.fixture(scope="session", name="verl_core")
def verl_core_fixture():
    """verl's core_algos, imported once per session (~11 s); skips where verl is not installed.
    Import it into a test module to use it."""
    global PLUGIN_LOADED_BY_VERL
    fresh = "verl" not in sys.modules and PLUGIN not in sys.modules
    pytest.importorskip("verl", reason="verl==0.9.1 not installed (extra 'verl')")
    if fresh:
        PLUGIN_LOADED_BY_VERL = PLUGIN in sys.modules
    from verl.trainer.ppo import core_algos

    return core_algos
