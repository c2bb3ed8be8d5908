"""The `hf_cpu` rollout backend for verl 0.9.1: Hugging Face transformers on CPU, in three parts.

- `HFCpuReplica` (driver side, the TaskRunner's `LLMServerManager`): a `RolloutReplica` registered
  with verl's public `RolloutReplicaRegistry.register(name, loader)` (`workers/rollout/replica.py:318`)
  and selected with `actor_rollout_ref.rollout.name=hf_cpu`. `launch_servers` starts one server
  actor per replica; the base class fans `wake_up`/`sleep`/`abort_all_requests`/... out to it.
- `HFCpuRolloutServer` (a Ray actor): what verl's `LLMServerClient.generate` calls
  (`workers/rollout/llm_server.py:150`). It batches concurrent requests (generator.py), returns a
  `TokenOutput` with one log-prob per token, and takes the trainer's weights (`update_weights`),
  counting versions: the initial sync (`on_init_end`) makes version 1, the sync after step k
  version k + 1. It generates in verl's `rollout.dtype` (cancelctl renders the spec's
  `rollout.precision` into it; verl's default is bfloat16): the model is loaded in that dtype and
  every sync's weights are cast to it, so a bf16 rollout against an fp32 trainer has the
  train–inference mismatch vLLM has on a GPU ([H] §2: ρ = π_train / π_infer ≠ 1). Each sync prints a line and, when CANCELCTL_HF_CPU_WEIGHT_LOG names a file,
  appends a JSON line `{"server", "version", "global_steps", "tensors", "missing", "unexpected"}`.
- `HFCpuServerAdapter` (worker side, inside each hybrid `ActorRolloutRefWorker`): the `BaseRollout`
  that verl's `get_rollout_class(name, "async")` builds (`engine_workers.py:667`). verl offers no
  register function for that table: `register_worker_adapter` inserts the key into the module-level
  dict `_ROLLOUT_REGISTRY` (`workers/rollout/base.py:89`) — the one insertion here that is not an
  API call. On `update_weights` every rank drains verl's parameter generator (FSDP gathers), and
  rank 0 of the replica casts the tensors to the rollout dtype (FSDP's masters are fp32: a bf16
  rollout ships half the bytes) and ships them to its server through Ray's object store.

Sleep / wake-up / KV-cache calls are no-ops: the model is small and lives in the server's memory.
Not supported (not needed by GRPO-style single-turn agent loops): an HTTP/OpenAI endpoint
(tool and multi-turn agent loops), multimodal input, LoRA adapter sync, `delta_flush` weights,
partial-rollout abort with saved state, tensor/pipeline parallel rollouts.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import ray
import torch
from verl.utils.fs import copy_to_local
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import (
    RolloutReplica,
    RolloutReplicaRegistry,
    TokenOutput,
)

from cancelctl.backends.verl.cpu import ROLLOUT_NAME, WEIGHT_LOG_ENV
from cancelctl.backends.verl.cpu.generator import (
    BatchingGenerator,
    request_from_sampling_params,
)

ADAPTER_PATH = f"{__name__}.HFCpuServerAdapter"


def server_name(replica_rank: int, suffix: str = "") -> str:
    """The server actor's Ray name: the worker adapter finds its replica's server by it."""
    return f"{ROLLOUT_NAME}_server_{replica_rank}{suffix}"


def rollout_dtype(name: str | torch.dtype) -> torch.dtype:
    """verl's `rollout.dtype` ("bfloat16", "bf16", "float32", "fp32", ...) as a torch dtype."""
    if isinstance(name, torch.dtype):
        return name
    from verl.utils.torch_dtypes import PrecisionType

    return PrecisionType.to_dtype(name)


def load_model(model_path: str, trust_remote_code: bool = False, dtype: str | torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        model_path,
        dtype=rollout_dtype(dtype),
        attn_implementation="sdpa",
        trust_remote_code=trust_remote_code,
    )


def stop_token_ids(model, model_path: str) -> list[int]:
    """eos ids of the model's generation config and config (Qwen chat models stop at <|im_end|> too)."""
    from transformers import GenerationConfig

    ids: list[int] = []
    sources = [getattr(model, "generation_config", None), model.config]
    try:
        sources.append(GenerationConfig.from_pretrained(model_path))
    except OSError:  # no generation_config.json
        pass
    for source in sources:
        eos = getattr(source, "eos_token_id", None)
        for token in eos if isinstance(eos, (list, tuple)) else [eos]:
            if token is not None and int(token) not in ids:
                ids.append(int(token))
    return ids


def _append_line(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


class HFCpuRolloutServer:
    """The rollout server actor (module docstring); async methods, so Ray runs it on an event loop."""

    def __init__(self, name: str, model_path: str, *, response_length: int, seed: int = 0, trust_remote_code=False,
                 dtype: str | torch.dtype = torch.float32, batch_window_s: float = 0.005, max_batch_size: int = 256):  # fmt: skip
        self.name = name
        self.response_length = response_length
        self.dtype = rollout_dtype(dtype)
        model = load_model(model_path, trust_remote_code, self.dtype)
        self.eos_token_ids = stop_token_ids(model, model_path)
        pad = model.config.pad_token_id
        self.engine = BatchingGenerator(
            model,
            pad_token_id=int(
                pad if pad is not None else (self.eos_token_ids or [0])[0]
            ),
            seed=seed,
            batch_window_s=batch_window_s,
            max_batch_size=max_batch_size,
        )
        self.version = 0
        self.global_steps: int | None = None
        self.generate_seconds = 0.0

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data=None, video_data=None, **kwargs):  # fmt: skip
        if image_data or video_data or kwargs.get("audio_data"):
            raise NotImplementedError(
                f"the {ROLLOUT_NAME} rollout takes token ids only, not multimodal input"
            )
        request = request_from_sampling_params(
            prompt_ids,
            sampling_params,
            response_length=self.response_length,
            eos_token_ids=self.eos_token_ids,
        )
        start = time.perf_counter()
        result = await self.engine.generate(request)
        self.generate_seconds += time.perf_counter() - start
        return TokenOutput(
            token_ids=result.token_ids,
            log_probs=result.log_probs,
            stop_reason="completed",
            extra_fields={
                "global_steps": self.global_steps or 0,
                "weight_version": self.version,
            },
        )

    async def update_weights(
        self, state: dict[str, torch.Tensor], global_steps: int | None = None
    ) -> int:
        missing, unexpected = self.engine.load_state_dict(state)
        self.version += 1
        self.global_steps = global_steps
        record = {
            "server": self.name,
            "version": self.version,
            "global_steps": global_steps,
            "tensors": len(state),
            "missing": len(missing),
            "unexpected": len(unexpected),
            "batches": self.engine.batches,
            "requests": self.engine.requests,
            "generate_s": round(self.generate_seconds, 3),
            "dtype": str(self.dtype).removeprefix("torch."),
        }
        print(f"{ROLLOUT_NAME} rollout weights: {json.dumps(record)}", flush=True)
        if os.environ.get(WEIGHT_LOG_ENV):
            await asyncio.to_thread(
                _append_line, os.environ[WEIGHT_LOG_ENV], json.dumps(record)
            )
        return self.version

    async def get_version(self) -> int:
        return self.version

    # verl's control calls: nothing to free or restore on CPU
    async def wake_up(self, *args, **kwargs):
        pass

    async def sleep(self, *args, **kwargs):
        pass

    async def clear_kv_cache(self):
        pass

    async def release_kv_cache(self):
        pass

    async def resume_kv_cache(self):
        pass

    async def abort_all_requests(self, reject_request: bool = False):
        return {"aborted_count": 0}

    async def resume_generation(self):
        pass

    async def wait_for_requests_to_drain(self, *args, **kwargs):
        pass

    async def start_profile(self, **kwargs):
        pass

    async def stop_profile(self):
        pass


class HFCpuReplica(RolloutReplica):
    """One `HFCpuRolloutServer` per replica (module docstring)."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self):
        name = server_name(self.replica_rank, self.name_suffix)
        model_config = self.model_config
        actor = (
            ray.remote(HFCpuRolloutServer)
            .options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(
                name,
                copy_to_local(
                    model_config.path, use_shm=model_config.get("use_shm", False)
                ),
                response_length=self.config.response_length,
                seed=self.config.seed + self.replica_rank,
                trust_remote_code=model_config.get("trust_remote_code", False),
                dtype=self.config.dtype,
            )
        )
        await actor.get_version.remote()  # the model is loaded: failures surface here
        self.servers = [actor]
        self._server_handle = actor
        self._server_address = name  # only a load-balancer key: no HTTP endpoint


class HFCpuServerAdapter(BaseRollout):
    """Worker-side rollout: ships the trainer's weights to this replica's server (module docstring)."""

    def __init__(self, config, model_config, device_mesh, *args, **kwargs):
        super().__init__(config, model_config, device_mesh, *args, **kwargs)
        world = self.config.tensor_model_parallel_size * self.config.data_parallel_size
        world *= self.config.pipeline_model_parallel_size
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self.replica_rank, self.leader = rank // world, rank % world == 0
        self.dtype = rollout_dtype(self.config.dtype)
        self._server = None

    async def resume(self, tags: list[str]):
        pass

    async def release(self):
        pass

    async def update_weights(self, weights, wire_format: str = "named_tensors", global_steps: int | None = None,
                             peft_config=None, **kwargs):  # fmt: skip
        if wire_format != "named_tensors" or peft_config is not None:
            raise NotImplementedError(
                f"the {ROLLOUT_NAME} rollout takes full named tensors, not {wire_format} / LoRA"
            )
        state = {}
        for name, tensor in weights:  # every rank drains: FSDP gathers collectively
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            if self.leader:
                dtype = self.dtype if tensor.is_floating_point() else tensor.dtype
                state[name] = tensor.detach().to("cpu", dtype=dtype, copy=True)
        if not self.leader:
            return
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        await self._server.update_weights.remote(state, global_steps)


def register_worker_adapter() -> None:
    """Add `(hf_cpu, "async")` to verl's worker-side rollout table (no register function exists)."""
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = ADAPTER_PATH


def register_replica() -> None:
    """`hf_cpu` in verl's public replica registry (driver side)."""
    RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: HFCpuReplica)
