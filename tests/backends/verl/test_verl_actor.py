"""verl 0.9.1's real actor update under our losses, on CPU (no GPU, no download).

One subprocess (verl's module-level platform/engine state is per process) runs every scenario of
SCENARIOS through `ActorRolloutRefWorker` → `TrainingWorker` → FSDP2 engine → `ppo_loss` (wrapped by
losses.verl_plugin) → the registered loss, over a tiny random Qwen2 (verl_actor_run.py; the CPU
platform is cancelctl.backends.verl.cpu.platform, registered through verl's PlatformRegistry by the
`verl.plugins` entry point). Two SGD steps (lr 1, fp32)
per scenario on one batch of 8 prompts × G 4; step 2 is off-policy, so the clips act.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

pytestmark = pytest.mark.verl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from verl_actor_run import cpu_env  # noqa: E402

TRANSFORMS = ("min_replace", "orth_proj", "pos_orth_qp", "trunc_rebalance")
MECHANISM_KEYS = {
    "mismatch/rho_std",
    "mismatch/rho_max",
    "mismatch/pcc",
    "hacking/J",
    "dfpo/asym",
    "dfpo/ortho_residual",
    "dfpo/weight_dispersion",
    *(f"cancel/energy_b{k}" for k in range(4)),
    "cancel/flip_pos",
    "cancel/flip_neg",
}
SCENARIOS = [
    {"name": "vanilla", "loss_mode": "vanilla"},
    {"name": "cancel_grpo", "loss_mode": "cancel_grpo"},
    {"name": "gspo", "loss_mode": "gspo"},
    {"name": "cancel_gspo", "loss_mode": "cancel_gspo"},
    *({"name": f"dfpo_{t}", "loss_mode": "cancel_dfpo", "policy_loss": {"transform": t, "mechanism_every": 1}}
      for t in TRANSFORMS),  # fmt: skip
    {"name": "dfpo_no_stop_grad", "loss_mode": "cancel_dfpo", "policy_loss": {"stop_grad": False}},
    {"name": "dfpo_scale", "loss_mode": "cancel_dfpo", "policy_loss": {"scale": 0.5}},
    # 24 real rows + 8 V1 padding rows; the second micro-batch holds 2 groups and the 8 pad rows
    {"name": "dfpo_pad_rows", "loss_mode": "cancel_dfpo", "micro_batch": 16, "pad_rows": 8, "steps": 1},
    # micro-batches that split groups: 2 rows (G = 4), and token-balanced dynamic batching
    {"name": "dfpo_split_fixed", "loss_mode": "cancel_dfpo", "micro_batch": 2, "steps": 1},
    {"name": "dfpo_split_dynamic", "loss_mode": "cancel_dfpo", "dynamic_bsz": True, "max_tokens": 40, "steps": 1},
]


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("verl_actor")
    (out / "scenarios.json").write_text(json.dumps(SCENARIOS))
    with socket.socket() as s:  # a free loopback port for torch.distributed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, str(HERE / "verl_actor_run.py"), str(out / "scenarios.json"), str(out)],
        env=dict(os.environ, **cpu_env(port)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())

    def delta(name: str) -> torch.Tensor:
        params = torch.load(out / f"{name}.pt")
        return torch.cat([params[k].flatten() for k in sorted(params)])

    return results, delta


def ok(results: dict, name: str) -> dict:
    assert "error" not in results[name], results[name].get("trace")
    return results[name]["metrics"]


@pytest.mark.parametrize("ours, theirs", [("cancel_grpo", "vanilla"), ("cancel_gspo", "gspo")])
def test_cancel_losses_give_verls_own_update(verl_run, ours, theirs):
    results, delta = verl_run
    ok(results, ours), ok(results, theirs)
    assert delta(theirs).abs().max() > 1e-2  # the update is real
    assert (delta(ours) - delta(theirs)).abs().max() <= 1e-6
    assert ok(results, theirs)["actor/pg_clipfrac"] > 0  # step 2 clipped some tokens: the clip is compared too


@pytest.mark.parametrize("name", [f"dfpo_{t}" for t in TRANSFORMS] + ["dfpo_no_stop_grad", "dfpo_scale"])
def test_dfpo_updates_the_model_through_verl(verl_run, name):
    results, delta = verl_run
    metrics = ok(results, name)
    assert delta(name).abs().max() > 1e-3
    assert (delta(name) - delta("gspo")).abs().max() > 1e-4  # not GSPO's update
    if name == "dfpo_scale":  # no transform: orthogonality is not restored
        assert metrics["dfpo/ortho_residual"] > 1e-3
    else:
        assert metrics["dfpo/ortho_residual"] < 1e-6


def test_split_groups_are_refused_with_the_fix(verl_run):
    results, _ = verl_run
    for name in ("dfpo_split_fixed", "dfpo_split_dynamic"):
        error = results[name].get("error", "")
        assert "a micro-batch split a group" in error, (name, results[name])
        assert "ppo_micro_batch_size_per_gpu to a multiple of G" in error and "force_group_size=G" in error


def test_v1_padding_rows_do_not_break_the_group_check(verl_run):
    results, delta = verl_run
    ok(results, "dfpo_pad_rows")
    assert delta("dfpo_pad_rows").abs().max() > 1e-3


def test_spec_mechanism_keys_come_out_of_a_real_update(verl_run):
    results, _ = verl_run
    metrics = ok(results, "dfpo_min_replace")
    assert MECHANISM_KEYS <= set(metrics), MECHANISM_KEYS - set(metrics)
    shares = [metrics[f"cancel/energy_b{k}"] for k in range(4)]
    assert sum(shares) == pytest.approx(1.0) and min(shares) >= 0
    assert 0 < metrics["mismatch/rho_std"] < 0.2 and metrics["mismatch/pcc"] > 0.5  # the runner's 0.05 log-prob noise
    assert metrics["dfpo/weight_dispersion"] == 0.0  # min_replace: one weight per live group, exactly (SPEC)
    gspo = ok(results, "cancel_gspo")
    assert gspo["dfpo/weight_dispersion"] > 0  # GSPO: post-clip weights differ within a group at step 2
    assert "cancel/energy_b0" not in gspo  # mechanism_every defaults to 0: off
