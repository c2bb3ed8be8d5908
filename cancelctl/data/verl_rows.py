"""The row verl's RLHFDataset reads, and the one parquet schema every file here is written with.

One schema for all datasets because verl concatenates the files of `data.train_files` (and of
`data.val_files`) into one table: two files whose `extra_info` structs differ in fields, order or
types cannot be concatenated. So dataset-specific details go into `extra_info.entry`, a JSON string.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

# What each column is for verl: `prompt` is chat-templated (data.prompt_key), `data_source` picks the
# reward, `reward_model.ground_truth` is passed to it, `extra_info` rides along to it.
VERL_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("split", pa.string()),
                    ("index", pa.int64()),
                    ("source_id", pa.string()),
                    ("question", pa.string()),
                    ("entry", pa.string()),
                ]
            ),
        ),
    ]
)
VERL_COLUMNS = tuple(VERL_SCHEMA.names)

# verl's MATH convention (examples/data_preprocess/math_dataset.py): math-verify reads the boxed answer.
MATH_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
# reasoning-gym's convention: its scorers are given the text between <answer> tags.
GYM_INSTRUCTION = "Think step by step, then give only the final answer between <answer> and </answer> tags."
# for ~100M-parameter models, which rarely keep tags: the response's last number is the answer
GYM_NUMBER_INSTRUCTION = "Answer with just the number."


class ConversionError(ValueError):
    """A source row this package cannot turn into a verl row (names the dataset and the row)."""


def answer_text(value: Any) -> str:
    """A ground truth as text: numbers stored as floats on the Hub (27.0) become '27'; a list of
    answers (OlympiadBench's final_answer) becomes its items joined with ', '."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("no answer (an empty list)")
        return ", ".join(answer_text(item) for item in value)
    if value is None or isinstance(value, bool) or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"no answer ({value!r})")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = str(value).strip()
    if not text:
        raise ValueError("empty answer")
    return text


def details_json(record: Mapping[str, Any], used: set[str]) -> str:
    """The source columns a row did not consume, as JSON, for `extra_info.entry`."""
    rest = {key: value for key, value in record.items() if key not in used}
    return json.dumps(rest, sort_keys=True, ensure_ascii=False, default=str)


def verl_row(
    *,
    data_source: str,
    messages: list[dict[str, str]],
    ability: str,
    ground_truth: str,
    split: str,
    index: int,
    source_id: str,
    question: str,
    entry: str,
) -> dict[str, Any]:
    """One row with exactly verl's columns, in VERL_SCHEMA's order."""
    return {
        "data_source": data_source,
        "prompt": [{"role": str(m["role"]), "content": str(m["content"])} for m in messages],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "split": split,
            "index": int(index),
            "source_id": source_id,
            "question": question,
            "entry": entry,
        },
    }
