"""The lab's mismatch levers: MoE routing, inference precision, simulated logit rounding — and that
with every lever at its default a run logs what it logged before the levers existed, the same
bit for bit each time it runs on one machine."""

import json
from pathlib import Path

import pytest
import torch
from lab_helpers import lab_run, run_lab, without_wall_clock

from cancelctl.backends.lab.policy import MoEFeedForward, PolicyConfig, TinyCausalLM, response_forward, round_mantissa
from cancelctl.backends.lab.rollout import InferenceEngine, generate
from cancelctl.backends.lab.task import VOCAB, ArithmeticTask
from cancelctl.backends.validate import validate_files
from cancelctl.spec.experiment import ExperimentSpec

EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"
GOLDEN = Path(__file__).parent / "data" / "default_run_metrics.json"


# ---------------------------------------------------------------------- rounding


def test_round_mantissa_is_bf16_and_fp16_rounding_at_their_mantissa_widths():
    x = torch.randn(50_000, generator=torch.Generator().manual_seed(0)) * 30
    assert torch.equal(round_mantissa(x, 7), x.to(torch.bfloat16).float())
    assert torch.equal(round_mantissa(x, 10), x.to(torch.float16).float())
    assert torch.equal(round_mantissa(x, 23), x)
    # relative error bound of round-to-nearest at b bits: 2^-(b+1)
    for bits in (2, 5):
        err = ((round_mantissa(x, bits) - x).abs() / x.abs()).max()
        assert 2.0 ** -(bits + 2) < err <= 2.0 ** -(bits + 1)


# ---------------------------------------------------------------------- MoE router


def moe_layer(seed=0, d=8, experts=4, top_k=2) -> MoEFeedForward:
    torch.manual_seed(seed)
    layer = MoEFeedForward(d, experts, top_k)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.5)
    return layer


def test_router_sends_each_token_to_its_top_k_experts_mixed_by_their_router_probabilities():
    layer = moe_layer()
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
    scores = x @ layer.router.weight.T
    chosen, gates = layer.route(x)
    expected = scores.argsort(dim=-1, descending=True)[:, :2]
    assert torch.equal(chosen, expected)
    assert torch.allclose(gates, torch.softmax(scores, dim=-1).gather(-1, expected))
    by_hand = torch.stack(
        [sum(gates[i, j] * layer.experts[int(chosen[i, j])](x[i]) for j in range(2)) for i in range(len(x))]
    )
    assert torch.allclose(layer(x), by_hand, atol=1e-6)
    assert set(chosen.flatten().tolist()) == {0, 1, 2, 3}  # the test exercises every expert


def test_gradients_reach_the_chosen_experts_and_the_router_and_skip_unchosen_experts():
    layer = moe_layer(top_k=1)
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(2))
    chosen, _ = layer.route(x)
    used = set(chosen.flatten().tolist())
    # drop one expert's tokens: that expert must get no gradient
    idle = max(used)
    keep = (chosen[:, 0] != idle).nonzero().squeeze(-1)
    layer(x[keep]).pow(2).sum().backward()
    assert layer.router.weight.grad is not None and layer.router.weight.grad.abs().sum() > 0
    for e, expert in enumerate(layer.experts):
        grad = expert[0].weight.grad
        if e in used and e != idle:
            assert grad is not None and grad.abs().sum() > 0, f"expert {e} routed to but got no gradient"
        else:
            assert grad is None or grad.abs().sum() == 0, f"expert {e} got gradient without tokens"


@pytest.fixture(scope="module")
def moe_policy():
    torch.manual_seed(0)
    task = ArithmeticTask(max_operand=9, seed=0)
    cfg = PolicyConfig(len(VOCAB), task.max_prompt_len + 16, d_model=32, n_layers=1, n_heads=4, moe_experts=4, moe_top_k=2)
    return task, TinyCausalLM(cfg)


def test_a_low_precision_inference_copy_routes_some_tokens_differently(moe_policy):
    _, model = moe_policy
    h = torch.randn(4096, 32, generator=torch.Generator().manual_seed(3))
    trainer_choice, _ = model.blocks[0].mlp.route(h)
    for precision, bits in (("bf16", None), ("fp32", 4)):
        copy_moe = InferenceEngine(model, precision, bits).model.blocks[0].mlp
        copy_choice, _ = copy_moe.route(h.to(next(copy_moe.parameters()).dtype))
        differ = (copy_choice.sort(-1).values != trainer_choice.sort(-1).values).any(-1).float().mean()
        assert 0 < differ < 0.5, (precision, bits, float(differ))  # near-ties flip, most routes agree
    assert model.blocks[0].mlp.round_bits is None  # the trainer's router is never rounded


# ---------------------------------------------------------------------- inference numerics


@pytest.fixture(scope="module")
def dense_policy():
    torch.manual_seed(0)
    task = ArithmeticTask(max_operand=9, seed=0)
    model = TinyCausalLM(PolicyConfig(len(VOCAB), task.max_prompt_len + 16, d_model=32, n_layers=2, n_heads=4))
    with torch.no_grad():  # logits of order 1-10, like a trained policy's, so rounding is visible
        model.lm_head.weight.mul_(100)
    return task, model


def rollout_error(task, model, precision, bits=None):
    """mean |log π_infer − log π_train| over sampled tokens, and the largest |logit|."""
    batch = generate(
        InferenceEngine(model, precision, bits), task, task.train_problems[:8], 4,
        max_new_tokens=16, temperature=1.0, top_p=1.0, generator=torch.Generator().manual_seed(1),
    )  # fmt: skip
    with torch.no_grad():
        train = response_forward(model, batch.ids, batch.valid, batch.prompt_len)
    mask = batch.response_mask.bool()
    err = (train.log_prob - batch.rollout_log_prob)[mask].abs().mean()
    return float(err), float(train.logits[mask].abs().max())


def test_inference_precision_sets_the_size_of_the_log_prob_mismatch(dense_policy):
    task, model = dense_policy
    assert rollout_error(task, model, "fp32")[0] == 0.0
    bf16, _ = rollout_error(task, model, "bf16")
    fp16, _ = rollout_error(task, model, "fp16")
    # 7 vs 10 mantissa bits: fp16's mismatch is several times smaller than bf16's, neither is 0
    assert 0 < fp16 < bf16 / 3
    assert 1e-4 < bf16 < 1e-1


@pytest.mark.parametrize("bits", [3, 6, 10])
def test_logit_rounding_mismatch_is_of_the_order_of_the_rounding_step(dense_policy, bits):
    task, model = dense_policy
    err, max_logit = rollout_error(task, model, "fp32", bits)
    # |Δ log-softmax| ≤ 2 max|Δz| ≤ 2 max|z| 2^-(bits+1); and not far below a typical step
    assert err <= max_logit * 2.0**-bits
    assert err >= max_logit * 2.0**-bits / 200


def test_halving_the_rounding_step_roughly_halves_the_mismatch(dense_policy):
    task, model = dense_policy
    coarse, _ = rollout_error(task, model, "fp32", 4)
    fine, _ = rollout_error(task, model, "fp32", 10)
    assert 2**6 / 8 < coarse / fine < 2**6 * 8  # 6 bits finer: ~64× smaller


# ---------------------------------------------------------------------- defaults and spec


def test_levers_default_off():
    spec = ExperimentSpec.model_validate({"backend": "lab"})
    assert spec.lab.moe is None and spec.rollout.logit_mantissa_bits is None and spec.rollout.precision == "bf16"
    with pytest.raises(ValueError, match="top_k"):
        ExperimentSpec.model_validate({"backend": "lab", "lab": {"moe": {"experts": 2, "top_k": 3}}})


def test_a_default_run_repeats_bit_for_bit_in_one_process(tmp_path, warm_cache):
    """A lab run is a function of its spec and seed: run twice in this process, every metric is
    identical. Training output is never compared with a file
    recorded on another machine: floating-point training is not bit-identical across CPUs and
    library builds (SIMD paths, thread counts)."""
    run = lab_run({"budget": {"steps": 3}})
    _, first = run_lab(run, tmp_path / "first", warm_cache)
    _, second = run_lab(run, tmp_path / "second", warm_cache)
    steps = {step: without_wall_clock(m) for step, m in first.steps().items()}
    assert steps == {step: without_wall_clock(m) for step, m in second.steps().items()}
    assert any(m["actor/grad_norm"] > 0 for step, m in steps.items() if step > 0)  # it trained


def test_a_default_run_logs_every_metric_the_run_before_the_levers_logged(tmp_path, warm_cache):
    """GOLDEN holds this run's metrics as logged by the code before the levers (f1015a3, plus
    dfpo/weight_dispersion, cancel/boost_template and the eval's pass@k since): with every lever at
    its default the run logs the same keys at the same steps. Its values are this file's machine's
    and are not compared."""
    golden = json.loads(GOLDEN.read_text())
    _, logger = run_lab(lab_run(golden["patch"]), tmp_path / "run", warm_cache)
    got = {str(step): sorted(without_wall_clock(m)) for step, m in logger.steps().items()}
    assert got == {step: sorted(m) for step, m in golden["metrics"].items()}


def test_a_moe_run_with_rounded_logits_trains_and_logs_a_nonzero_mismatch(tmp_path, warm_cache):
    patch = {
        "rollout": {"precision": "fp32", "logit_mantissa_bits": 4},
        "lab": {"moe": {"experts": 4, "top_k": 2}, "warmstart_steps": 50},
        "budget": {"steps": 2},
    }
    _, logger = run_lab(lab_run(patch), tmp_path / "moe", warm_cache)
    steps = [m for step, m in logger.steps().items() if step > 0]
    assert all(m["mismatch/rho_std"] > 0 for m in steps)
    assert any(m["actor/grad_norm"] > 0 for m in steps)  # a step whose groups all tie has no gradient


# ---------------------------------------------------------------------- the lab claims sweeps


LAB_CLAIMS = sorted(EXPERIMENTS.glob("lab-claims-*.yaml"))


def test_the_lab_claims_sweeps_exist_and_validate():
    assert {p.name for p in LAB_CLAIMS} >= {"lab-claims-dfpo.yaml", "lab-claims-mismatch.yaml", "lab-claims-batching.yaml"}
    report = validate_files(LAB_CLAIMS, compose_verl=False)
    assert report.ok, [(f.path.name, f.title, f.lines) for f in report.files if not f.ok]
    for item in report.files:
        assert not item.note, (item.path.name, item.note)  # compute-matched


@pytest.mark.parametrize("path", LAB_CLAIMS, ids=lambda p: p.name)
def test_a_lab_claims_sweep_runs_on_the_local_lab_with_at_least_three_seeds(path):
    from cancelctl.spec.expand import load_sweep

    sweep = load_sweep(path)
    assert {r.spec.backend for r in sweep.runs} == {"lab"}
    assert {r.spec.executor for r in sweep.runs} == {"local"}
    assert len({r.seed for r in sweep.runs}) >= 3
