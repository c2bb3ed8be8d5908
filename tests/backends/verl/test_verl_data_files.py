"""A verl run's data before anything is queued: `validate` and `sweep` read the files (a missing one
names the `cancelctl data prepare` that makes it, at the spec line naming it; exit 2, nothing
submitted), prepared data is scored by cancelctl's rewards, and the job hands verl absolute paths."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prepared_data import write_stand_ins
from project_paths import EXPERIMENTS
from typer.testing import CliRunner

from cancelctl.backends.verl.data_files import data_problems, scored_by_cancelctl
from cancelctl.backends.verl.command import job_overrides
from cancelctl.backends.verl.render import render_overrides
from cancelctl.cli import app
from cancelctl.data.rewards import REWARD_MODULE
from cancelctl.spec.expand import load_sweep

runner = CliRunner()
GROUP_SIZE = EXPERIMENTS / "group-size.yaml"


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A directory to run cancelctl in, with a copy of group-size.yaml."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CANCELCTL_WORKDIR", str(tmp_path / ".cancelctl"))
    shutil.copy(GROUP_SIZE, tmp_path / "group-size.yaml")
    return tmp_path


def yaml_line(path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_missing_data_names_the_prepare_command_at_the_line_that_names_the_file(here):
    result = runner.invoke(app, ["validate", "--skip-verl", "group-size.yaml"])
    assert result.exit_code == 2, result.output
    train, val = yaml_line(here / "group-size.yaml", "train_files"), yaml_line(here / "group-size.yaml", "val_files")
    lines = [line.strip() for line in result.output.splitlines() if "no such file" in line]
    assert lines == [
        f"group-size.yaml:{train}:5: data.train_files: data/dapo-math-17k/train.parquet: no such file; "
        "make it with: cancelctl data prepare dapo-math-17k",
        f"group-size.yaml:{val}:5: data.val_files: data/aime25/test.parquet: no such file; "
        "make it with: cancelctl data prepare aime25",
    ], result.output  # once each, however many runs name the file
    assert "Traceback" not in result.output


def test_prepared_data_validates_and_skip_data_does_not_read_it(here):
    assert runner.invoke(app, ["validate", "--skip-verl", "--skip-data", "group-size.yaml"]).exit_code == 0
    write_stand_ins(["dapo-math-17k", "aime25"], here)
    result = runner.invoke(app, ["validate", "--skip-verl", "group-size.yaml"])
    assert result.exit_code == 0, result.output


def test_a_file_without_verls_columns_or_with_an_unscored_data_source_is_named(here):
    (train,) = write_stand_ins(["dapo-math-17k"], here)
    (val,) = write_stand_ins(["aime25"], here)
    pq.write_table(pa.table({"prompt": ["not a chat"], "data_source": ["x"]}), train)
    table = pq.read_table(val)
    pq.write_table(table.set_column(0, "data_source", pa.array(["my/own-set"])), val)
    result = runner.invoke(app, ["validate", "--skip-verl", "group-size.yaml"])
    assert result.exit_code == 2
    out = " ".join(result.output.split())
    assert "data/dapo-math-17k/train.parquet: missing column(s) verl needs: reward_model" in out
    assert "column prompt is string, verl needs a chat list" in out
    assert "data/aime25/test.parquet: data_source 'my/own-set' (1 rows) has no reward in cancelctl.data" in out


def test_sweep_refuses_runs_whose_data_is_missing_and_submits_nothing(here):
    result = runner.invoke(app, ["sweep", "group-size.yaml", "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "cancelctl data prepare dapo-math-17k" in result.output and "nothing submitted" in result.output
    assert not (here / ".cancelctl" / "sweeps" / "group-size").exists()


def test_prepared_data_is_scored_by_cancelctls_rewards_other_data_by_its_own_or_verls():
    runs = load_sweep(GROUP_SIZE).runs
    assert scored_by_cancelctl(runs[0].spec)
    overrides = render_overrides(runs[0])
    assert f"reward.custom_reward_function.path={REWARD_MODULE}" in overrides
    assert "reward.custom_reward_function.name=compute_score" in overrides

    own = runs[0].spec.model_copy(deep=True)
    own.data.train_files, own.data.val_files = ["/data/mine/train.parquet"], []
    assert not scored_by_cancelctl(own)  # not a file `data prepare` makes: verl's scorer for its data_source
    own.data.reward_function = "rewards/mine.py:score"
    assert not scored_by_cancelctl(own)


def test_the_job_hands_verl_absolute_paths_against_the_launch_dir(tmp_path):
    run = load_sweep(GROUP_SIZE).runs[0]
    run.spec.data.reward_function = "rewards/mine.py"
    run.spec.data.val_files.append("/abs/aime24/test.parquet")
    lines = job_overrides(run, tmp_path / "run", launch_dir=tmp_path / "project")
    assert f"data.train_files=[{tmp_path}/project/data/dapo-math-17k/train.parquet]" in lines
    assert f"data.val_files=[{tmp_path}/project/data/aime25/test.parquet,/abs/aime24/test.parquet]" in lines
    assert f"reward.custom_reward_function.path={tmp_path}/project/rewards/mine.py" in lines
    assert data_problems(run, base=tmp_path / "project")[0][1].startswith(f"{tmp_path}/project/data/dapo-math-17k/train.parquet: no such file")
    assert f"actor_rollout_ref.model.path={run.spec.model.path}" in lines  # a Hub id: no such folder here


def test_a_verl_experiment_on_a_prepared_model_says_how_to_prepare_it():
    """A model path under models/ is a folder `cancelctl model prepare` writes; its `# Model:` line says so."""
    from cancelctl.models import entry

    checked = 0
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        models = {r.spec.model.path for r in load_sweep(path, allow_unmatched=True).runs if r.spec.backend == "verl"}
        prepared = sorted(m for m in models if m.startswith("models/"))
        if not prepared:
            continue
        (line,) = [line for line in path.read_text().splitlines() if line.startswith("# Model:")]
        command = line.split("`")[1].split()
        assert command[:3] == ["cancelctl", "model", "prepare"], (path.name, line)
        assert [f"models/{entry(name).name}" for name in command[3:]] == prepared, (path.name, line)
        checked += 1
    assert checked == 1  # real-lm


def test_a_model_folder_in_the_launch_dir_is_handed_to_verl_absolute(tmp_path):
    """`model prepare` writes models/NAME where the sweep is launched; verl runs in the run folder."""
    run = load_sweep(GROUP_SIZE).runs[0]
    run.spec.model.path = "models/smollm2-135m"
    (tmp_path / "project" / "models" / "smollm2-135m").mkdir(parents=True)
    lines = job_overrides(run, tmp_path / "run", launch_dir=tmp_path / "project")
    assert f"actor_rollout_ref.model.path={tmp_path}/project/models/smollm2-135m" in lines


@pytest.mark.verl
def test_verls_own_loader_finds_cancelctls_reward_by_package():
    """The override the renderer writes, resolved by verl's `get_custom_reward_fn` as its reward loop does."""
    pytest.importorskip("verl")
    pytest.importorskip("math_verify")
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    overrides = dict(line.split("=", 1) for line in render_overrides(load_sweep(GROUP_SIZE).runs[0]) if line.startswith("reward."))
    config = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": overrides["reward.custom_reward_function.path"], "name": overrides["reward.custom_reward_function.name"],
    }}})
    score = get_custom_reward_fn(config)
    assert score(data_source="math-ai/aime25", solution_str="so $\\boxed{70}$", ground_truth="70", extra_info={}) == 1.0
    assert score(data_source="math-ai/aime25", solution_str="so $\\boxed{71}$", ground_truth="70", extra_info={}) == 0.0


def test_every_verl_experiment_names_data_that_data_prepare_makes_and_says_how():
    """Specs that run as shipped: each data file is one `cancelctl data prepare` writes, and the
    file's `# Data:` line is the command that makes exactly those datasets."""
    from cancelctl.data.layout import dataset_for_path

    checked = 0
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        runs = [r for r in load_sweep(path, allow_unmatched=True).runs if r.spec.backend == "verl"]
        if not runs:
            continue
        files = {f for run in runs for f in [*run.spec.data.train_files, *run.spec.data.val_files]}
        made = {f: dataset_for_path(f) for f in files}
        assert all(made.values()), (path.name, [f for f, m in made.items() if m is None])
        (line,) = [line for line in path.read_text().splitlines() if line.startswith("# Data:")]
        command = line.split("`")[1].split()
        assert command[:3] == ["cancelctl", "data", "prepare"], (path.name, line)
        assert set(command[3:]) == {m[0] for m in made.values()}, (path.name, line)
        checked += 1
    assert checked == 8  # group-size, dfpo-vs-gspo, batching, delta-injection, clip-strength, variance-noise, first-verl, real-lm
