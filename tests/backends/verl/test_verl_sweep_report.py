"""A verl sweep end to end without a GPU: `launch_sweep` (debug executor) → the job entry → a stand-in
for `python -m verl.trainer.main_ppo` → MLflow → `report`. The stand-in is the only mock (the verl run
needs GPUs): it reads the overrides cancelctl rendered and writes verl's file-logger JSONL with verl's
own metric keys (no generated-token count, like verl), its reward rising faster under cancel_grpo, and
the mechanism keys (docs/metrics.md) as verl logs what the `cancel_*` losses return (`actor/<key>`, averaged over
micro-batches): dfpo's weights constant in each group (dispersion 0), GSPO's not."""

from __future__ import annotations

import sys
import textwrap

import pytest
import yaml
from prepared_data import write_stand_ins
from verl_helpers import EXPERIMENTS

from cancelctl.backends.verl import render, supervisor
from cancelctl.launch import launch_sweep
from cancelctl.spec.expand import load_sweep
from cancelctl.report.options import ReportOptions
from cancelctl.report.sweep_report import report_sweep

pytestmark = pytest.mark.verl  # the job entry checks verl's loss plugin before the stand-in runs

STAND_IN = textwrap.dedent(
    """
    import json, os, random, sys
    o = dict(arg.split("=", 1) for arg in sys.argv[1:] if "=" in arg and not arg.startswith("--"))
    steps, every = int(o["trainer.total_training_steps"]), int(o["trainer.test_freq"])
    seed, n = int(o["data.seed"]), int(o["actor_rollout_ref.rollout.n"])
    loss = o["actor_rollout_ref.actor.policy_loss.loss_mode"]
    rate = 0.02 if loss == "cancel_grpo" else 0.01
    dispersion = 0.0 if loss == "cancel_dfpo" else 0.05
    rng = random.Random(seed * 1000 + n)
    with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as fh:
        def log(step, data):
            fh.write(json.dumps({"step": step, "data": data}) + "\\n")
        log(0, {"val-core/aime25/acc/mean@32": 0.1})  # val_before_train
        for step in range(1, steps + 1):
            reward = min(0.9, 0.1 + rate * step) + rng.gauss(0, 0.005)
            data = {"critic/score/mean": reward, "actor/entropy": 1.0 - reward / 2, "actor/pg_loss": 0.01,
                    "response_length/mean": 500.0 + rng.gauss(0, 5), "timing_s/step": 60.0}
            data.update({"actor/mismatch/rho_std": 0.01 + 1e-4 * step, "actor/mismatch/rho_max": 1.5,
                         "actor/mismatch/pcc": 0.99, "actor/hacking/J": rng.gauss(0, 0.1),
                         "actor/dfpo/asym": 0.5, "actor/dfpo/weight_dispersion": dispersion,
                         "actor/dfpo/ortho_residual": 0.0 if loss == "cancel_dfpo" else 0.3,
                         "actor/cancel/flip_pos": 0.2, "actor/cancel/flip_neg": 0.25})
            data.update({f"actor/cancel/energy_b{k}": 0.25 for k in range(4)})
            if step % every == 0 or step == steps:
                data["val-core/aime25/acc/mean@32"] = reward * 0.8
            log(step, data)
    """
)


@pytest.fixture
def small_group_size_sweep(tmp_path, monkeypatch):
    """experiments/group-size.yaml with a budget a stand-in runs in a blink (same arms, G axis, seeds),
    run from a directory holding its data (stand-ins for `cancelctl data prepare dapo-math-17k aime25`)."""
    monkeypatch.chdir(tmp_path)
    write_stand_ins(["dapo-math-17k", "aime25"], tmp_path)
    spec = yaml.safe_load((EXPERIMENTS / "group-size.yaml").read_text())
    spec["name"] = "group-size-mini"
    spec["base"]["budget"]["steps"] = 60
    spec["base"]["eval"]["every"] = 10
    spec["grid"]["rollout.G"] = [4, 8]
    spec["arms"]["grpo"] = {"algorithm": {"loss": "grpo"}}  # beside the file's gspo and dfpo arms
    path = tmp_path / "group-size-mini.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_sweep(path)


def test_verl_sweep_lands_in_mlflow_and_reports_on_the_derived_compute(small_group_size_sweep, tmp_path, monkeypatch):
    script = tmp_path / "verl_stand_in.py"
    script.write_text(STAND_IN)
    monkeypatch.setattr(render, "VERL_ENTRY", [sys.executable, str(script)])
    monkeypatch.setattr(supervisor, "POLL_SECONDS", 0.01)
    workdir = tmp_path / "work"
    sweep = small_group_size_sweep

    launched = launch_sweep(sweep, workdir=workdir, executor="debug")
    assert launched.ok and len(launched.states) == 18, [(s.name, s.state, s.reason) for s in launched.states]
    final = launched.states[0].final
    assert final["compute/update_steps_cum"] == 60 * 4  # 128 prompts in mini-batches of 32, 1 epoch
    assert final["compute/hours_cum"] == pytest.approx(60 * 60 * 8 / 3600)  # 60 steps × 60 s × 8 GPUs

    report = report_sweep(workdir, None, ReportOptions(baseline="gspo", kappa=0.5), out=tmp_path / "report")
    assert not report.violations  # the derived generated tokens match within the protocol's 10%
    car = report.table("compute_at_reward").data.set_index(["group", "arm"])
    for group in ("rollout.G=4", "rollout.G=8"):
        assert car.loc[(group, "gspo"), "normalised"] == pytest.approx(1.0)
        assert car.loc[(group, "grpo"), "normalised"] == pytest.approx(0.5, abs=0.1)  # twice the rate
    scores = report.table("final_scores").data
    assert set(scores["benchmark"]) == {"aime25 avg@32"} and (scores["n_seeds"] == 3).all()
    display = report.table("delta_per_G").display
    assert list(display.columns) == ["benchmark", "arm", "G=4", "G=8"]
    assert (report.out_dir / "report.html").is_file()

    # the mechanism table, from verl's actor/<key> metrics forwarded under the keys of docs/metrics.md
    mech = report.table("mechanisms").data.set_index(["group", "arm", "key"])
    for key in ("dfpo/asym", "dfpo/weight_dispersion", "mismatch/rho_std", "hacking/J", "cancel/energy_b3",
                "cancel/flip_pos", "cancel/flip_neg"):
        assert (mech.xs(key, level="key")["n_seeds"] == 3).all(), key
    for group in ("rollout.G=4", "rollout.G=8"):
        assert mech.loc[(group, "dfpo-min-replace", "dfpo/weight_dispersion"), "mean"] == 0.0
        assert mech.loc[(group, "gspo", "dfpo/weight_dispersion"), "mean"] == pytest.approx(0.05)
        assert mech.loc[(group, "gspo", "mismatch/rho_std"), "mean"] == pytest.approx(1e-4)  # slope per step
