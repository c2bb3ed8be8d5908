"""reasoning-gym tasks scored by their own dataset's `score_answer(answer, entry)`.

The answer is the text of the response's last <answer>…</answer> (reasoning-gym's `extract_answer`,
the format the prompt asks for), or, for the sets made for small models (`chain_sum_small`), the
response's last number compared exactly; the entry is the generated item, stored whole as JSON in
`extra_info.entry` when the parquet was written (some scorers read its metadata, not only its answer).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from cancelctl.data.extras import require
from cancelctl.data.inventory import GYM_DATA_SOURCE_PREFIX, entry_for_data_source


# a signed integer or decimal; thousands separators are dropped before matching
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def task_of(data_source: str) -> str:
    """'reasoning_gym/chain_sum' -> 'chain_sum'; a catalog set's own task ('chain_sum_small' -> 'chain_sum')."""
    if not data_source.startswith(GYM_DATA_SOURCE_PREFIX):
        raise ValueError(f"not a reasoning-gym data_source: {data_source!r}")
    catalog_entry = entry_for_data_source(data_source)
    if catalog_entry is not None and catalog_entry.task:
        return catalog_entry.task
    return data_source[len(GYM_DATA_SOURCE_PREFIX) :]


def last_number(text: str) -> str | None:
    """The last number written in `text` ('2 + 3 = 5.' -> '5'), or None."""
    numbers = _NUMBER.findall(text.replace(",", ""))
    return numbers[-1] if numbers else None


def is_gym_task(task: str) -> bool:
    """reasoning-gym has a dataset called `task` (imports reasoning-gym: a few seconds, once)."""
    require("reasoning_gym", "the reasoning-gym reward")  # importing the package registers every dataset
    return task in require("reasoning_gym.factory", "the reasoning-gym reward").DATASETS


@functools.cache
def _score_answer(task: str) -> Callable[[str, dict[str, Any]], float]:
    """The task's bound `score_answer`; the instance behind it is built once per task."""
    reasoning_gym = require("reasoning_gym", "the reasoning-gym reward")
    return reasoning_gym.get_score_answer_fn(task)


def _entry(extra_info: Mapping[str, Any] | None, ground_truth: str) -> dict[str, Any]:
    """The generated item back from extra_info; without it, the ground truth stands for the answer."""
    info = extra_info or {}
    try:
        item = json.loads(info.get("entry") or "")
    except (TypeError, ValueError):
        item = None
    if not isinstance(item, dict) or "answer" not in item:
        item = {"question": info.get("question", ""), "answer": ground_truth, "metadata": {}}
    item.setdefault("metadata", {})
    return item


def compute_gym_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """verl's reward signature: the task's own score of the tagged answer; 0.0 without tags or on error."""
    extract_answer = require("reasoning_gym.utils", "the reasoning-gym reward").extract_answer
    return _score(data_source, extract_answer(str(solution_str or "")), ground_truth, extra_info)


def compute_gym_number_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """verl's reward signature: 1.0 when the response's last number equals the answer, else 0.0.

    Binary, not the task's `score_answer`: reasoning-gym gives a wrong answer that contains the right
    one as a substring partial credit ('1234' for 4 scores 0.25), which a model can farm by writing
    long numbers."""
    answer = last_number(str(solution_str or ""))
    expected = last_number(str(_entry(extra_info, str(ground_truth))["answer"]))
    if answer is None or expected is None:
        return 0.0
    return 1.0 if float(answer) == float(expected) else 0.0


def _score(data_source: str, answer: str | None, ground_truth: str, extra_info: Any) -> float:
    score_answer = _score_answer(task_of(data_source))
    if answer is None:
        return 0.0
    try:
        score = score_answer(answer, _entry(extra_info, str(ground_truth)))
    except Exception:  # noqa: BLE001 - a scorer that chokes on a malformed answer: the answer is wrong
        return 0.0
    if score is None:
        return 0.0
    score = float(score)
    return 0.0 if math.isnan(score) else score
