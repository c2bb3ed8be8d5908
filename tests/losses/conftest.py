"""Fixtures for the loss tests; helpers live in loss_helpers.py."""

from __future__ import annotations

import pytest

from loss_helpers import Batch, make_batch


@pytest.fixture
def batch() -> Batch:
    return make_batch()


@pytest.fixture(scope="session")
def verl_core():
    """verl's core_algos, imported once per session (~11 s); skips where verl is not installed."""
    pytest.importorskip("verl", reason="verl==0.9.1 not installed (extra 'verl')")
    from verl.trainer.ppo import core_algos

    return core_algos
