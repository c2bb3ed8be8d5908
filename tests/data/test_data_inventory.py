"""The catalog: every entry complete and consistent with the conversion and reward tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from cancelctl.data import DEFAULT_OUT_DIR, UnknownDataset, catalog, entry
from cancelctl.data.convert import CONVERTERS
from cancelctl.data.inventory import GYM, HUB, entry_for_data_source
from cancelctl.data.rewards import VERIFIERS

PAPERS_SETS = {"dapo-math-17k", "math500", "aime24", "aime25", "amc23", "gsm8k"}


def test_the_papers_sets_and_the_gym_sets_are_listed():
    names = [e.name for e in catalog()]
    assert len(names) == len(set(names))
    assert PAPERS_SETS <= set(names)
    assert {"chain_sum", "basic_arithmetic", "gsm_symbolic"} <= set(names)


@pytest.mark.parametrize("found", catalog(), ids=lambda e: e.name)
def test_every_entry_is_complete(found):
    assert found.title and found.reference and found.source
    assert found.family in CONVERTERS and found.verifier in VERIFIERS
    assert found.splits and set(found.rows) == set(found.splits) and all(n > 0 for n in found.rows.values())
    assert entry_for_data_source(found.data_source) is found
    if found.kind == HUB:
        assert found.hub_id == found.data_source and found.source.startswith(f"huggingface:{found.hub_id}")
        if found.family in ("competition", "gsm8k"):
            assert {"question", "answer"} <= set(found.columns)
    else:
        assert found.kind == GYM and found.task and found.data_source == f"reasoning_gym/{found.name}"


def test_split_layout_and_size_text():
    assert entry("gsm8k").files() == {"train": DEFAULT_OUT_DIR / "gsm8k" / "train.parquet", "test": DEFAULT_OUT_DIR / "gsm8k" / "test.parquet"}
    assert entry("aime24").files("sets") == {"test": Path("sets/aime24/test.parquet")}
    assert entry("aime24").splits == {"test": "train"}  # the Hub's only split, written as test
    assert entry("gsm8k").size == "train 7,473 + test 1,319"
    assert entry("dapo-math-17k").splits == {"train": "train"}


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(UnknownDataset) as raised:
        entry("math-500")
    assert str(raised.value).startswith("no dataset 'math-500' in the catalog; known: dapo-math-17k, math500, aime24")
