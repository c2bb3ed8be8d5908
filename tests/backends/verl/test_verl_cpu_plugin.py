"""The CPU runtime's registration (entry point `cancelctl_cpu`) and its overrides against verl's config."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("verl")
pytest.importorskip("hydra")

from cancelctl.backends.verl.cpu import ROLLOUT_NAME
from cancelctl.backends.verl.cpu.overrides import (
    CPU_ENV,
    CPU_OVERRIDES,
    cpu_command,
)

pytestmark = pytest.mark.verl

PROBE = """
import verl
from verl.plugin.platform import get_platform
from verl.workers.rollout.base import _ROLLOUT_REGISTRY, get_rollout_class
from verl.workers.rollout.replica import get_rollout_replica_class
print(type(get_platform()).__name__, get_platform().device_name)
print(get_rollout_replica_class("hf_cpu").__name__, get_rollout_class("hf_cpu", "async").__name__)
import sys
print("spec-models" if "cancelctl.spec.experiment" in sys.modules else "no-spec-models")
"""


def probe(env_update: dict[str, str], code: str = PROBE) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VERL_USE_EXTERNAL_MODULES")
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env={**env, **env_update},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_verl_registers_the_cpu_platform_and_rollout():
    """A bare `import verl` (nothing on PYTHONPATH) finds the `cpu` platform and `hf_cpu` on both sides,
    without building the spec's models (every process of a verl run pays for what the plugins import)."""
    proc = probe(CPU_ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [
        "PlatformCPU",
        "cpu",
        "HFCpuReplica",
        "HFCpuServerAdapter",
        "no-spec-models",
    ]


def test_a_process_whose_first_import_is_the_rollout_server_warns_of_nothing():
    """Ray unpickling the server actor imports our rollout module first, which imports verl, which
    runs this plugin mid-import: that is not a broken runtime (it used to warn "unavailable")."""
    proc = probe(CPU_ENV, "import cancelctl.backends.verl.cpu.rollout")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "unavailable" not in proc.stderr, proc.stderr[-3000:]


def test_registered_but_not_selected_without_verl_platform(monkeypatch):
    """In this process (no VERL_PLATFORM): the plugin registered `cpu`, verl still falls back to nvidia."""
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    import verl  # noqa: F401  (loads the entry points)
    from verl.plugin.platform import platform_manager

    assert "cpu" in platform_manager.PlatformRegistry.registered_names()
    monkeypatch.setattr(platform_manager, "_current_platform", None)
    assert platform_manager.get_platform().device_name == "cuda"  # never auto-detected


def test_cpu_overrides_compose_against_verls_config():
    from omegaconf import OmegaConf

    from cancelctl.backends.verl.compose import VerlComposer, verl_config_dir

    cfg = VerlComposer(verl_config_dir(), deep=False).compose(
        "ppo_trainer", list(CPU_OVERRIDES)
    )
    assert OmegaConf.select(cfg, "actor_rollout_ref.rollout.name") == ROLLOUT_NAME
    # the cpu platform makes the process group itself (cpu/platform.py): no external_lib
    assert OmegaConf.select(cfg, "actor_rollout_ref.model.external_lib") is None
    assert OmegaConf.select(cfg, "ray_kwargs.ray_init.num_gpus") == 1
    assert OmegaConf.select(cfg, "trainer.v1.cancelctl.poll_interval") < 2.0


def test_cpu_command_lists_env_and_every_override():
    command = cpu_command(["trainer.total_training_steps=3"])
    assert command.startswith("VERL_PLATFORM=cpu VERL_ENGINE_DEVICE=cuda")
    assert all(line in command for line in CPU_OVERRIDES) and command.endswith(
        "trainer.total_training_steps=3"
    )


def test_readme_lists_the_cpu_command():
    from guide_pages import guide_text

    readme = guide_text()  # the README and the guide (docs/verl.md, "verl on CPU")
    assert cpu_command([]).split(" \\\n")[0] in readme  # the env vars and the entry
    assert all(f"    {line} \\\n" in readme for line in CPU_OVERRIDES)
