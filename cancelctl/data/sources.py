"""Where source records come from: the Hugging Face Hub (through `datasets`, on the user's machine)
or reasoning-gym's generators (offline)."""

from __future__ import annotations

import hashlib
import math
import os
import socket
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from cancelctl.data.extras import require
from cancelctl.errors import CancelctlError
from cancelctl.data.inventory import GYM_DEFAULT_TRAIN_ROWS, GYM_TEST_FRACTION, DatasetEntry

# A generated test split skips items whose question is in train; this bounds the draws per kept item.
_GYM_DRAWS_PER_TEST_ITEM = 4
# Offset between the train and test seeds: reasoning-gym seeds item i with seed + i, so seeds closer
# than the train size would regenerate train items as test items.
_GYM_TEST_SEED_OFFSET = 2**31


HUB_PROBE_TIMEOUT_S = 5.0


class HubUnreachable(CancelctlError, ConnectionError):
    """The Hugging Face Hub cannot be reached from here (no network, a proxy, a firewall)."""


def load_hub_split(entry: DatasetEntry, source_split: str) -> Iterable[Mapping[str, Any]]:
    """One split of a Hub dataset, as `datasets` loads it (downloaded once into the HF cache). A
    machine without a route to the Hub is told so at once, not after `datasets`' retries
    (tests/cli/test_error_path.py holds it under 10 s)."""
    datasets = require("datasets", f"downloading {entry.hub_id}")
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0") or os.environ.get("HF_DATASETS_OFFLINE", "") not in ("", "0")
    problem = None if offline else hub_unreachable()
    if problem is None:
        try:
            return datasets.load_dataset(entry.hub_id, entry.hub_config, split=source_split)
        except ConnectionError as exc:  # the Hub went away mid-download, or offline mode without a cached copy
            problem = str(exc) or type(exc).__name__
    raise HubUnreachable(
        f"cannot download {entry.hub_id} ({entry.name}): the Hugging Face Hub is not reachable from this machine "
        f"({problem}). Run `cancelctl data prepare {entry.name}` on a machine with network and copy its folder "
        f"(data/{entry.name}/) here, or fill the HF cache there and set HF_HUB_OFFLINE=1 here")


def hub_unreachable(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """None when a TCP connection to the Hub (HF_ENDPOINT) opens within `timeout_s`; else why not."""
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"


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
