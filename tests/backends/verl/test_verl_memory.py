"""GPU memory before the queue: each formula of `backends.verl.memory` against a hand computation, and
`validate` / `plan` on sweeps over the real published shapes of Qwen2.5-7B and Qwen2.5-0.5B (config.json
files the tests write: nothing is downloaded)."""

from __future__ import annotations

import json
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
    assert logits_bytes(Q05, setup(), T, backward=False, entropy=True) == T * V * 2 * 2  # compiled entropy
    assert logits_bytes(Q05, setup(compiled_entropy=False), T, backward=False, entropy=True) == T * V * 2 * 3
    assert logits_bytes(Q05, setup(strategy="megatron", tensor_parallel=4), T, backward=True, entropy=False) \
        == T * V * (2 + 8) / 4


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
    assert "would fit: rollout.gpu_memory_utilization: 0.83" in out


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
