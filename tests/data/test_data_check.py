"""What `validate` will call: check_parquet's one-line problems, and the command that makes a missing file."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cancelctl.data import check_parquet, dataset_for_path, prepare_command
from cancelctl.data.parquet_files import write_rows_atomic
from cancelctl.data.verl_rows import verl_row


def a_row(data_source="openai/gsm8k"):
    return verl_row(
        data_source=data_source,
        messages=[{"role": "user", "content": "1+1?"}],
        ability="math",
        ground_truth="2",
        split="train",
        index=0,
        source_id="0",
        question="1+1?",
        entry="{}",
    )


def write_table(path, columns: dict):
    pq.write_table(pa.table(columns), path)
    return path


def test_a_file_prepare_wrote_has_no_problems(tmp_path):
    path = tmp_path / "train.parquet"
    write_rows_atomic([a_row(), a_row("reasoning_gym/chain_sum")], path)
    assert check_parquet(path) == []


def test_missing_columns_verl_needs(tmp_path):
    path = write_table(tmp_path / "x.parquet", {"question": ["1+1?"], "answer": ["2"]})
    assert check_parquet(path) == [f"{path}: missing column(s) verl needs: prompt, data_source, reward_model"]


def test_a_plain_text_prompt_and_a_reward_model_without_ground_truth(tmp_path):
    path = write_table(
        tmp_path / "x.parquet",
        {"data_source": ["openai/gsm8k"], "prompt": ["1+1?"], "reward_model": [{"style": "rule", "answer": "2"}]},
    )
    assert check_parquet(path) == [
        f"{path}: column prompt is string, verl needs a chat list of {{role, content}} messages",
        f"{path}: column reward_model has no ground_truth field (is struct<style: string, answer: string>)",
    ]


def test_every_row_is_read_for_its_ground_truth_not_only_the_first(tmp_path):
    rows = [a_row() for _ in range(300)]
    table = pa.Table.from_pylist(rows)
    truths = [{"style": "rule", "ground_truth": "2"}] * 300
    truths[200], truths[250] = {"style": "rule", "ground_truth": None}, {"style": "rule", "ground_truth": "  "}
    truths[260] = None
    table = table.set_column(table.schema.get_field_index("reward_model"), "reward_model",
                             pa.array(truths, table.schema.field("reward_model").type))
    path = tmp_path / "x.parquet"
    pq.write_table(table, path, row_group_size=100)
    assert check_parquet(path) == [f"{path}: 3 of 300 rows have no reward_model.ground_truth (the first: row 200); "
                                   "the reward has nothing to score them against (verl fails when it draws one)"]
    # a reward of the spec's own may not need the truth, but verl still reads reward_model of every row
    assert check_parquet(path, require_known_reward=False) == [
        f"{path}: 1 of 300 rows have no reward_model (the first: row 260); the reward has nothing to score them "
        "against (verl fails when it draws one)"]


def test_messages_without_role_or_content(tmp_path):
    path = write_table(
        tmp_path / "x.parquet",
        {"data_source": ["openai/gsm8k"], "prompt": [[{"text": "1+1?"}]], "reward_model": [{"ground_truth": "2"}]},
    )
    assert check_parquet(path) == [f"{path}: column prompt messages are struct<text: string>, verl needs {{role, content}}"]


def test_a_data_source_with_no_reward(tmp_path):
    path = tmp_path / "x.parquet"
    write_rows_atomic([a_row("lighteval/MATH"), a_row("lighteval/MATH"), a_row()], path)
    (problem,) = check_parquet(path)
    assert problem.startswith(f"{path}: data_source 'lighteval/MATH' (2 rows) has no reward in cancelctl.data (known: ")
    assert "openai/gsm8k" in problem and "reasoning_gym/<task>" in problem
    # a spec with its own reward function: only the columns matter
    assert check_parquet(path, require_known_reward=False) == []


def test_an_empty_file(tmp_path):
    path = tmp_path / "x.parquet"
    write_rows_atomic([], path)
    assert check_parquet(path) == [f"{path}: no rows"]


def test_not_a_parquet_file(tmp_path):
    path = tmp_path / "x.parquet"
    path.write_text("data_source,prompt\n")
    (problem,) = check_parquet(path)
    assert problem.startswith(f"{path}: not a readable parquet file (")


def test_a_missing_file_names_the_command_that_makes_it(tmp_path):
    assert check_parquet("data/aime24/test.parquet") == [
        "data/aime24/test.parquet: no such file; make it with: cancelctl data prepare aime24"
    ]
    other = tmp_path / "sets" / "chain_sum" / "train.parquet"
    assert check_parquet(other) == [f"{other}: no such file; make it with: cancelctl data prepare chain_sum --out {tmp_path / 'sets'}"]
    assert check_parquet("data/aime24.parquet") == ["data/aime24.parquet: no such file"]  # not a file prepare writes
    assert check_parquet("data/aime24/train.parquet") == ["data/aime24/train.parquet: no such file"]  # aime24 has no train


def test_prepare_command():
    assert prepare_command("gsm8k") == "cancelctl data prepare gsm8k"
    assert prepare_command("gsm8k", out_dir="data") == "cancelctl data prepare gsm8k"
    assert prepare_command("chain_sum", out_dir="my data", seed=3, size=64) == (
        "cancelctl data prepare chain_sum --out 'my data' --seed 3 --size 64"
    )
    with pytest.raises(KeyError, match="no dataset 'aime2024'"):
        prepare_command("aime2024")


def test_dataset_for_path(tmp_path):
    assert dataset_for_path("data/dapo-math-17k/train.parquet") == ("dapo-math-17k", Path("data"))
    assert dataset_for_path(tmp_path / "gsm8k" / "test.parquet") == ("gsm8k", tmp_path)
    assert dataset_for_path("data/dapo-math-17k.parquet") is None
    assert dataset_for_path("data/unknown/train.parquet") is None
