"""Every Hub family converted through the real path (`prepare` -> `datasets.load_dataset` -> the family's
converter -> parquet), served local `Dataset.from_dict` tables shaped as the cards document: the rows
and columns written are exactly verl's."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from cancelctl.data import VERL_COLUMNS, ConversionError, entry, prepare
from cancelctl.data.convert import CONVERTERS, gsm8k_final_answer
from cancelctl.data.verl_rows import MATH_INSTRUCTION, VERL_SCHEMA, answer_text

pytest.importorskip("datasets")

HUB_SETS = ["dapo-math-17k", "math500", "aime24", "aime25", "amc23", "olympiadbench", "gsm8k"]


def read_rows(path):
    table = pq.read_table(path)
    assert table.schema.equals(VERL_SCHEMA), table.schema
    assert tuple(table.column_names) == VERL_COLUMNS == ("data_source", "prompt", "ability", "reward_model", "extra_info")
    return table.to_pylist()


def assert_verl_row(row, *, data_source, split, index):
    assert row["data_source"] == data_source
    assert isinstance(row["prompt"], list) and row["prompt"] and all(set(m) == {"role", "content"} for m in row["prompt"])
    assert row["prompt"][-1]["role"] == "user"
    assert row["reward_model"]["style"] == "rule" and row["reward_model"]["ground_truth"]
    info = row["extra_info"]
    assert (info["split"], info["index"]) == (split, index)
    json.loads(info["entry"])  # always valid JSON


@pytest.mark.parametrize("name", HUB_SETS)
def test_each_hub_set_is_written_in_verl_format_through_the_download_path(hub, tmp_path, name):
    found = entry(name)
    (prepared,) = prepare([name], tmp_path)
    assert [call[0] for call in hub.calls] == [found.hub_id] * len(found.splits)
    assert all(call[1] == found.hub_config for call in hub.calls)
    assert sorted(prepared.files) == sorted(found.splits)
    for split, path in prepared.files.items():
        assert path == tmp_path / name / f"{split}.parquet"
        rows = read_rows(path)
        assert len(rows) == prepared.rows[split] > 0
        for index, row in enumerate(rows):
            assert_verl_row(row, data_source=found.data_source, split=split, index=index)


def test_math500_rows(hub, tmp_path):
    (prepared,) = prepare(["math500"], tmp_path)
    first, second = read_rows(prepared.files["test"])
    assert first["prompt"] == [{"role": "user", "content": f"What is $\\frac{{1}}{{2}}+\\frac{{1}}{{4}}$? {MATH_INSTRUCTION}"}]
    assert first["ability"] == "math"
    assert first["reward_model"] == {"style": "rule", "ground_truth": "\\frac{3}{4}"}
    assert second["reward_model"]["ground_truth"] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    info = first["extra_info"]
    assert info["source_id"] == "test/prealgebra/1.json"
    assert info["question"] == "What is $\\frac{1}{2}+\\frac{1}{4}$?"
    assert json.loads(info["entry"]) == {"level": 2, "solution": "... $\\boxed{\\frac{3}{4}}$", "subject": "Prealgebra"}


def test_aime24_has_one_hub_split_written_as_test(hub, tmp_path):
    (prepared,) = prepare(["aime24"], tmp_path)
    assert hub.calls == [("HuggingFaceH4/aime_2024", None, "train")]
    (row,) = read_rows(prepared.files["test"])
    assert row["reward_model"]["ground_truth"] == "204"
    assert row["extra_info"]["source_id"] == "60" and row["extra_info"]["split"] == "test"


def test_amc23_numeric_answers_become_text(hub, tmp_path):
    (prepared,) = prepare(["amc23"], tmp_path)
    assert [r["reward_model"]["ground_truth"] for r in read_rows(prepared.files["test"])] == ["8", "0.5"]


def test_olympiadbench_reads_its_config_and_joins_its_answer_lists(hub, tmp_path):
    (prepared,) = prepare(["olympiadbench"], tmp_path)
    assert hub.calls == [("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train")]
    rows = read_rows(prepared.files["test"])
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["$7$", "$-2$, $2$"]
    assert rows[0]["data_source"] == "Hothan/OlympiadBench" and rows[0]["extra_info"]["source_id"] == "1606"


def test_gsm8k_ground_truth_is_the_number_after_the_marks(hub, tmp_path):
    (prepared,) = prepare(["gsm8k"], tmp_path)
    train = read_rows(prepared.files["train"])
    assert [r["reward_model"]["ground_truth"] for r in train] == ["72", "1500"]
    assert json.loads(train[1]["extra_info"]["entry"]) == {"solution": "1200+300=1500\n#### 1,500"}
    (test_row,) = read_rows(prepared.files["test"])
    assert test_row["reward_model"]["ground_truth"] == "18" and test_row["extra_info"]["split"] == "test"


def test_dapo_keeps_its_prompt_and_writes_each_prompt_once(hub, tmp_path):
    source = hub.records[("BytedTsinghua-SIA/DAPO-Math-17k", "train")]
    (prepared,) = prepare(["dapo-math-17k"], tmp_path)
    rows = read_rows(prepared.files["train"])
    assert prepared.rows == {"train": 2}
    assert [r["prompt"] for r in rows] == [
        [{"role": "user", "content": source[0]["prompt"][0]["content"]}],
        [{"role": "user", "content": source[2]["prompt"][0]["content"]}],
    ]
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["2", "5"]
    assert [r["extra_info"]["source_id"] for r in rows] == ["a1", "b2"]
    assert {r["data_source"] for r in rows} == {"BytedTsinghua-SIA/DAPO-Math-17k"}  # not the source's math_dapo
    assert {r["ability"] for r in rows} == {"math"}


def test_size_keeps_the_first_rows_of_each_split(hub, tmp_path):
    (prepared,) = prepare(["gsm8k"], tmp_path, size=1)
    assert prepared.rows == {"train": 1, "test": 1}
    assert read_rows(prepared.files["train"])[0]["reward_model"]["ground_truth"] == "72"


def test_files_of_different_sets_concatenate_as_verl_reads_them(hub, tmp_path):
    """verl loads all of data.val_files with `datasets` and concatenates them: one schema for all."""
    import datasets

    prepared = prepare(["math500", "amc23", "aime25", "gsm8k"], tmp_path)
    files = [str(p.files["test"]) for p in prepared]
    loaded = datasets.Dataset.from_parquet(files)
    assert len(loaded) == 2 + 2 + 1 + 1
    assert list(loaded.features) == list(VERL_COLUMNS)
    assert {row["data_source"] for row in loaded} == {"HuggingFaceH4/MATH-500", "math-ai/amc23", "math-ai/aime25", "openai/gsm8k"}


def test_a_row_without_an_answer_names_the_dataset_and_row(hub, tmp_path):
    hub.records[("math-ai/aime25", "test")].append({"problem": "p", "answer": None, "id": "1"})
    with pytest.raises(ConversionError, match=r"aime25: source row 1: no answer"):
        prepare(["aime25"], tmp_path)
    assert not (tmp_path / "aime25").exists()


def test_a_missing_column_is_named(hub, tmp_path):
    hub.records[("HuggingFaceH4/MATH-500", "test")] = [{"question": "p", "answer": "1", "unique_id": "x"}]
    with pytest.raises(ConversionError, match=r"math500: source row 0 has no column 'problem'"):
        prepare(["math500"], tmp_path)


def test_gsm8k_final_answer():
    assert gsm8k_final_answer("a\n#### 1,234") == "1234"
    assert gsm8k_final_answer("#### -3") == "-3"
    with pytest.raises(ValueError, match="no '####'"):
        gsm8k_final_answer("the answer is 3")


@pytest.mark.parametrize(("value", "text"), [(27.0, "27"), (0.5, "0.5"), (204, "204"), (" 70 ", "70"), ("\\frac{1}{2}", "\\frac{1}{2}")])
def test_answer_text(value, text):
    assert answer_text(value) == text


@pytest.mark.parametrize("value", [None, float("nan"), "", "  ", True])
def test_answer_text_refuses_non_answers(value):
    with pytest.raises(ValueError):
        answer_text(value)


def test_every_family_has_a_converter():
    from cancelctl.data import catalog

    assert {e.family for e in catalog()} == set(CONVERTERS)
