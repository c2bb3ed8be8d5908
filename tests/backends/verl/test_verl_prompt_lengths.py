"""`validate`, `plan --json` and `smoke` measure every prompt under the model's chat template before
the queue: a sweep whose prompts all exceed data.max_prompt_length is refused (exit 2, at the field's
line, naming the file, the prompts kept, the shortest and longest); one that loses some is warned; a
tokenizer that is not on this machine skips the check, said once."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from cancelctl.cli import app

runner = CliRunner()
CHATML_TOKENS = 19  # tiny_verl's ChatML around one user message, with the generation prompt
PROMPTS_PER_STEP = 4


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    from tiny_verl import build_tokenizer

    path = tmp_path_factory.mktemp("model")
    build_tokenizer(path)  # one token per byte
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    return path


def write_data(path: Path, contents: list[str]) -> None:
    rows = [{"data_source": "tiny", "prompt": [{"role": "user", "content": c}],
             "reward_model": {"style": "rule", "ground_truth": "1"}} for c in contents]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


@pytest.fixture
def here(tmp_path, monkeypatch, model_dir):
    """A sweep on `model_dir` over 20 training prompts of 10..29 characters and 2 validation prompts."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CANCELCTL_WORKDIR", str(tmp_path / ".cancelctl"))
    write_data(tmp_path / "data" / "train.parquet", ["x" * n for n in range(10, 30)])
    write_data(tmp_path / "data" / "val.parquet", ["y" * 12, "y" * 26])
    (tmp_path / "reward.py").write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                        "    return 0.0\n")
    return tmp_path


def write_sweep(here: Path, max_prompt_length: int, model: str) -> Path:
    spec = {"name": "lengths", "seeds": [0], "arms": {"a": {}}, "base": {
        "backend": "verl", "executor": "local",
        "model": {"path": model},
        "data": {"train_files": ["data/train.parquet"], "val_files": ["data/val.parquet"],
                 "max_prompt_length": max_prompt_length, "max_response_length": 64, "reward_function": "reward.py"},
        "algorithm": {"mini_batch_size": 2, "micro_batch_size_per_gpu": 2},
        "rollout": {"G": 2},
        "budget": {"steps": 2, "prompts_per_step": PROMPTS_PER_STEP},
        "cluster": {"nodes": 1, "gpus_per_node": 1}}}
    path = here / "lengths.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.verl  # the tokenizer needs transformers (the verl extra)
def test_validate_refuses_a_sweep_whose_prompts_all_exceed_max_prompt_length(here, model_dir):
    sweep = write_sweep(here, CHATML_TOKENS + 5, str(model_dir))
    result = runner.invoke(app, ["validate", "--skip-verl", str(sweep.name)])
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    at = f"lengths.yaml:{line_of(sweep, 'max_prompt_length')}:"
    assert (f"{at}5: data.max_prompt_length 24 keeps 0 of 20 train prompts under the model's chat template "
            f"(data/train.parquet: 0 of 20 kept, shortest {10 + CHATML_TOKENS}, longest {29 + CHATML_TOKENS} tokens): "
            "verl drops the rest and one step takes budget.prompts_per_step = 4") in out
    assert "0 of 2 val prompts" in out and "validation needs at least one" in out
    assert "Traceback" not in result.output


@pytest.mark.verl  # the tokenizer needs transformers (the verl extra)
def test_fewer_kept_than_one_step_is_refused_more_is_a_warning_with_the_share_dropped(here, model_dir):
    sweep = write_sweep(here, CHATML_TOKENS + 12, str(model_dir))  # keeps 10..12: 3 prompts, one step needs 4
    result = runner.invoke(app, ["validate", "--skip-verl", sweep.name])
    assert result.exit_code == 2 and "keeps 3 of 20 train prompts" in " ".join(result.output.split())
    sweep = write_sweep(here, CHATML_TOKENS + 25, str(model_dir))  # keeps 16 of 20 and 1 of 2
    result = runner.invoke(app, ["validate", "--skip-verl", sweep.name])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert (f"train: 4 of 20 prompts (20.0%) exceed max_prompt_length 44 under the model's chat template, longest "
            f"{29 + CHATML_TOKENS}: verl drops them (data/train.parquet)") in out
    assert "val: 1 of 2 prompts (50.0%) exceed max_prompt_length 44" in out


@pytest.mark.verl  # the tokenizer needs transformers (the verl extra)
def test_plan_json_carries_the_counts(here, model_dir):
    sweep = write_sweep(here, CHATML_TOKENS + 25, str(model_dir))
    result = runner.invoke(app, ["plan", "--json", sweep.name])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    train, val = plan["runs"][0]["prompt_lengths"]
    assert (train["field"], train["prompts"], train["kept"], train["dropped"], train["needed"]) == \
        ("data.train_files", 20, 16, 4, PROMPTS_PER_STEP)
    assert train["files"] == [{"file": "data/train.parquet", "prompts": 20, "kept": 16, "dropped": 4,
                               "shortest": 10 + CHATML_TOKENS, "longest": 29 + CHATML_TOKENS}]
    assert (val["kept"], val["refused"]) == (1, False) and plan["prompt_lengths_skipped"] is None
    table = runner.invoke(app, ["plan", sweep.name], env={"COLUMNS": "400"})
    assert table.exit_code == 0 and "train 16/20 · val 1/2" in table.output, table.output


def test_a_tokenizer_not_on_this_machine_skips_the_check_said_once(here, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    sweep = write_sweep(here, 8, "org/not-cached")
    result = runner.invoke(app, ["validate", "--skip-verl", sweep.name])
    assert result.exit_code == 0, result.output
    assert " ".join(result.output.split()).count("prompt lengths not measured: model.path: model 'org/not-cached' "
                                                 "is neither a folder here nor in the Hugging Face cache") == 1
    plan = json.loads(runner.invoke(app, ["plan", "--json", sweep.name]).output)
    assert plan["runs"][0]["prompt_lengths"] is None and "org/not-cached" in plan["prompt_lengths_skipped"]
    table = " ".join(runner.invoke(app, ["plan", sweep.name]).output.split())
    assert "prompts kept" not in table and "model 'org/not-cached' is neither a folder here" in table


@pytest.mark.verl  # the tokenizer needs transformers (the verl extra)
def test_smoke_refuses_before_any_job_in_seconds(here, model_dir, monkeypatch):
    import cancelctl.smoke

    def no_jobs(*args, **kwargs):
        raise AssertionError("the smoke ran its jobs")

    monkeypatch.setattr(cancelctl.smoke, "run_smoke", no_jobs)
    sweep = write_sweep(here, CHATML_TOKENS + 5, str(model_dir))
    result = runner.invoke(app, ["smoke", sweep.name])
    assert result.exit_code == 2, result.output
    assert "data.max_prompt_length 24 keeps 0 of 20 train prompts" in " ".join(result.output.split())
    assert not (here / ".cancelctl" / "smoke").exists()  # nothing ran
