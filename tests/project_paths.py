"""Paths of the checkout the tests run against (a plain module: conftest.py names collide across dirs)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
