"""Planning's preflight: a backend's launch refusals (`Backend.launch_refusals`, the backend found by
its registered name) stop a launch before anything is written, naming the arm's file:line."""

from __future__ import annotations

import pytest
from prepared_data import write_verl_file

from cancelctl.backends import registry
from cancelctl.backends.lab.backend import LabBackend
from cancelctl.errors import SpecError
from cancelctl.launch import launch_sweep
from cancelctl.spec.expand import load_sweep

SWEEP = """\
name: pre
base:
  backend: {backend}
  rollout: {{G: 2}}
{extra}arms:
  gspo:
    algorithm: {{loss: gspo}}
  dfpo:
    algorithm: {{loss: dfpo}}
seeds: [0, 1]
"""
VERL_BASE = """\
  data: {train_files: [train.parquet], val_files: [val.parquet]}
  model: {path: Qwen/Qwen2.5-0.5B}
"""


def test_verl_refuses_what_it_cannot_run_yet_before_anything_is_written(write_yaml, tmp_path, monkeypatch):
    path = write_yaml(SWEEP.format(backend="verl", extra=VERL_BASE))
    monkeypatch.chdir(tmp_path)  # the data files, read before anything is written
    for name in ("train.parquet", "val.parquet"):
        write_verl_file(tmp_path / name, "openai/gsm8k")
    sweep = load_sweep(path, allow_unmatched=True)
    # every loss runs on verl today (dfpo gets its group ids): the verl hook refuses nothing ...
    assert len(launch_sweep(sweep, workdir=tmp_path / "ok", dry_run=True).submitted) == 4
    # ... and what its planning hook refuses (here a planted data problem) is refused naming the arm
    from cancelctl.backends.verl import data_files

    monkeypatch.setattr(
        data_files, "data_problems",
        lambda run: [("algorithm.loss dfpo", "planted refusal")] if run.spec.algorithm.loss == "dfpo" else [],
    )
    with pytest.raises(SpecError) as caught:
        launch_sweep(sweep, workdir=tmp_path / "w", dry_run=True)
    assert caught.value.title == "the verl backend cannot launch these runs yet; nothing submitted"
    text = caught.value.render()
    assert f"{path}:10:3" in text and "arms.dfpo" in text and "algorithm.loss dfpo" in text  # where the arm is
    assert "2 runs: dfpo-s0, dfpo-s1" in text and "arms.gspo" not in text
    assert not (tmp_path / "w").exists()


class CursedLab(LabBackend):
    def launch_refusals(self, run):
        return ["seed 1 is cursed"] if run.seed == 1 else []


def test_the_refusals_of_a_registered_backend_are_used(write_yaml, tmp_path):
    sweep = load_sweep(write_yaml(SWEEP.format(backend="lab", extra="")), allow_unmatched=True)
    assert launch_sweep(sweep, workdir=tmp_path / "w", dry_run=True).submitted  # the lab refuses nothing
    registry.register("lab", CursedLab)
    try:
        with pytest.raises(SpecError) as caught:
            launch_sweep(sweep, workdir=tmp_path / "w", dry_run=True)
        assert caught.value.title == "the lab backend cannot launch these runs yet; nothing submitted"
        text = caught.value.render()
        assert "1 run: gspo-s1" in text and "1 run: dfpo-s1" in text and "s0" not in text
    finally:
        registry.unregister("lab")
    assert type(registry.get_backend("lab")) is LabBackend  # the built-in is back
