"""Fixtures for the loss tests; helpers live in loss_helpers.py."""

from __future__ import annotations

import sys

import pytest

import loss_helpers

PLUGIN = "losses.verl_plugin"


@pytest.fixture(scope="session")
def verl_core():
    """verl's core_algos, imported once per session (~11 s); skips where verl is not installed."""
    fresh = "verl" not in sys.modules and PLUGIN not in sys.modules
    pytest.importorskip("verl", reason="verl==0.9.1 not installed (extra 'verl')")
    if fresh:
        loss_helpers.PLUGIN_LOADED_BY_VERL = PLUGIN in sys.modules
    from verl.trainer.ppo import core_algos

    return core_algos
