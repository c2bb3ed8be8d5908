"""verl 0.9.1's real actor update under our losses, on CPU (no GPU, no download) or on one GPU.

One subprocess (verl's module-level platform/engine state is per process) runs every scenario of
SCENARIOS through `ActorRolloutRefWorker` → `TrainingWorker` → FSDP2 engine → `ppo_loss` (wrapped by
losses.verl_plugin) → the registered loss, over a tiny random Qwen2 (verl_actor_run.py; the CPU
platform is cancelctl.backends.verl.cpu.platform, registered through verl's PlatformRegistry by the
`verl.plugins` entry point). Two SGD steps (lr 1) per scenario on one batch of 8 prompts × G 4;
step 2 is off-policy, so the clips act.

The device is verl_actor_run's `selected_device()`: CPU in fp32 by default; with
CANCELCTL_TEST_VERL_DEVICE=cuda, verl's own GPU platform in its default bf16 mixed precision (skipped
where torch sees no GPU; benchmarks/gpu_verl_actor.sh runs it so). Tests print the values their
tolerances bound (`pytest -rA` shows them).
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
from verl_actor_run import DEVICE_ENV, run_env, selected_device  # noqa: E402

DEVICE = selected_device()
if DEVICE == "cuda" and not torch.cuda.is_available():
    pytest.skip(f"{DEVICE_ENV}=cuda, but torch sees no CUDA device", allow_module_level=True)

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
# cuda only: verl's own losses run twice, to measure the device's run-to-run spread of one update. On
# CPU (deterministic fp32 kernels) two runs are bit-equal; on a GPU, backward kernels that accumulate
# with atomics (SDPA's memory-efficient attention, the embedding's) need not be, and the bf16 forward of
# step 2 magnifies a last-bit difference of step 1's parameters.
RERUNS = {"vanilla": "vanilla_rerun", "gspo": "gspo_rerun"}
if DEVICE == "cuda":
    SCENARIOS += [{"name": rerun, "loss_mode": name} for name, rerun in RERUNS.items()]
EXACT = 1e-6  # fp32: the paths are bit-equal (0.0 measured on CPU)
SPREAD_MARGIN = 4  # on cuda, our loss's update may differ from verl's by this many times verl's own spread


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("verl_actor")
    (out / "scenarios.json").write_text(json.dumps(SCENARIOS))
    with socket.socket() as s:  # a free loopback port for torch.distributed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, str(HERE / "verl_actor_run.py"), str(out / "scenarios.json"), str(out)],
        env=dict(os.environ, **run_env(DEVICE, port)),
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


def gap(delta, a: str, b: str) -> float:
    """max |Δθ(a) − Δθ(b)| over every parameter."""
    return float((delta(a) - delta(b)).abs().max())


def rerun_spread(delta, name: str) -> float:
    """Verl's own run-to-run spread of `name`'s update on this device: 0 on CPU (not rerun there)."""
    return gap(delta, name, RERUNS[name]) if DEVICE == "cuda" else 0.0


def test_the_update_ran_on_the_chosen_device_and_precision(verl_run):
    results, _ = verl_run
    compute = {"cpu": "float32", "cuda": "bfloat16"}[DEVICE]
    assert results["_device"] == DEVICE
    for name, result in results.items():
        if not name.startswith("_") and "error" not in result:
            print(name, result["precision"])
            assert result["precision"] == {"device": DEVICE, "params": "float32", "compute": compute}, name


@pytest.mark.parametrize("ours, theirs", [("cancel_grpo", "vanilla"), ("cancel_gspo", "gspo")])
def test_cancel_losses_give_verls_own_update(verl_run, ours, theirs):
    results, delta = verl_run
    ok(results, ours), ok(results, theirs)
    spread = rerun_spread(delta, theirs)
    print(f"{DEVICE}: max|Δ {theirs}| {delta(theirs).abs().max():.3g}, max|Δ {ours} − Δ {theirs}| "
          f"{gap(delta, ours, theirs):.3g}, {theirs}'s rerun spread {spread:.3g}")  # fmt: skip
    assert delta(theirs).abs().max() > 1e-2  # the update is real
    assert gap(delta, ours, theirs) <= max(EXACT, SPREAD_MARGIN * spread)  # EXACT on CPU
    assert ok(results, theirs)["actor/pg_clipfrac"] > 0  # step 2 clipped some tokens: the clip is compared too


@pytest.mark.parametrize("name", [f"dfpo_{t}" for t in TRANSFORMS] + ["dfpo_no_stop_grad", "dfpo_scale"])
def test_dfpo_updates_the_model_through_verl(verl_run, name):
    results, delta = verl_run
    metrics = ok(results, name)
    spread = rerun_spread(delta, "gspo")
    print(f"{DEVICE}: max|Δ {name}| {delta(name).abs().max():.3g}, max|Δ {name} − Δ gspo| "
          f"{gap(delta, name, 'gspo'):.3g} (gspo's rerun spread {spread:.3g}), "
          f"ortho_residual {metrics['dfpo/ortho_residual']:.3g}")  # fmt: skip
    assert delta(name).abs().max() > 1e-3
    assert gap(delta, name, "gspo") > max(1e-4, SPREAD_MARGIN * spread)  # not GSPO's update, beyond the noise
    # the residual |Σ_g Â s̃| is computed in float64 from the batch's fp32 advantages and s̃ ~ 1 (losses/
    # transforms.py): the model's precision does not enter it, so 1e-6 holds on cuda too
    if name == "dfpo_scale":  # no transform: orthogonality is not restored
        assert metrics["dfpo/ortho_residual"] > 1e-3
    else:
        assert metrics["dfpo/ortho_residual"] < 1e-6


def test_split_groups_are_refused_with_the_fix(verl_run):
    """The error names every setting a whole-group layout needs, as overrides to paste."""
    results, _ = verl_run
    layout = "trainer.v1.trainer_mode=cancelctl +trainer.v1.cancelctl.batching=query_preserved actor_rollout_ref.actor.shuffle=False"
    micro = {"dfpo_split_fixed": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 (rows, a multiple of G=4)",
             "dfpo_split_dynamic": "actor_rollout_ref.actor.ppo_max_token_len_per_gpu >= G=4 x (prompt + response) tokens"}
    for name, micro_fix in micro.items():
        error = results[name].get("error", "")
        assert "a micro-batch split a group" in error, (name, results[name])
        assert layout in error and micro_fix in error, error


def test_v1_padding_rows_do_not_break_the_group_check(verl_run):
    results, delta = verl_run
    ok(results, "dfpo_pad_rows")
    assert delta("dfpo_pad_rows").abs().max() > 1e-3


def test_spec_mechanism_keys_come_out_of_a_real_update(verl_run):
    results, _ = verl_run
    metrics = ok(results, "dfpo_min_replace")
    assert MECHANISM_KEYS <= set(metrics), MECHANISM_KEYS - set(metrics)
    print(DEVICE, {key: metrics[key] for key in sorted(MECHANISM_KEYS)})
    shares = [metrics[f"cancel/energy_b{k}"] for k in range(4)]
    assert sum(shares) == pytest.approx(1.0) and min(shares) >= 0
    assert 0 < metrics["mismatch/rho_std"] < 0.2 and metrics["mismatch/pcc"] > 0.5  # the runner's 0.05 log-prob noise
    assert metrics["dfpo/weight_dispersion"] == 0.0  # min_replace: one weight per live group, exactly (docs/metrics.md#dfpo)
    gspo = ok(results, "cancel_gspo")
    assert gspo["dfpo/weight_dispersion"] > 0  # GSPO: post-clip weights differ within a group at step 2
    assert "cancel/energy_b0" not in gspo  # mechanism_every defaults to 0: off
