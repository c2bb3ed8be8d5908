"""verl's vLLM replica, server and worker extension, each subclassed for vLLM's CPU platform.

Imported only when a `rollout.name=vllm` run on the `cpu` platform starts its rollout (the registry
loader in cpu/vllm_rollout.py), in the TaskRunner, the server actor and vLLM's worker processes.

- `VLLMCpuReplica.launch_servers`: verl's asks each worker for its accelerator id
  (`vllm_async_server.py:1343-1350`), which a Ray "CPU" resource lacks (KeyError); this one starts the
  server with no visible devices and no logical CPU of its own, on the workers' node.
- `VLLMCpuHttpServer._get_worker_extension_cls` (verl's hook, `vllm_async_server.py:1273-1275`) names
  `VLLMCpuWorkerExtension`.
- `VLLMCpuWorkerExtension.update_weights_from_ipc`: vLLM's CPU linear layers pack their weight into a
  oneDNN / sgl-kernel handle after loading and drop the parameter (`vllm/model_executor/layers/utils.py`
  `dispatch_cpu_unquantized_gemm(remove_weight=True)`, called from `linear.py:198-202`), so verl's
  in-place `model.load_weights` (`vllm_rollout/utils.py:405`) finds a bare `Parameter` without
  `weight_loader`. vLLM's own in-place reload API (`model_executor/model_loader/reload`, what vLLM's
  `reload_weights` and IPC weight transfer use) restores the parameters from the metadata recorded at
  model init, and re-packs each layer once its weights are in: `initialize_layerwise_reload` before
  verl's receive, `finalize_layerwise_reload` after; each bucket's tensors are copied out of verl's
  shared-memory segment first (the reload holds them past the segment's close).
"""

from __future__ import annotations

import json
import os

import ray
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica

from cancelctl.backends.verl.cpu import WEIGHT_LOG_ENV

EXTENSION = f"{__name__}.VLLMCpuWorkerExtension"


class VLLMCpuWorkerExtension(vLLMColocateWorkerExtension):
    _version = 0  # syncs received by this vLLM worker: 1 at init (on_init_end), k + 1 after step k

    def _update_weights(self, weights, *args, **kwargs):
        self._tensors += len(weights)
        # On CPU the received tensors are views of verl's shared-memory bucket (no device copy), and the
        # layerwise reload keeps them until a layer is complete: copy them out, or verl's
        # `shm.close()` (bucketed_weight_transfer.py:340) fails with "exported pointers exist".
        return super()._update_weights([(name, tensor.clone()) for name, tensor in weights], *args, **kwargs)

    def update_weights_from_ipc(self, *args, **kwargs):
        from vllm.model_executor.model_loader.reload import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        models = list(self._iter_all_models_with_config())
        for model, _ in models:
            initialize_layerwise_reload(model)
        self._tensors = 0
        try:
            result = super().update_weights_from_ipc(*args, **kwargs)
        finally:
            for model, model_config in models:
                finalize_layerwise_reload(model, model_config)
        self._version += 1
        self._log_sync()
        return result

    def _log_sync(self) -> None:
        """One JSON line per sync to CANCELCTL_HF_CPU_WEIGHT_LOG (the hf_cpu rollout's format), if set."""
        line = {"server": f"vllm_rank{self.rank}", "version": self._version, "tensors": self._tensors}
        print(f"vLLM CPU update_weights: {self._tensors} tensors -> version {self._version}", flush=True)
        path = os.environ.get(WEIGHT_LOG_ENV)
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(line) + "\n")


class VLLMCpuHttpServer(vLLMHttpServer):
    def _get_worker_extension_cls(self) -> str:
        return EXTENSION


class VLLMCpuReplica(vLLMReplica):
    """verl's vLLM replica with a CPU server launch (module docstring); everything else is verl's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(VLLMCpuHttpServer)

    async def launch_servers(self):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        from verl.utils.device import get_platform

        assert len(self.workers) == self.world_size, (len(self.workers), self.world_size)
        if self.nnodes != 1:
            raise ValueError(f"vLLM on CPU runs one node per replica, not {self.nnodes}")
        node_id = await self.workers[0].__ray_call__.remote(lambda _self: ray.get_runtime_context().get_node_id())
        role = "reward_" if self.is_reward_model else "teacher_" if self.is_teacher_model else ""
        # the name verl's ServerAdapter looks up: "vllm_server_{replica}_{node}" (vllm_rollout.py:321-323)
        name = f"{self._get_server_name_prefix()}server_{role}{self.replica_rank}_0{self.name_suffix}"
        server = self.server_class.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
            runtime_env={"env_vars": get_platform().rollout_env_vars()},
            name=name,
            num_cpus=0,  # the run's logical CPUs are the trainer's and TransferQueue's (cpu/overrides.py)
            max_concurrency=self.max_concurrency,
        ).remote(
            config=self.config,
            model_config=self.model_config,
            rollout_mode=self.rollout_mode,
            workers=self.workers,
            replica_rank=self.replica_rank,
            node_rank=0,
            gpus_per_node=self.gpus_per_replica_node,
            nnodes=1,
            cuda_visible_devices="",  # no accelerator
        )
        self.servers.append(server)
        await server.launch_server.remote()
        address, port = await server.get_server_address.remote()
        self._server_handle = server
        self._server_address = f"{address}:{port}"
