"""The `cpu` platform for verl 0.9.1, registered through verl's own `PlatformRegistry`.

verl ships no CPU platform and falls back to "nvidia" (plugin/platform/platform_manager.py:113-117),
whose "cuda" device breaks `init_device_mesh`. `PlatformRegistry.register("cpu")` (an official
extension point) adds one; it is selected only by VERL_PLATFORM=cpu (`is_platform_available` is
False, so auto-detection on a GPU host never picks it). Imported by the `verl.plugins` entry point
(cpu/plugin.py) in every process that imports verl, before any module reads the device name
(`workers/engine/fsdp/transformer_impl.py:89` does at import).

The FSDP LM engine is registered for cuda/npu only (`transformer_impl.py:1143`): a CPU run sets
VERL_ENGINE_DEVICE=cuda (`workers/engine/base.py:405`) to pick it (cpu/overrides.py).

The process group: verl's `initialize_global_process_group_ray` (`utils/distributed.py:89`, called
by every TrainingWorker) builds the backend `f"cpu:gloo,{device}:{backend}"` = "cpu:gloo,cpu:gloo",
which torch refuses ("Duplicate device type cpu"), and skips `init_process_group` when a group
exists (`:90`). Evaluating that string calls `communication_backend_name()` (`get_nccl_backend`,
`utils/device.py:129`) in the worker, with verl's RANK/WORLD_SIZE/MASTER_* set, just before the
init: there this platform makes the gloo group itself (cpu/process_group.py), so a plain main_ppo
command needs no `model.external_lib`. verl 0.9.1 calls `get_nccl_backend` nowhere else than before
an `init_process_group` (`utils/distributed.py:63, :89`, `model_merger/megatron_model_merger.py:155`);
only a Ray worker's call (Ray connected, the rendezvous variables set) makes the group, so a
torchrun process meets verl's own error as before.
"""

from __future__ import annotations

import types
from contextlib import contextmanager
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

from cancelctl.backends.verl.cpu import PLATFORM_NAME
from cancelctl.backends.verl.cpu.process_group import init_gloo_process_group


def _in_ray_worker() -> bool:
    import ray  # imported by verl already

    return ray.is_initialized()


def _noop(*_args, **_kwargs):
    return None


def _zero(*_args, **_kwargs):
    return 0


class _CPUDeviceModule(types.ModuleType):
    """What verl calls on `get_torch_device()`: the cuda-style calls, as no-ops on the CPU."""

    def __init__(self):
        super().__init__("cpu_device")
        self.manual_seed = torch.manual_seed
        self.manual_seed_all = torch.manual_seed

    def is_available(self) -> bool:
        return True

    def current_device(self) -> str:
        return "cpu"  # an int would mean cuda:N

    def device_count(self) -> int:
        return 1

    def get_rng_state(self, *_args, **_kwargs):
        return torch.get_rng_state()

    def set_rng_state(self, state, *_args, **_kwargs):
        torch.set_rng_state(state)

    def get_device_name(self, *_args, **_kwargs) -> str:
        return "CPU"  # verl's flops table has no entry: MFU reads 0

    def mem_get_info(self, *_args, **_kwargs):
        return (0, 0)

    def __getattr__(
        self, name: str
    ) -> Any:  # set_device, synchronize, empty_cache, memory_* ...
        if name.startswith("__"):
            raise AttributeError(name)
        if name.startswith(("memory", "max_memory", "reset")):
            return _zero
        return _noop


CPU_DEVICE = _CPUDeviceModule()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self):
        return CPU_DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        return False  # only by VERL_PLATFORM=cpu, never auto-detected

    def current_device(self) -> str:
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index: int | None = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        # the hook just before verl's init_process_group (module docstring)
        if _in_ray_worker():
            init_gloo_process_group()
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "CPU"  # placement bundles get {"CPU": 1} per rank (single_controller/ray/base.py:146-148)

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        # the base class would give {"resources": {"CPU": n}}, which Ray refuses (base.py:404-406)
        return {"num_cpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
