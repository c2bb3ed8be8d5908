"""Where source records come from: the Hugging Face Hub (through `datasets`, on the user's machine)
or reasoning-gym's generators (offline)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

from cancelctl.data.extras import require
from cancelctl.data.inventory import GYM_DEFAULT_TRAIN_ROWS, GYM_TEST_FRACTION, DatasetEntry

# A generated test split skips items whose question is in train; this bounds the draws per kept item.
_GYM_DRAWS_PER_TEST_ITEM = 4
# Offset between the train and test seeds: reasoning-gym seeds item i with seed + i, so seeds closer
# than the train size would regenerate train items as test items.
_GYM_TEST_SEED_OFFSET = 2**31


def load_hub_split(entry: DatasetEntry, source_split: str) -> Iterable[Mapping[str, Any]]:
    """One split of a Hub dataset, as `datasets` loads it (downloaded once into the HF cache)."""
    datasets = require("datasets", f"downloading {entry.hub_id}")
    return datasets.load_dataset(entry.hub_id, entry.hub_config, split=source_split)


def gym_sizes(size: int | None) -> dict[str, int]:
    """Rows per split of a generated set: `size` train rows (default: the catalog's), a tenth as test."""
    train = size if size is not None else GYM_DEFAULT_TRAIN_ROWS
    if train < 1:
        raise ValueError(f"size must be at least 1, got {train}")
    return {"train": train, "test": max(1, train // GYM_TEST_FRACTION)}


def held_out(question: str, fraction: float) -> bool:
    """Whether `question` belongs to the test side of a split by question (stable across runs and machines)."""
    digest = hashlib.sha256(question.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def generate_gym_splits(entry: DatasetEntry, *, seed: int, size: int | None) -> dict[str, list[dict[str, Any]]]:
    """Train and test items of a reasoning-gym task, deterministic in (seed, size).

    Test items come from a far seed and skip any question already in train, so the test split is
    held out even for tasks whose problem space is small. An entry with `held_out_questions` splits
    the question space itself: train repeats its questions, test has each held-out question once.
    """
    reasoning_gym = require("reasoning_gym", f"generating {entry.task}")
    sizes = gym_sizes(size)
    knobs = dict(entry.gym_config)
    fraction = entry.held_out_questions
    train_draws = sizes["train"] if fraction is None else math.ceil(sizes["train"] / (1 - fraction) * 1.5) + 16
    train_set = reasoning_gym.create_dataset(entry.task, seed=seed, size=train_draws, **knobs)
    train = [item for item in (train_set[i] for i in range(train_draws)) if fraction is None or not held_out(item["question"], fraction)]
    train = train[: sizes["train"]]
    seen = {item["question"] for item in train}
    draws = sizes["test"] * _GYM_DRAWS_PER_TEST_ITEM
    test_set = reasoning_gym.create_dataset(entry.task, seed=(seed + _GYM_TEST_SEED_OFFSET) % 2**32, size=draws, **knobs)
    test: list[dict[str, Any]] = []
    for i in range(draws):
        item = test_set[i]
        if item["question"] not in seen and (fraction is None or held_out(item["question"], fraction)):
            seen.add(item["question"])
            test.append(item)
            if len(test) == sizes["test"]:
                break
    return {"train": train, "test": test}
