"""`cancelctl data list / prepare`: thin verbs over cancelctl.data (its own tests are in tests/data)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cancelctl.cli import app

runner = CliRunner()


def test_list_names_every_dataset_with_its_source_and_verifier():
    from cancelctl.data import catalog

    result = runner.invoke(app, ["data", "list"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for item in catalog():
        assert item.name in result.output and item.verifier in result.output


def test_list_says_the_rows_prepare_writes_for_the_small_models_set():
    """chain_sum_small's test split is its held-out questions, once each: 38, not a tenth of train
    (100); tests/data/test_data_gym.py checks that prepare writes what the catalog says."""
    result = runner.invoke(app, ["data", "list"], terminal_width=300)
    row = next(line for line in result.output.splitlines() if "chain_sum_small" in line)
    assert "train 1,000 + test 38" in row, row


def test_an_unknown_name_is_bad_input_naming_the_known_ones(tmp_path):
    result = runner.invoke(app, ["data", "prepare", "nope", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "nope" in result.output and "chain_sum" in result.output and "unknown dataset" in result.output
    assert not any(tmp_path.iterdir())


def test_an_unknown_model_is_bad_input_naming_the_known_ones(tmp_path):
    """The catalogs' lookups raise argument errors: the CLI's one handler says so, no per-verb except."""
    result = runner.invoke(app, ["model", "prepare", "nope", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "unknown model" in result.output and "no model 'nope'" in result.output
    assert not any(tmp_path.iterdir())


def test_prepare_writes_verl_parquet_and_the_second_call_does_nothing(tmp_path):
    pytest.importorskip("reasoning_gym")
    args = ["data", "prepare", "chain_sum", "--out", str(tmp_path), "--size", "20", "--seed", "3"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "train 20, test 2 rows written" in first.output
    files = sorted(p.name for p in (tmp_path / "chain_sum").glob("*.parquet"))
    assert files == ["test.parquet", "train.parquet"]
    stamp = (tmp_path / "chain_sum" / "train.parquet").stat().st_mtime_ns
    second = runner.invoke(app, args)
    assert second.exit_code == 0 and "already there" in second.output, second.output
    assert (tmp_path / "chain_sum" / "train.parquet").stat().st_mtime_ns == stamp
