"""Adding a backend is one class and one registration (docs/extending.md): the toy `coin` backend
(tests/backends/protocol/coin_backend.py), installed through the `cancelctl.backends` entry point group as a
user's package would be, runs `cancelctl sweep` on the local executor and `cancelctl report` reads it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from coin_backend import coin_reward
from typer.testing import CliRunner

from cancelctl.backends import registry
from cancelctl.cli import app

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).resolve().parent
STEPS, SEEDS, KAPPA = 6, (0, 1), 0.66  # two seeds: a paired table, four job processes
ARMS = {"steady": 0.2, "bold": 0.3}  # arm -> algorithm.clip_high, the coin's rise
runner = CliRunner()


@pytest.fixture
def coin_installed(tmp_path, monkeypatch):
    """A distribution on the path declaring `coin = coin_backend:CoinBackend`, for this process and the jobs'."""
    site = tmp_path / "site"
    info = site / "coin_backend-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: coin-backend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\ncoin = coin_backend:CoinBackend\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), str(HERE), os.environ.get("PYTHONPATH")])))
    yield
    registry.unregister("coin")


def coin_sweep(directory: Path) -> Path:
    spec = {"name": "coin", "base": {"backend": "coin", "executor": "local", "rollout": {"G": 2},
                                     "budget": {"steps": STEPS, "prompts_per_step": 2}},
            "arms": {arm: {"algorithm": {"loss": "grpo", "clip_high": rise}} for arm, rise in ARMS.items()},
            "seeds": list(SEEDS), "baseline": "steady"}
    path = directory / "coin.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def steps_to(kappa: float, rise: float, seed: int) -> int:
    """The first step whose reward reaches κ, from the coin's own curve."""
    return next(step for step in range(1, STEPS + 1) if coin_reward(rise, seed, step) >= kappa)


def test_a_toy_backend_installed_by_entry_point_runs_a_sweep_and_a_report(tmp_path, workdir, coin_installed):
    assert "coin" in registry.backend_names() and registry.get_backend("coin").name == "coin"
    ran = runner.invoke(app, ["sweep", str(coin_sweep(tmp_path)), "-w", str(workdir)])  # jobs in their own processes
    assert ran.exit_code == 0, ran.output
    reported = runner.invoke(app, ["report", "coin", "-w", str(workdir), "--kappa", str(KAPPA),
                                   "--out", str(tmp_path / "report")], env={"COLUMNS": "200"})
    assert reported.exit_code == 0, reported.output
    lines = reported.output.splitlines()
    matching = [line for line in lines if line.startswith("│ steady") or line.startswith("│ bold")][:2]
    assert all(line.split("│")[-2].strip() == "yes" for line in matching), matching  # compute-matched
    # the steps-to-κ table: every seed of every arm where its logged curve first reaches κ
    for arm, rise in ARMS.items():
        per_run = " · ".join(f"s{seed}: {steps_to(KAPPA, rise, seed)}" for seed in SEEDS)
        assert any(line.startswith(f"│ {arm} ") and f"│ {per_run} │" in line for line in lines), (
            arm, per_run, reported.output)
    assert steps_to(KAPPA, ARMS["bold"], 0) < steps_to(KAPPA, ARMS["steady"], 0)  # the table tells the arms apart


def test_a_backend_registered_in_process_is_named_by_the_spec_and_refused_once_unregistered(tmp_path):
    from coin_backend import CoinBackend

    from cancelctl.errors import SpecError
    from cancelctl.spec.expand import load_sweep

    path = coin_sweep(tmp_path)
    registry.register("coin", CoinBackend)
    try:
        sweep = load_sweep(path)
        assert {run.spec.backend for run in sweep.runs} == {"coin"} and sweep.runs[0].spec.algorithm.lr == 1e-3
    finally:
        registry.unregister("coin")
    with pytest.raises(SpecError) as refused:
        load_sweep(path)
    assert "backend" in refused.value.render() and "'lab' or 'verl'" in refused.value.render()
