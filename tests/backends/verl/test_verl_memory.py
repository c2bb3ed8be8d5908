"""GPU memory before the queue: each formula of `backends.verl.memory` against a hand computation, and
`validate` / `plan` on sweeps over the real published shapes of Qwen2.5-7B and Qwen2.5-0.5B (config.json
files the tests write: nothing is downloaded)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cancelctl.backends.verl.memory import (
    GIB,
    RolloutSetup,
    TrainingSetup,
    engine_activations,
    estimate,
    gathered_weights,
    kv_cache_per_token,
    layer_activations_per_token,
    logits_bytes,
    megatron_shard,
    model_states,
    optimizer_step_transient,
    reference_weights,
    resident_between_updates,
    stored_activations,
)
from cancelctl.backends.verl.model_shape import ModelShape
from cancelctl.cli import app

runner = CliRunner()

# Hugging Face's config.json of Qwen/Qwen2.5-7B and Qwen/Qwen2.5-0.5B (the fields a shape reads)
QWEN25_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "hidden_size": 3584,
             "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
             "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
             "vocab_size": 152064}
QWEN25_05B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "hidden_size": 896,
              "intermediate_size": 4864, "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
              "max_position_embeddings": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
              "vocab_size": 151936}
Q7, Q05 = ModelShape.from_config(QWEN25_7B), ModelShape.from_config(QWEN25_05B)


# ---------------------------------------------------------------- the formulas, by hand


def test_parameter_counts_are_the_published_ones():
    # Qwen2.5-7B: 28 layers of q (3584² + bias), k and v (3584·512 + bias), o (3584²), a SwiGLU MLP
    # (3·3584·18944) and 2 norms; untied embedding and lm_head (152064·3584 each); the final norm
    layer = (3584 * 3584 + 3584) + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944 + 2 * 3584
    assert Q7.layer_params == layer
    assert Q7.params == 28 * layer + 2 * 152064 * 3584 + 3584 == 7_615_616_512
    assert Q05.params == 494_032_768  # tied: one 151936 x 896 matrix


def test_config_json_variants():
    moe = ModelShape.from_config({"model_type": "qwen3_moe", "hidden_size": 8, "num_hidden_layers": 2,
                                  "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
                                  "intermediate_size": 64, "moe_intermediate_size": 6, "num_experts": 4,
                                  "num_experts_per_tok": 2, "vocab_size": 10})
    # q 8·8, k and v 8·4 each, o 8·8; 4 experts of 3·8·6 and a router 8·4; 2 norms
    assert moe.layer_params == 64 + 2 * 32 + 64 + 4 * 3 * 8 * 6 + 8 * 4 + 2 * 8
    assert (moe.active_intermediate, moe.qkv_bias, moe.tied_embeddings) == (2 * 6, False, False)
    nested = ModelShape.from_config({"model_type": "qwen2_5_vl", "text_config": QWEN25_05B})
    assert nested.params == Q05.params
    gpt2 = ModelShape.from_config({"model_type": "gpt2", "n_embd": 8, "n_layer": 1, "n_head": 2, "vocab_size": 10})
    assert (gpt2.gated_mlp, gpt2.intermediate, gpt2.kv_heads) == (False, 32, 2)
    with pytest.raises(ValueError, match="num_hidden_layers"):
        ModelShape.from_config({"hidden_size": 8, "num_attention_heads": 2, "vocab_size": 10})


def setup(**kw) -> TrainingSetup:
    return TrainingSetup(**{"strategy": "fsdp", "gpus": 8, "micro_batch_tokens": 1000, "log_prob_tokens": 1000, **kw})


def test_model_states_are_16_bytes_a_parameter_sharded_zero3_and_megatrons_6_plus_12_over_dp():
    P = Q7.params
    assert model_states(Q7, setup()) == {"weights": 4 * P / 8, "gradients": 4 * P / 8, "optimizer": 8 * P / 8}
    assert model_states(Q7, setup(optimizer="sgd"))["optimizer"] == 0
    assert sum(model_states(Q7, setup(strategy="fsdp2", cpu_offload_policy=True)).values()) == 0
    # verl's param/optimizer offload brings them back for the update, but not while the rollout runs
    assert model_states(Q7, setup(offload_params=True, offload_optimizer=True)) == model_states(Q7, setup())
    assert resident_between_updates(Q7, setup()) == 12 * P / 8
    assert resident_between_updates(Q7, setup(offload_params=True)) == 8 * P / 8
    assert resident_between_updates(Q7, setup(offload_params=True, offload_optimizer=True)) == 0
    # megatron TP 2 x PP 2 on 8 GPUs: data parallel 2
    megatron = setup(strategy="megatron", tensor_parallel=2, pipeline_parallel=2)
    assert megatron.data_parallel == 2
    assert model_states(Q7, megatron) == {"weights": 2 * P / 4, "gradients": 4 * P / 4, "optimizer": 12 * P / 4 / 2}
    assert resident_between_updates(Q7, megatron) == (2 + 4 + 6) * P / 4


def test_a_kl_reference_stays_on_megatrons_gpus_and_experts_split_over_expert_ranks():
    kl = setup(strategy="megatron", tensor_parallel=2, reference=True, reference_offload=False)
    assert reference_weights(Q7, kl) == 2 * Q7.params / 2
    assert resident_between_updates(Q7, kl) == (2 + 4 + 12 / 4) * Q7.params / 2 + 2 * Q7.params / 2
    assert reference_weights(Q7, setup(reference=True, reference_offload=False)) == 0  # FSDP: on the CPU
    moe = ModelShape(hidden=8, layers=2, heads=2, kv_heads=1, head_dim=4, intermediate=6, vocab=10, experts=4,
                     experts_per_token=2)
    assert moe.expert_params == 2 * 3 * 8 * 6 * 4
    ep2 = setup(strategy="megatron", tensor_parallel=2, expert_parallel=2)
    assert megatron_shard(moe, ep2) == (moe.params - moe.expert_params / 2) / 2


def test_fsdp_gathers_a_unit_and_the_next_and_keeps_a_tied_root():
    # 7B untied: the largest unit is the embedding (152064·3584 > a layer); bf16 copies of it and the
    # next, and its unsharded gradient (bf16, then fp32 to reduce)
    unit = 152064 * 3584
    assert gathered_weights(Q7, setup()) == 2 * 2 * unit + (2 + 4) * unit
    # 0.5B tied: embed_tokens = lm_head sits in the root, gathered (and its gradient) through the pass
    layer, root = Q05.layer_params, 151936 * 896
    assert gathered_weights(Q05, setup()) == 2 * (2 * layer + root) + 6 * layer + 2 * root
    assert gathered_weights(Q05, setup(), backward=False) == 2 * (layer + root)  # a forward-only pass
    assert gathered_weights(Q7, setup(strategy="megatron")) == 0


def test_layer_activations_per_token_by_hand():
    shape = ModelShape(hidden=8, layers=3, heads=2, kv_heads=1, head_dim=4, intermediate=16, vocab=10)
    # bf16: 2 norms (fp32 input 4·8 + 2 bf16 outputs 2·2·8), q k v out (2·(8 + 4 + 4 + 8)), SwiGLU 2·4·16
    assert layer_activations_per_token(shape, setup()) == 2 * (32 + 32) + 2 * 24 + 2 * 64 == 304
    assert layer_activations_per_token(shape, setup(attention="sdpa")) == 304 + 2 * 8  # o_proj's copy
    assert layer_activations_per_token(shape, setup(compute_bytes=4)) == 2 * 3 * 32 + 4 * 24 + 4 * 64  # fp32: 3 h each
    # stored: every layer, or with checkpointing each layer's input (c·h), per token, over tensor ranks
    assert stored_activations(shape, setup(gradient_checkpointing=False), 100) == 100 * 3 * 304
    assert stored_activations(shape, setup(gradient_checkpointing=True), 100) == 100 * 3 * 2 * 8
    tp2 = setup(strategy="megatron", tensor_parallel=2, gradient_checkpointing=False)
    assert stored_activations(shape, tp2, 100) == 100 * 3 * 304 / 2


def test_logits_by_hand():
    T, V = 1000, Q05.vocab
    assert logits_bytes(Q05, setup(), T, backward=True, entropy=False) == T * V * 2  # flash-attn CE, in place
    assert logits_bytes(Q05, setup(), T, backward=True, entropy=True) == T * V * 2 * 4
    cpu = setup(compute_bytes=4, flash_cross_entropy=False)
    assert logits_bytes(Q05, cpu, T, backward=True, entropy=False) == T * V * (4 + 8)  # logits + 2 fp32 gradients
    assert logits_bytes(Q05, setup(), T, backward=False, entropy=True) == T * V * (2 + 4)  # compiled: an fp32 buffer
    assert logits_bytes(Q05, setup(compiled_entropy=False), T, backward=False, entropy=True) == T * V * 2 * 3
    # megatron, vocab-parallel over 4 ranks: the bf16 logits and megatron-core's fp32 copy (its softmax, then
    # the gradient in place); with the entropy, the clone verl keeps for the log-probs and (in a backward)
    # the entropy's saved softmax and gradient
    tp4 = setup(strategy="megatron", tensor_parallel=4)
    assert logits_bytes(Q05, tp4, T, backward=True, entropy=False) == T * V * (2 + 4) / 4
    assert logits_bytes(Q05, tp4, T, backward=False, entropy=False) == T * V * (2 + 4) / 4
    assert logits_bytes(Q05, tp4, T, backward=False, entropy=True) == T * V * (2 + 2 + 4) / 4  # θ_old's pass
    assert logits_bytes(Q05, tp4, T, backward=True, entropy=True) == T * V * (4 * 2 + 4) / 4
    # use_fused_kernels: no logits, a chunk's (FSDP: 512 tokens in fp32) or the Triton kernel's splits
    fused = setup(fused_kernels=True)
    assert logits_bytes(Q05, fused, T, backward=True, entropy=True) == 512 * V * 4 * 3
    assert logits_bytes(Q05, fused, T, backward=False, entropy=True) == 512 * V * 4 * 2
    splits = -(-V / 4 // 1024)
    assert logits_bytes(Q05, setup(strategy="megatron", tensor_parallel=4, fused_kernels=True), T, backward=True,
                        entropy=False) == T * (3 * 4 * splits + 2 * 1024)


def test_optimizer_step_kv_cache_and_rollout_by_hand():
    assert optimizer_step_transient(Q7, setup()) == 4 * Q7.params / 8  # foreach sqrt(v)
    assert optimizer_step_transient(Q7, setup(optimizer="sgd")) == 0
    # vLLM: 2 (K, V) · 28 layers · 4 kv heads · 128 · bf16, kv heads split over tensor ranks (1 at least)
    assert kv_cache_per_token(Q7, 1) == 2 * 28 * 4 * 128 * 2 == 57344
    assert kv_cache_per_token(Q7, 2) == 57344 / 2
    assert kv_cache_per_token(Q7, 8) == 57344 / 4
    r = RolloutSetup(tensor_parallel=1, gpu_memory_utilization=0.5, sequence_tokens=3000, sequences=300)
    assert engine_activations(Q05, r) == 8192 * 2 * (2 * 896 + 3 * 4864) + 256 * 151936 * 8
    e = estimate(Q05, setup(gpus=1), r, 40 * GIB)
    parts = dict(e.rollout.parts)
    assert parts["engine weights"] == 2 * Q05.params
    assert parts["KV cache"] == 20 * GIB - 2 * Q05.params - engine_activations(Q05, r)
    assert parts["engine weights"] + parts["engine activations"] + parts["KV cache"] == 20 * GIB  # the share
    assert parts["actor states kept"] == 12 * Q05.params
    assert e.kv_cache.sequences == 256  # at most max_num_seqs at once
    assert e.kv_cache.holds == int(parts["KV cache"] // (3000 * kv_cache_per_token(Q05, 1)))
    assert e.summary() == f"train {e.train.total / GIB:.1f} GiB, rollout {e.rollout.total / GIB:.1f} GiB of 40"


# ---------------------------------------------------------------- validate and plan


def write_sweep(here: Path, name: str, config: dict | None, *, gpus: int, gpu_gb: float, micro: int = 2,
                checkpointing: bool = True, nodes: int = 1, utilization: float = 0.6) -> Path:
    model = here / f"{name}-model"
    if config is not None:
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps(config))
    spec = {"name": name, "seeds": [0], "arms": {"gspo": {}}, "base": {
        "backend": "verl",
        "model": {"path": str(model), "strategy": "fsdp", "gradient_checkpointing": checkpointing},
        "data": {"train_files": ["data/train.parquet"], "max_prompt_length": 1024, "max_response_length": 2048},
        "algorithm": {"loss": "gspo", "mini_batch_size": 16, "micro_batch_size_per_gpu": micro},
        "rollout": {"G": 8, "gpu_memory_utilization": utilization},
        "budget": {"steps": 10, "prompts_per_step": 64},
        "cluster": {"nodes": nodes, "gpus_per_node": gpus, "gpu_memory_gb": gpu_gb}}}
    path = here / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def validate(path: Path):
    return runner.invoke(app, ["validate", "--skip-verl", "--skip-data", str(path)], env={"COLUMNS": "400"})


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_7b_full_fine_tune_on_one_24gb_gpu_is_refused_naming_memory(tmp_path):
    sweep = write_sweep(tmp_path, "q7-24", QWEN25_7B, gpus=1, gpu_gb=24)
    result = validate(sweep)
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert "configurations that do not fit the GPU's memory" in out
    assert f"q7-24.yaml:{line_of(sweep, 'path:')}:" in out and "GPU memory:" in out and "(7.62B parameters)" in out
    assert "of 24 GiB (cluster.gpu_memory_gb)" in out
    # the breakdown: 16 bytes a parameter on one GPU, and the levers (each with the estimate it gives)
    assert "actor optimizer 56.7 + actor weights 28.4 + actor gradients 28.4" in out
    assert "would fit:" in out and "offload_policy: true" in out and "none found" not in out
    assert "Traceback" not in result.output


def test_the_same_7b_on_8x80gb_validates_and_plan_shows_the_estimate(tmp_path):
    sweep = write_sweep(tmp_path, "q7-8x80", QWEN25_7B, gpus=8, gpu_gb=80)
    result = validate(sweep)
    assert result.exit_code == 0, result.output
    assert "GPU memory" not in result.output  # neither refused nor warned nor skipped
    table = runner.invoke(app, ["plan", str(sweep)], env={"COLUMNS": "300"}).output
    assert "GPU memory (GiB per GPU)" in table
    shown = json.loads(runner.invoke(app, ["plan", "--json", str(sweep)]).output)
    memory = shown["runs"][0]["gpu_memory"]
    assert shown["gpu_memory_skipped"] is None and memory["fits"] and memory["params"] == 7_615_616_512
    train, rollout = memory["train"]["gib"], memory["rollout"]["gib"]
    assert f"train {train:.1f} GiB, rollout {rollout:.1f} GiB of 80" in table
    # 16 bytes a parameter over 8 GPUs; the rollout: vLLM's 0.6 of 80 and the actor's weights and AdamW
    assert memory["train"]["parts_gib"]["actor optimizer"] == pytest.approx(8 * 7_615_616_512 / 8 / GIB, abs=1e-3)
    assert rollout == pytest.approx(0.6 * 80 + 12 * 7_615_616_512 / 8 / GIB + 1.0, abs=0.01)


def test_a_05b_model_on_one_40gb_gpu_validates_with_micro_batch_1_and_checkpointing(tmp_path):
    sweep = write_sweep(tmp_path, "q05-40", QWEN25_05B, gpus=1, gpu_gb=40, micro=1, checkpointing=True)
    result = validate(sweep)
    assert result.exit_code == 0, result.output
    assert "GPU memory" not in result.output
    memory = json.loads(runner.invoke(app, ["plan", "--json", str(sweep)]).output)["runs"][0]["gpu_memory"]
    assert memory["peak_gib"] < 0.9 * 40


def test_within_10_percent_of_the_gpu_is_a_warning_over_it_a_refusal_at_the_rollouts_field(tmp_path):
    sweep = write_sweep(tmp_path, "q05-tight", QWEN25_05B, gpus=1, gpu_gb=40, micro=1)
    rollout = json.loads(runner.invoke(app, ["plan", "--json", str(sweep)]).output)["runs"][0]["gpu_memory"]["rollout"]
    beside = rollout["parts_gib"]["actor states kept"] + rollout["parts_gib"]["runtime"]
    # the engine's share (utilization x 40) plus what stays beside it at 95% of the GPU
    sweep = write_sweep(tmp_path, "q05-tight", QWEN25_05B, gpus=1, gpu_gb=40, micro=1,
                        utilization=round((0.95 * 40 - beside) / 40, 3))
    result = validate(sweep)
    assert result.exit_code == 0, result.output
    assert "warning: GPU memory:" in result.output and "within 10% of the GPU" in " ".join(result.output.split())
    sweep = write_sweep(tmp_path, "q05-tight", QWEN25_05B, gpus=1, gpu_gb=40, micro=1, utilization=0.95)
    result = validate(sweep)
    out = " ".join(result.output.split())
    assert result.exit_code == 2 and f"q05-tight.yaml:{line_of(sweep, 'gpu_memory_utilization')}:" in out
    # the lever lands below the warning band, not inside it: 0.73 x 40 + what stays beside it <= 36 GiB
    assert "would fit: rollout.gpu_memory_utilization: 0.73: train 10.2 GiB, rollout 35.7 GiB of 40" in out


def test_without_the_config_json_the_check_is_skipped_said_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    sweep = write_sweep(tmp_path, "no-config", None, gpus=1, gpu_gb=24)
    text = sweep.read_text().replace(str(tmp_path / "no-config-model"), "org/not-cached")
    sweep.write_text(text)
    result = validate(sweep)
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert out.count("GPU memory not estimated: model.path 'org/not-cached' is neither a folder here nor in the "
                     "Hugging Face cache") == 1
    plan = json.loads(runner.invoke(app, ["plan", "--json", str(sweep)]).output)
    assert plan["runs"][0]["gpu_memory"] is None and "not estimated" in plan["gpu_memory_skipped"]


def test_gpu_memory_gb_must_be_positive(tmp_path):
    sweep = write_sweep(tmp_path, "zero", QWEN25_05B, gpus=1, gpu_gb=0)
    result = validate(sweep)
    assert result.exit_code == 2
    assert f"zero.yaml:{line_of(sweep, 'gpu_memory_gb: 0')}:" in result.output and "greater than 0" in result.output


# ---------------------------------------------------------------- Megatron: what verl 0.9.1 reads


def megatron_sweep(here: Path, name: str, config: dict, *, template: str | None = None, checkpointing: bool = True,
                   **extra) -> Path:
    path = write_sweep(here, name, config, gpus=8, gpu_gb=80, checkpointing=checkpointing, nodes=4)
    spec = yaml.safe_load(path.read_text())
    spec["base"]["model"].update({"strategy": "megatron", "tensor_parallel": 4, "rollout_tensor_parallel": 4,
                                  **({"template": template} if template else {})})
    for section, values in extra.items():
        spec["base"].setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def training_setup(path: Path) -> TrainingSetup:
    from cancelctl.backends.verl.memory_check import setups
    from cancelctl.spec.expand import load_sweep

    return setups(load_sweep(path).runs[0])[0]


def test_megatron_recomputes_only_by_its_template_and_log_prob_passes_leave_offloaded_states_off(tmp_path):
    # verl 0.9.1 reads model.enable_gradient_checkpointing in its FSDP engine only: Megatron recomputes
    # by override_transformer_config.recompute_granularity (the megatron-large template)
    plain = training_setup(megatron_sweep(tmp_path, "plain", QWEN25_7B, checkpointing=True))
    large = training_setup(megatron_sweep(tmp_path, "large", QWEN25_7B, template="megatron-large", checkpointing=False))
    assert (plain.gradient_checkpointing, plain.offload_params, plain.offload_optimizer) == (False, False, False)
    assert (large.gradient_checkpointing, large.offload_params, large.offload_optimizer) == (True, True, True)
    # θ_old's log-prob pass (verl's eval mode) brings back the weights alone; without offload all states stay
    from cancelctl.backends.verl.memory import update_phases

    kept = lambda s: {k for k, _ in update_phases(Q7, s)["log-prob"].parts if k.startswith("actor")}  # noqa: E731
    assert kept(plain) == {"actor weights", "actor gradients", "actor optimizer"}
    assert kept(large) == {"actor weights"}
    assert kept(replace(plain, offload_optimizer=True)) == {"actor weights", "actor gradients"}
    fsdp = setup(offload_params=True)
    assert kept(fsdp) == {"actor weights", "actor optimizer"}  # FSDP frees its gradients after the update


# ---------------------------------------------------------------- the shipped experiments, on their models' shapes

# Hugging Face's config.json of each model experiments/*.yaml trains (the fields a shape reads)
QWEN3_30B_A3B = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_act": "silu",
                 "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
                 "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
                 "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48,
                 "attention_bias": False, "max_position_embeddings": 40960, "tie_word_embeddings": False,
                 "torch_dtype": "bfloat16", "vocab_size": 151936}
QWEN3_32B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu", "hidden_size": 5120,
             "intermediate_size": 25600, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
             "num_hidden_layers": 64, "attention_bias": False, "max_position_embeddings": 40960,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 151936}
QWEN3_4B_BASE = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu", "hidden_size": 2560,
                 "intermediate_size": 9728, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "num_hidden_layers": 36, "attention_bias": False, "max_position_embeddings": 32768,
                 "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 151936}
PUBLISHED = {"Qwen/Qwen3-30B-A3B": QWEN3_30B_A3B, "Qwen/Qwen3-32B": QWEN3_32B, "Qwen/Qwen3-4B-Base": QWEN3_4B_BASE,
             "Qwen/Qwen2.5-0.5B-Instruct": QWEN25_05B}
EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"
GPU_EXPERIMENTS = ["batching", "clip-strength", "delta-injection", "dfpo-vs-gspo", "first-verl", "group-size",
                   "variance-noise"]
# What still refuses them, with verl 0.9.1's reasons (the estimate is not the error): none now
NOT_YET: dict[str, str] = {}


def hub_cache(here: Path, configs: dict[str, dict]) -> Path:
    """A Hugging Face cache holding each repo's config.json at refs/main, as `hf download` leaves it."""
    cache = here / "hub"
    for repo, config in configs.items():
        folder = cache / f"models--{repo.replace('/', '--')}"
        snapshot = folder / "snapshots" / ("0" * 40)
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text(json.dumps(config))
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text("0" * 40)
    return cache


@pytest.fixture
def published(tmp_path, monkeypatch):
    cache = hub_cache(tmp_path, PUBLISHED)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def test_the_published_shapes_have_the_model_cards_parameter_counts():
    counts = {repo: ModelShape.from_config(config).params / 1e9 for repo, config in PUBLISHED.items()}
    assert counts == pytest.approx({"Qwen/Qwen3-30B-A3B": 30.5, "Qwen/Qwen3-32B": 32.8, "Qwen/Qwen3-4B-Base": 4.0,
                                    "Qwen/Qwen2.5-0.5B-Instruct": 0.49}, abs=0.05)
    moe = ModelShape.from_config(QWEN3_30B_A3B)
    assert (moe.q_width, moe.active_intermediate) == (4096, 8 * 768)  # 32 heads x 128 is twice the hidden size


def test_every_shipped_gpu_experiment_is_one_of_these():
    from cancelctl.spec.expand import load_sweep

    gpu = sorted(p.stem for p in EXPERIMENTS.glob("*.yaml")
                 if any(r.spec.backend == "verl" and r.spec.cluster.device != "cpu" for r in load_sweep(p).runs))
    assert gpu == GPU_EXPERIMENTS
    models = {run.spec.model.path for name in gpu for run in load_sweep(EXPERIMENTS / f"{name}.yaml").runs}
    assert models <= set(PUBLISHED)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=NOT_YET[n])) if n in NOT_YET else n
    for n in GPU_EXPERIMENTS])
def test_every_shipped_gpu_experiment_validates_on_its_models_published_shape(name, published):
    result = validate(EXPERIMENTS / f"{name}.yaml")
    assert "GPU memory not estimated" not in result.output  # estimated, from the cache written above
    assert result.exit_code == 0, result.output


def test_a_30b_moe_colocated_without_offload_is_still_refused_at_the_rollout(tmp_path, published):
    # clip-strength as it shipped: the "megatron" template keeps the actor's bf16 weights, fp32 gradient
    # buffer and Adam shard on the GPU while vLLM takes its 0.6 (verl offloads only with param_offload /
    # optimizer_offload: engine_workers.py update_weights, engine/base.py BaseEngineCtx)
    text = (EXPERIMENTS / "clip-strength.yaml").read_text()
    assert "template: megatron-large" in text
    sweep = tmp_path / "clip-no-offload.yaml"
    sweep.write_text(text.replace("    template: megatron-large", "    template: megatron  #"))
    result = validate(sweep)
    out = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "rollout 102.3 GiB = actor states kept 53.3 + KV cache 33.4 + engine weights 14.2" in out
    # only the rollout overflows and the file does not write rollout.gpu_memory_utilization: the refusal
    # points at model.path, not at the arm's line
    assert f"clip-no-offload.yaml:{line_of(sweep, 'path: Qwen/Qwen3-30B-A3B')}:" in out
    assert_levers_below_the_warning_band(out)


def test_dfpo_vs_gspo_without_context_parallel_is_still_refused_and_the_levers_name_it(tmp_path, published):
    # DFPO's whole groups in each update micro-batch (losses/verl_adapter.py): 32 x (2048 + 30720) = 1M
    # tokens a data-parallel rank. As it shipped (TP 4, the megatron template, 4 nodes) each GPU keeps every
    # layer's activations of 1M / TP 4 tokens: terabytes
    text = (EXPERIMENTS / "dfpo-vs-gspo.yaml").read_text()
    for old, new in [("    template: megatron-large\n", ""), ("    tensor_parallel: 8", "    tensor_parallel: 4"),
                     ("    context_parallel: 8\n", ""), ("    nodes: 8 ", "    nodes: 4 ")]:
        assert old in text
        text = text.replace(old, new)
    shipped = tmp_path / "dfpo-shipped.yaml"
    shipped.write_text(text)
    result = validate(shipped)
    out = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "train 5336.8 GiB" in out
    assert ("would fit: model.template: megatron-large (full activation recompute; param and optimizer offload while "
            "the rollout runs) + model.tensor_parallel: 8 + model.context_parallel: 8 + cluster.nodes: 8 (64 GPUs): "
            "train 53.5 GiB, rollout 49.0 GiB of 80") in out
    # TP 8 x CP 4 on the 4 nodes: 262k tokens a GPU, 83 GiB; context parallel 8 needs 8 nodes
    tight = tmp_path / "dfpo-cp4.yaml"
    tight.write_text((EXPERIMENTS / "dfpo-vs-gspo.yaml").read_text().replace("    context_parallel: 8", "    context_parallel: 4")
                     .replace("    nodes: 8 ", "    nodes: 4 "))
    result = validate(tight)
    out = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert ("train (update) 83.1 GiB = logits 27.8 + activations 20.0 + actor gradients 15.3 + actor optimizer 11.4 "
            "+ actor weights 7.6 + runtime 1.0") in out
    assert "would fit: model.context_parallel: 8 + cluster.nodes: 8 (64 GPUs): train 53.5 GiB" in out
    assert_levers_below_the_warning_band(out)


def test_context_parallel_divides_a_gpus_tokens_and_megatrons_optimizer_shards_over_dp_x_cp():
    # each GPU runs every layer and the output layer on 1/CP of each sequence's tokens (verl
    # preprocess_thd_engine); megatron-core's distributed optimizer shards over data x context ranks
    from cancelctl.backends.verl.memory import update_phases

    base = setup(strategy="megatron", gpus=32, tensor_parallel=8, micro_batch_tokens=2**20, log_prob_tokens=2**16,
                 gradient_checkpointing=True)
    cp4 = replace(base, sequence_parallel=4)
    assert (base.data_parallel, cp4.data_parallel, cp4.optimizer_shards) == (4, 1, 4)
    assert model_states(Q7, cp4) == model_states(Q7, base)  # weights and gradients per TP shard; Adam over 4 either way
    parts = lambda s: dict(update_phases(Q7, s)["update"].parts)  # noqa: E731
    assert parts(cp4)["activations"] == pytest.approx(parts(base)["activations"] / 4)
    assert parts(cp4)["logits"] == pytest.approx(parts(base)["logits"] / 4)
    assert parts(cp4)["activations"] == stored_activations(Q7, base, 2**20 / 4)
    assert dict(update_phases(Q7, cp4)["log-prob"].parts)["logits"] == pytest.approx(
        logits_bytes(Q7, base, 2**16 / 4, backward=False, entropy=True))


def test_context_parallel_renders_for_megatron_and_is_refused_elsewhere(tmp_path):
    from cancelctl.backends.verl.errors import VerlRenderError
    from cancelctl.backends.verl.layout import data_parallel_size
    from cancelctl.backends.verl.render import _template, render_override_set
    from cancelctl.spec.expand import load_sweep

    def run_of(path):
        return load_sweep(path).runs[0]

    plain = run_of(megatron_sweep(tmp_path, "plain", QWEN25_7B))
    cp = run_of(megatron_sweep(tmp_path, "cp", QWEN25_7B, model={"context_parallel": 2}))
    key = "actor_rollout_ref.actor.megatron.context_parallel_size"
    assert key not in render_override_set(plain).settings  # at 1 nothing is written: a template's own stands
    assert render_override_set(cp).settings[key].value == 2
    assert data_parallel_size(cp, _template(cp)) == 32 // (4 * 2)
    # the default is not dumped: runs that existed before the field keep their ids
    assert "context_parallel" not in plain.spec.model.model_dump() and plain.run_id != cp.run_id
    too_many = run_of(megatron_sweep(tmp_path, "too-many", QWEN25_7B, model={"context_parallel": 16}))
    with pytest.raises(VerlRenderError, match=r"TP x PP x CP = 4 x 1 x 16 = 64 does not divide the 32 GPUs") as err:
        render_override_set(too_many)
    assert err.value.path == "model.context_parallel"
    fsdp = write_sweep(tmp_path, "fsdp-cp", QWEN25_05B, gpus=2, gpu_gb=80)
    spec = yaml.safe_load(fsdp.read_text())
    spec["base"]["model"]["context_parallel"] = 2
    fsdp.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(VerlRenderError, match="context parallel applies to strategy megatron"):
        render_override_set(run_of(fsdp))


def assert_levers_below_the_warning_band(out: str) -> None:
    import re

    levers = out.split("would fit: ", 1)[1].split(" [arm")[0]
    assert "none found" not in levers
    found = re.findall(r"train ([\d.]+) GiB, rollout ([\d.]+) GiB of ([\d.]+)", levers)
    assert found, levers
    for train, rollout, gpu in found:
        assert max(float(train), float(rollout)) <= 0.9 * float(gpu), levers


@pytest.mark.parametrize("case", ["24gb-7b", "tight-rollout", "engine-short", "megatron-moe"])
def test_every_suggested_lever_lands_below_the_warning_band_and_validates_clean(tmp_path, published, case):
    if case == "24gb-7b":
        sweep = write_sweep(tmp_path, case, QWEN25_7B, gpus=1, gpu_gb=24)
    elif case == "tight-rollout":
        sweep = write_sweep(tmp_path, case, QWEN25_05B, gpus=1, gpu_gb=40, micro=1, utilization=0.95)
    elif case == "engine-short":
        sweep = write_sweep(tmp_path, case, QWEN25_7B, gpus=8, gpu_gb=80, utilization=0.18)  # no KV cache left
    else:
        sweep = megatron_sweep(tmp_path, case, QWEN3_30B_A3B)
    result = validate(sweep)
    out = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert_levers_below_the_warning_band(out)
    # the rollout's share the levers name, written into the file: neither refused nor warned
    import re

    if (share := re.search(r"would fit: rollout\.gpu_memory_utilization: ([\d.]+):", out)) is not None:
        spec = yaml.safe_load(sweep.read_text())
        spec["base"]["rollout"]["gpu_memory_utilization"] = float(share.group(1))
        sweep.write_text(yaml.safe_dump(spec, sort_keys=False))
        again = validate(sweep)
        assert again.exit_code == 0 and "GPU memory" not in again.output, again.output


# ---------------------------------------------------------------- a config.json that is not a model's shape


BAD_CONFIGS = {
    "a JSON list": ([QWEN25_05B], "is a JSON list, not an object of the model's settings"),
    "numbers as strings": ({**QWEN25_05B, "hidden_size": "896"}, 'hidden_size is string "896", not a whole number'),
    "a word for a number": ({**QWEN25_05B, "num_hidden_layers": "many"},
                            'num_hidden_layers is string "many", not a whole number'),
    "negative layers": ({**QWEN25_05B, "num_hidden_layers": -6}, "num_hidden_layers is -6: a count of at least 1"),
    "zero heads": ({**QWEN25_05B, "num_attention_heads": 0}, "num_attention_heads is 0: a count of at least 1"),
    "a fraction": ({**QWEN25_05B, "intermediate_size": 4864.5}, "intermediate_size is number 4864.5, not a whole number"),
    "a boolean count": ({**QWEN25_05B, "vocab_size": True}, "vocab_size is boolean true, not a whole number"),
    "a string flag": ({**QWEN25_05B, "tie_word_embeddings": "false"},
                      'tie_word_embeddings is string "false", not true or false'),
    "a list text_config": ({"model_type": "qwen2_5_vl", "text_config": [1]}, "text_config is a JSON list, not an object"),
    "more experts per token than experts": ({**QWEN3_30B_A3B, "num_experts_per_tok": 200},
                                            "routes each token to 200 experts (num_experts_per_tok) of 128"),
    "not JSON": ("{hidden_size: 896", "is not JSON (Expecting property name enclosed in double quotes, line 1)"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_a_config_json_that_is_not_a_shape_is_skipped_with_one_line_naming_the_file(tmp_path, case):
    config, reason = BAD_CONFIGS[case]
    bad = write_sweep(tmp_path, "bad", {}, gpus=1, gpu_gb=24)
    file = tmp_path / "bad-model" / "config.json"
    file.write_text(config if isinstance(config, str) else json.dumps(config))
    # another file of the same call, whose model does not fit: still checked and refused
    other = write_sweep(tmp_path, "q7-24", QWEN25_7B, gpus=1, gpu_gb=24)
    result = runner.invoke(app, ["validate", "--skip-verl", "--skip-data", str(bad), str(other)], env={"COLUMNS": "400"})
    out = " ".join(result.output.split())
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    assert f"GPU memory not estimated: model.path '{tmp_path / 'bad-model'}': {file} {reason}" in out
    assert out.count("GPU memory not estimated") == 1
    assert result.exit_code == 2 and "q7-24.yaml" in out and "(7.62B parameters)" in out
    assert "ok   " + str(bad) in result.output  # skipped, not refused
    plan = runner.invoke(app, ["plan", "--json", str(bad)])
    assert plan.exit_code == 0, plan.output
    shown = json.loads(plan.output)
    assert shown["runs"][0]["gpu_memory"] is None and reason in shown["gpu_memory_skipped"]
    table = runner.invoke(app, ["plan", str(bad)], env={"COLUMNS": "300"})
    assert table.exit_code == 0 and "-" + "6.1 GiB" not in table.output and "Traceback" not in table.output
