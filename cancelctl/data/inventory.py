"""What `cancelctl data` can make: one entry per dataset, with where it comes from, its split layout,
its size and the reward that scores it.

The Hub facts (id, config, split, columns, rows) were read from each dataset's card and from verl's
own `examples/data_preprocess/` scripts; `reference` names the page. Row counts of Hub sets are the
cards' (after this package's filtering, where it filters); reasoning-gym sets are generated, their
counts are the defaults `prepare` uses when no size is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cancelctl.errors import ArgumentError

HUB = "huggingface"
GYM = "reasoning-gym"

# The verifier names a reward function in `cancelctl.data.rewards.VERIFIERS` (a test keeps them in step).
MATH_VERIFY = "math_verify"
GYM_SCORE_ANSWER = "reasoning_gym_score_answer"
GYM_SCORE_NUMBER = "reasoning_gym_score_last_number"

GYM_DATA_SOURCE_PREFIX = "reasoning_gym/"

# Where `prepare` writes when no folder is given: the experiments' data files live under data/.
DEFAULT_OUT_DIR = Path("data")

# A generated set's test split is this fraction of its train size (at least one row).
GYM_TEST_FRACTION = 10
GYM_DEFAULT_TRAIN_ROWS = 1000
# chain_sum_small's test split: each held-out question its test draws find, once — 38 of the 43
# questions its hash holds out (of 200), at the default --size and any nearby --seed (a tenth of
# the train size, 100, is more questions than there are)
CHAIN_SUM_SMALL_TEST_ROWS = 38


class UnknownDataset(ArgumentError, KeyError):
    """A name the catalog does not list: bad input (exit 2 at the CLI); a KeyError to a lookup."""

    def __init__(self, message: str):
        super().__init__(message, title="unknown dataset")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def _frozen(mapping: Mapping | None = None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class DatasetEntry:
    """One dataset `prepare` can make.

    `family` picks the conversion function (`cancelctl.data.convert.CONVERTERS`); `splits` maps each
    file this package writes (`<out>/<name>/<split>.parquet`) to the source's split; `columns` maps the
    family's fields (question, answer, id) to the source's column names.
    """

    name: str
    title: str
    kind: str  # HUB or GYM
    family: str
    data_source: str
    verifier: str
    splits: Mapping[str, str]
    rows: Mapping[str, int]
    hub_id: str | None = None
    hub_config: str | None = None
    columns: Mapping[str, str] = field(default_factory=_frozen)
    task: str | None = None  # the reasoning-gym dataset name
    gym_config: Mapping[str, Any] = field(default_factory=_frozen)  # the generator's difficulty knobs
    # a small problem space is split by question (this fraction of questions, by hash, is test only):
    # drawing train first and skipping its questions would leave no test questions at all
    held_out_questions: float | None = None
    reference: str = ""
    note: str = ""

    @property
    def source(self) -> str:
        """Where the rows come from, in one line (what `data list` shows)."""
        if self.kind == HUB:
            config = f" [{self.hub_config}]" if self.hub_config else ""
            return f"{HUB}:{self.hub_id}{config}"
        knobs = "".join(f" {key}={value}" for key, value in self.gym_config.items())
        return f"{GYM}:{self.task}{knobs}"

    @property
    def size(self) -> str:
        """Rows per file written, e.g. 'train 7,473 + test 1,319' (generated sets: the default size)."""
        return " + ".join(f"{split} {rows:,}" for split, rows in self.rows.items())

    def files(self, out_dir: Path | str = DEFAULT_OUT_DIR) -> dict[str, Path]:
        """The parquet file of each split under `out_dir`."""
        return {split: Path(out_dir) / self.name / f"{split}.parquet" for split in self.splits}


def _hub(name, title, family, hub_id, *, splits, rows, columns=None, hub_config=None, reference, note=""):
    return DatasetEntry(
        name=name,
        title=title,
        kind=HUB,
        family=family,
        data_source=hub_id,  # verl's convention (its gsm8k and MATH scripts): the Hub id
        verifier=MATH_VERIFY,
        splits=_frozen(splits),
        rows=_frozen(rows),
        hub_id=hub_id,
        hub_config=hub_config,
        columns=_frozen(columns),
        reference=reference,
        note=note,
    )


def _gym(task: str, title: str) -> DatasetEntry:
    return DatasetEntry(
        name=task,
        title=title,
        kind=GYM,
        family="reasoning_gym",
        data_source=GYM_DATA_SOURCE_PREFIX + task,
        verifier=GYM_SCORE_ANSWER,
        splits=_frozen({"train": "train", "test": "test"}),
        rows=_frozen({"train": GYM_DEFAULT_TRAIN_ROWS, "test": GYM_DEFAULT_TRAIN_ROWS // GYM_TEST_FRACTION}),
        task=task,
        reference="reasoning-gym 0.1.25 (reasoning_gym/arithmetic/), generated offline",
        note="seed and size set by prepare; the test split is disjoint from train by question",
    )


_ENTRIES = (
    _hub(
        "dapo-math-17k",
        "DAPO-Math-17k",
        "dapo",
        "BytedTsinghua-SIA/DAPO-Math-17k",
        hub_config="default",
        splits={"train": "train"},
        rows={"train": 17_398},
        reference="huggingface.co/datasets/BytedTsinghua-SIA/DAPO-Math-17k; verl examples/data_preprocess/"
        "dapo_multiturn_w_tool.py; BytedTsinghua-SIA/DAPO issue 36 (the ~100x duplication)",
        note="the Hub split holds ~1.79M rows, ~17.4k prompts each repeated ~100x: written once each; "
        "rows are already verl-shaped, their own prompt asks for an 'Answer:' line",
    ),
    _hub(
        "math500",
        "MATH-500",
        "competition",
        "HuggingFaceH4/MATH-500",
        splits={"test": "test"},
        rows={"test": 500},
        columns={"question": "problem", "answer": "answer", "id": "unique_id"},
        reference="huggingface.co/datasets/HuggingFaceH4/MATH-500 (features problem, solution, answer, "
        "subject, level, unique_id; split test, 500 rows)",
    ),
    _hub(
        "aime24",
        "AIME 2024",
        "competition",
        "HuggingFaceH4/aime_2024",
        splits={"test": "train"},
        rows={"test": 30},
        columns={"question": "problem", "answer": "answer", "id": "id"},
        reference="huggingface.co/datasets/HuggingFaceH4/aime_2024 (features id, problem, solution, answer, "
        "url, year; its only split is train, 30 rows)",
        note="an evaluation set: written as test.parquet",
    ),
    _hub(
        "aime25",
        "AIME 2025",
        "competition",
        "math-ai/aime25",
        splits={"test": "test"},
        rows={"test": 30},
        columns={"question": "problem", "answer": "answer", "id": "id"},
        reference="huggingface.co/datasets/math-ai/aime25 (features problem, answer, id; split test, 30 rows)",
    ),
    _hub(
        "amc23",
        "AMC 2023",
        "competition",
        "math-ai/amc23",
        splits={"test": "test"},
        rows={"test": 40},
        columns={"question": "question", "answer": "answer", "id": "id"},
        reference="huggingface.co/datasets/math-ai/amc23 (features id, question, answer, url; split test, 40 rows)",
        note="answers may be stored as numbers (27.0): written as text ('27')",
    ),
    _hub(
        "olympiadbench",
        "OlympiadBench (maths, English, text-only)",
        "competition",
        "Hothan/OlympiadBench",
        hub_config="OE_TO_maths_en_COMP",
        splits={"test": "train"},
        rows={"test": 674},
        columns={"question": "question", "answer": "final_answer", "id": "id"},
        reference="huggingface.co/datasets/Hothan/OlympiadBench (the OpenBMB release; config OE_TO_maths_en_COMP: "
        "open-ended, text-only, maths, English competition; features id, question, solution, final_answer (a "
        "list), ...; its only split is train, 674 rows)",
        note="an evaluation set: written as test.parquet; final_answer is a list: its items joined with ', '",
    ),
    _hub(
        "gsm8k",
        "GSM8K",
        "gsm8k",
        "openai/gsm8k",
        hub_config="main",
        splits={"train": "train", "test": "test"},
        rows={"train": 7_473, "test": 1_319},
        columns={"question": "question", "answer": "answer"},
        reference="huggingface.co/datasets/openai/gsm8k; verl examples/data_preprocess/gsm8k.py "
        "(config main; the final answer follows '####')",
    ),
    _gym("chain_sum", "reasoning-gym chain_sum"),
    DatasetEntry(
        name="chain_sum_small",
        title="reasoning-gym chain_sum for ~100M-parameter models: two one-digit terms, a plain-number answer",
        kind=GYM,
        family="reasoning_gym_number",
        data_source=GYM_DATA_SOURCE_PREFIX + "chain_sum_small",
        verifier=GYM_SCORE_NUMBER,
        splits=_frozen({"train": "train", "test": "test"}),
        rows=_frozen({"train": GYM_DEFAULT_TRAIN_ROWS, "test": CHAIN_SUM_SMALL_TEST_ROWS}),
        task="chain_sum",
        gym_config=_frozen({"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}),
        held_out_questions=0.2,  # of 200 distinct questions: 43 never trained on
        reference="reasoning-gym 0.1.25 chain_sum; SmolLM2-135M-Instruct answers 42% greedy, 18% sampled "
        "(T=1), 54% of groups of 4 mixed (48 items, measured with `model prepare smollm2-135m`)",
        note="200 distinct questions, a fifth held out by hash (43; test: the 38 its draws find, each once); asks for just the number (a 135M model rarely keeps <answer> tags): the response's last "
        "number is scored by chain_sum's own score_answer",
    ),
    _gym("basic_arithmetic", "reasoning-gym basic_arithmetic"),
    _gym("gsm_symbolic", "reasoning-gym gsm_symbolic"),
)

_BY_NAME = {entry.name: entry for entry in _ENTRIES}
_BY_DATA_SOURCE = {entry.data_source: entry for entry in _ENTRIES}


def catalog() -> tuple[DatasetEntry, ...]:
    """Every dataset `prepare` can make, in the order `data list` shows them."""
    return _ENTRIES


def entry(name: str) -> DatasetEntry:
    """The catalog entry called `name`; UnknownDataset names the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownDataset(f"no dataset {name!r} in the catalog; known: {', '.join(_BY_NAME)}") from None


def entry_for_data_source(data_source: str) -> DatasetEntry | None:
    """The entry whose rows carry `data_source`, or None."""
    return _BY_DATA_SOURCE.get(data_source)
