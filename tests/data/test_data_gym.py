"""reasoning-gym sets generated offline: deterministic in the seed, train and test disjoint, written
in verl's format with the item kept for its scorer."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from cancelctl.data import VERL_COLUMNS, entry, prepare
from cancelctl.data.parquet_files import sha256_of
from cancelctl.data.sources import generate_gym_splits, gym_sizes
from cancelctl.data.verl_rows import GYM_INSTRUCTION, VERL_SCHEMA

pytest.importorskip("reasoning_gym")

GYM_SETS = ["chain_sum", "basic_arithmetic", "gsm_symbolic"]


@pytest.mark.parametrize("name", GYM_SETS)
def test_each_gym_set_is_written_in_verl_format(tmp_path, name):
    (prepared,) = prepare([name], tmp_path, seed=3, size=20)
    assert prepared.rows == {"train": 20, "test": 2}
    for split, path in prepared.files.items():
        table = pq.read_table(path)
        assert table.schema.equals(VERL_SCHEMA) and tuple(table.column_names) == VERL_COLUMNS
        for index, row in enumerate(table.to_pylist()):
            item = json.loads(row["extra_info"]["entry"])
            assert row["data_source"] == f"reasoning_gym/{name}"
            assert row["prompt"] == [{"role": "user", "content": f"{item['question']}\n\n{GYM_INSTRUCTION}"}]
            assert row["ability"] == "reasoning"
            assert row["reward_model"] == {"style": "rule", "ground_truth": item["answer"]}
            assert (row["extra_info"]["split"], row["extra_info"]["index"]) == (split, index)
            assert row["extra_info"]["question"] == item["question"]
            assert item["metadata"]["source_dataset"] == name


def test_the_same_seed_makes_the_same_files_another_seed_others(tmp_path):
    one = prepare(["chain_sum"], tmp_path / "a", seed=11, size=30)[0]
    again = prepare(["chain_sum"], tmp_path / "b", seed=11, size=30)[0]
    other = prepare(["chain_sum"], tmp_path / "c", seed=12, size=30)[0]
    for split in ("train", "test"):
        assert sha256_of(one.files[split]) == sha256_of(again.files[split])
        assert sha256_of(one.files[split]) != sha256_of(other.files[split])


def test_a_new_seed_or_size_rebuilds_the_same_does_not(tmp_path):
    assert not prepare(["basic_arithmetic"], tmp_path, seed=1, size=10)[0].reused
    assert prepare(["basic_arithmetic"], tmp_path, seed=1, size=10)[0].reused
    assert not prepare(["basic_arithmetic"], tmp_path, seed=2, size=10)[0].reused
    assert not prepare(["basic_arithmetic"], tmp_path, seed=2, size=12)[0].reused


@pytest.mark.parametrize("name", GYM_SETS)
def test_test_questions_are_not_train_questions(name):
    splits = generate_gym_splits(entry(name), seed=0, size=200)
    train = {item["question"] for item in splits["train"]}
    test = [item["question"] for item in splits["test"]]
    assert len(test) == 20 == len(set(test))
    assert not train & set(test)


def test_sizes():
    assert gym_sizes(None) == {"train": 1000, "test": 100}
    assert gym_sizes(8) == {"train": 8, "test": 1}
    assert entry("chain_sum").rows == {"train": 1000, "test": 100}


def test_the_small_model_set_splits_its_200_questions_and_asks_for_a_number(tmp_path):
    """chain_sum_small: two one-digit terms (200 distinct questions). Drawing train first and skipping
    its questions would leave no test question; a fifth of the questions, by hash, is test only."""
    from cancelctl.data.sources import held_out
    from cancelctl.data.verl_rows import GYM_NUMBER_INSTRUCTION

    (prepared,) = prepare(["chain_sum_small"], tmp_path, seed=0)
    train = pq.read_table(prepared.files["train"]).to_pylist()
    test = pq.read_table(prepared.files["test"]).to_pylist()
    train_questions = {row["extra_info"]["question"] for row in train}
    test_questions = [row["extra_info"]["question"] for row in test]
    assert len(train) == 1000 and 140 <= len(train_questions) <= 170  # repeats: RL prompts come round again
    assert 25 <= len(test) == len(set(test_questions)) and not train_questions & set(test_questions)
    assert prepared.rows == entry("chain_sum_small").rows  # what `data list` says
    assert all(held_out(q, 0.2) for q in test_questions) and not any(held_out(q, 0.2) for q in train_questions)
    for row in train[:50] + test:
        item = json.loads(row["extra_info"]["entry"])
        terms = [t for t in item["question"].split(":")[1].replace("=", "").split() if t not in "+-"]
        assert len(terms) == 2 and all(len(t) == 1 for t in terms), item["question"]
        assert row["prompt"][0]["content"].endswith(f"\n\n{GYM_NUMBER_INSTRUCTION}")
        assert row["data_source"] == "reasoning_gym/chain_sum_small"


@pytest.mark.parametrize(
    "response, score",
    [
        ("The final answer to this arithmetic problem is {a}.", 1.0),
        ("{a}", 1.0),
        ("{a}.0", 1.0),
        ("7 + 1 = {a}", 1.0),
        ("{a} is not it, 1234 is", 0.0),  # the last number is the answer
        ("{a}1", 0.0),  # reasoning-gym's own scorer gives this substring partial credit
        ("no number", 0.0),
        ("", 0.0),
    ],
)
def test_the_small_model_set_scores_its_last_number_exactly(response, score):
    from cancelctl.data import compute_score

    for answer, question in (("8", "7 + 1 ="), ("-2", "7 - 9 =")):
        extra = {"entry": json.dumps({"question": question, "answer": answer, "metadata": {}})}
        text = response.format(a=answer)
        assert compute_score("reasoning_gym/chain_sum_small", text, answer, extra) == score, text
