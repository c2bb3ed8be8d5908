"""verl's command inside a job: the rendered `python -m verl.trainer.main_ppo ...` with three
job-local changes (`job_overrides`), and where a requeued verl resumes (`resume_overrides`).

- checkpoints go to `<run_dir>/checkpoints` and Hydra's output to `<run_dir>/hydra`, so a requeued
  job resumes (verl's `trainer.resume_mode` is `auto`) and nothing lands in the launch directory;
- verl logs to its `file` backend (`<run_dir>/verl_metrics.jsonl`) instead of MLflow: the job
  forwards each step to cancelctl's RunLogger (forward.py). `render_command` (the spec's settings
  alone) has `trainer.logger=[console,mlflow]`: the same metrics, logged by verl; `cancelctl render`
  of a SLURM run shows this job command;
- data, reward and model-folder paths are made absolute against where `cancelctl sweep` ran, since
  verl runs in the run folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from cancelctl.backends.verl import render
from cancelctl.backends.verl.cpu.render import job_env
from cancelctl.jobs.heartbeat import HEARTBEAT_DIR_ENV
from cancelctl.backends.verl.data_files import absolute
from cancelctl.backends.verl.render import config_name, render_override_set
from cancelctl.spec.run import RunSpec
from cancelctl.workdir import RUN_JSON

VERL_METRICS = "verl_metrics.jsonl"
ROLLOUT_WEIGHTS = "rollout_weights.jsonl"  # cluster.device cpu: the hf_cpu rollout's weight syncs
_ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"


def job_overrides(run: RunSpec, run_dir: Path, launch_dir: Path | None = None) -> list[str]:
    """verl's overrides in the job. verl runs in the run folder, so relative data and reward paths
    are made absolute against `launch_dir` (where `cancelctl sweep` ran; run.json keeps it), and so
    is a model path that names a folder there (`model prepare`'s models/NAME; a Hub id stays)."""
    overrides = render_override_set(run)
    if launch_dir is not None:  # the renderer's own values, made absolute (pkg:// paths stay as they are)
        for key in ("data.train_files", "data.val_files"):
            overrides.set(key, [absolute(f, launch_dir) for f in overrides.settings[key].value])
        model = overrides.settings["actor_rollout_ref.model.path"]
        model_dir = absolute(model.value, launch_dir)
        if Path(model_dir).is_dir():
            overrides.set(model.key, model_dir)
        reward = overrides.settings.get("reward.custom_reward_function.path")
        if reward is not None:
            overrides.set(reward.key, absolute(reward.value, launch_dir))
    overrides.set("trainer.logger", ["console", "file"])
    overrides.set("trainer.default_local_dir", str(run_dir / "checkpoints"))
    overrides.set("hydra.run.dir", str(run_dir / "hydra"))
    # The file logger lives in verl's TaskRunner and the CPU runtime in every worker (Ray actors, any
    # node): the job's env goes through Ray's runtime_env as well as our own environment.
    for name, value in {**job_env(run), **run_files_env(run, run_dir)}.items():
        overrides.set(f"{_ENV_VARS}.{name}", value, add=True)
    return overrides.lines()


def run_files_env(run: RunSpec, run_dir: Path) -> dict[str, str]:
    """Where verl's processes write into the run folder: the metrics file logger, the heartbeat (phases
    cancelctl's trainer finishes, for the stall watchdog), and on CPU the rollout's weight-sync record
    (one line per update: version = step + 1 when weights follow)."""
    env = {"VERL_FILE_LOGGER_PATH": str(run_dir / VERL_METRICS), HEARTBEAT_DIR_ENV: str(run_dir)}
    if run.spec.cluster.device == "cpu":
        from cancelctl.backends.verl.cpu import WEIGHT_LOG_ENV

        env[WEIGHT_LOG_ENV] = str(run_dir / ROLLOUT_WEIGHTS)
    return env


def job_command(run: RunSpec, run_dir: Path, python: str | None = None, launch_dir: Path | None = None) -> list[str]:
    """verl's command in the job; `python`: the job's own interpreter (the one with cancelctl and verl
    installed; a bare `python3` on a node's PATH may be another), shown as `python3` by `render`."""
    entry = [python, *render.VERL_ENTRY[1:]] if python else render.VERL_ENTRY
    return [*entry, "--config-name", config_name(run), *job_overrides(run, run_dir, launch_dir)]


def launch_dir_of(run_dir: Path) -> Path:
    """Where `cancelctl sweep` ran for this run (run.json), else the job's own working directory."""
    try:
        recorded = json.loads((Path(run_dir) / RUN_JSON).read_text(encoding="utf-8")).get("launch_dir")
    except (OSError, ValueError):
        recorded = None
    return Path(recorded) if recorded else Path.cwd()


def resume_overrides(checkpoints: Path, logged: int) -> list[str]:
    """Where a resumed verl starts: its newest checkpoint whose step the run has logged.

    verl saves a step's checkpoint before it logs the step, so a job killed in between leaves a
    checkpoint ahead of the metrics, and verl's `auto` resume would skip that step's metrics for good.
    An older checkpoint replays the step instead (the forwarder skips the steps already logged); with
    none at or below `logged`, verl starts over. [] when `auto` already picks a logged step."""
    marker = checkpoints / "latest_checkpointed_iteration.txt"  # verl writes it once a save is whole
    try:
        latest = int(marker.read_text().strip())
    except (OSError, ValueError):
        return []
    if latest <= logged:
        return []
    steps = (p.name.removeprefix("global_step_") for p in checkpoints.glob("global_step_*"))
    usable = [int(step) for step in steps if step.isdigit() and int(step) <= logged]  # older than `latest`, so whole
    if not usable:
        return ["trainer.resume_mode=disable"]
    return ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={checkpoints / f'global_step_{max(usable)}'}"]
