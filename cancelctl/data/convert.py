"""Source rows to verl rows: one function per source family, shared by the real download (or
generation) and the tests' local fixtures, so what is tested is what runs.

Each takes the source's records (dicts, as `datasets` or reasoning-gym yield them), the catalog entry
and the split being written, and yields rows in `verl_rows.VERL_SCHEMA`; `index` counts the rows
written, so it stays dense where a family drops rows (DAPO's duplicates).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from cancelctl.data.inventory import DatasetEntry
from cancelctl.data.verl_rows import (
    GYM_INSTRUCTION,
    GYM_NUMBER_INSTRUCTION,
    MATH_INSTRUCTION,
    ConversionError,
    answer_text,
    details_json,
    verl_row,
)

Records = Iterable[Mapping[str, Any]]
Converter = Callable[..., Iterator[dict[str, Any]]]


def _field(record: Mapping[str, Any], column: str, entry: DatasetEntry, position: int) -> Any:
    if column not in record:
        raise ConversionError(
            f"{entry.name}: source row {position} has no column {column!r} (columns: {', '.join(record)})"
        )
    return record[column]


def _math_prompt(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{question} {MATH_INSTRUCTION}"}]


def convert_competition(records: Records, *, entry: DatasetEntry, split: str) -> Iterator[dict[str, Any]]:
    """Problem + final-answer sets (MATH-500, AIME, AMC): the answer column is the ground truth."""
    question_col, answer_col = entry.columns["question"], entry.columns["answer"]
    id_col = entry.columns.get("id")
    used = {question_col, answer_col, id_col}
    for position, record in enumerate(records):
        question = str(_field(record, question_col, entry, position)).strip()
        try:
            ground_truth = answer_text(_field(record, answer_col, entry, position))
        except ValueError as exc:
            raise ConversionError(f"{entry.name}: source row {position}: {exc}") from None
        yield verl_row(
            data_source=entry.data_source,
            messages=_math_prompt(question),
            ability="math",
            ground_truth=ground_truth,
            split=split,
            index=position,
            source_id=str(record[id_col]) if id_col and record.get(id_col) is not None else str(position),
            question=question,
            entry=details_json(record, used),
        )


def gsm8k_final_answer(solution: str) -> str:
    """The number after GSM8K's last '####', thousands separators dropped (as verl's gsm8k script does)."""
    if "####" not in solution:
        raise ValueError("no '####' final answer")
    return answer_text(solution.rsplit("####", 1)[1].strip().replace(",", ""))


def convert_gsm8k(records: Records, *, entry: DatasetEntry, split: str) -> Iterator[dict[str, Any]]:
    """GSM8K: the worked solution ends with '#### N'; N is the ground truth, the solution is kept."""
    question_col, answer_col = entry.columns["question"], entry.columns["answer"]
    for position, record in enumerate(records):
        question = str(_field(record, question_col, entry, position)).strip()
        solution = str(_field(record, answer_col, entry, position))
        try:
            ground_truth = gsm8k_final_answer(solution)
        except ValueError as exc:
            raise ConversionError(f"{entry.name}: source row {position}: {exc}") from None
        yield verl_row(
            data_source=entry.data_source,
            messages=_math_prompt(question),
            ability="math",
            ground_truth=ground_truth,
            split=split,
            index=position,
            source_id=f"{split}-{position}",
            question=question,
            entry=json.dumps({"solution": solution}, ensure_ascii=False),
        )


def convert_dapo(records: Records, *, entry: DatasetEntry, split: str) -> Iterator[dict[str, Any]]:
    """DAPO-Math-17k rows are verl rows already (prompt, reward_model.ground_truth, extra_info.index).

    Their own prompt is kept (the DAPO paper's 'Answer:' template, which math-verify reads; so
    `extra_info.question` is that prompt, the problem inside its template); the data_source becomes
    the Hub id like the other sets; each prompt is written once (the Hub split repeats every prompt
    ~100 times).
    """
    seen: set[str] = set()
    written = 0
    for position, record in enumerate(records):
        messages = _field(record, "prompt", entry, position)
        reward_model = _field(record, "reward_model", entry, position) or {}
        if not messages or "ground_truth" not in reward_model:
            raise ConversionError(f"{entry.name}: source row {position} has no prompt or no reward_model.ground_truth")
        key = "\x00".join(str(m["content"]) for m in messages)
        if key in seen:
            continue
        seen.add(key)
        try:
            ground_truth = answer_text(reward_model["ground_truth"])
        except ValueError as exc:
            raise ConversionError(f"{entry.name}: source row {position}: {exc}") from None
        source_info = record.get("extra_info") or {}
        yield verl_row(
            data_source=entry.data_source,
            messages=list(messages),
            ability="math",
            ground_truth=ground_truth,
            split=split,
            index=written,
            source_id=str(source_info.get("index", position)),
            question=str(messages[-1]["content"]),
            entry=json.dumps({"source_row": position}),
        )
        written += 1


def convert_reasoning_gym(
    records: Records, *, entry: DatasetEntry, split: str, instruction: str = GYM_INSTRUCTION
) -> Iterator[dict[str, Any]]:
    """reasoning-gym items ({question, answer, metadata}): the whole item is kept as JSON in
    `extra_info.entry`, because the dataset's `score_answer(answer, entry)` is given it back."""
    for position, record in enumerate(records):
        question = str(_field(record, "question", entry, position))
        try:
            ground_truth = answer_text(_field(record, "answer", entry, position))
        except ValueError as exc:
            raise ConversionError(f"{entry.name}: item {position}: {exc}") from None
        metadata = record.get("metadata") or {}
        item = {"question": question, "answer": record["answer"], "metadata": metadata}
        yield verl_row(
            data_source=entry.data_source,
            messages=[{"role": "user", "content": f"{question}\n\n{instruction}"}],
            ability="reasoning",
            ground_truth=ground_truth,
            split=split,
            index=position,
            source_id=str(metadata.get("source_index", position)),
            question=question,
            entry=json.dumps(item, ensure_ascii=False, default=str),
        )


CONVERTERS: dict[str, Converter] = {
    "competition": convert_competition,
    "gsm8k": convert_gsm8k,
    "dapo": convert_dapo,
    "reasoning_gym": convert_reasoning_gym,
    # for small models: the same items, asking for just the number (scored by its last number)
    "reasoning_gym_number": functools.partial(convert_reasoning_gym, instruction=GYM_NUMBER_INSTRUCTION),
}
