"""What an attempt ran on: read from this machine, and from a stand-in `nvidia-smi` (no GPU here)."""

from __future__ import annotations

import os
import stat

import torch

import pandas as pd

from cancelctl.jobs.hardware import BF16_KERNEL_FLAGS, KERNEL_FLAGS, cpu_flags, describe_hardware
from cancelctl.stats.hardware_match import compared_hardware
from cancelctl.tracking.tags import HARDWARE_COLUMNS, HARDWARE_FIELDS, HARDWARE_TAG_PREFIX, TAG_COLUMNS, hardware_tags

SMI_TWO_H100 = """#!/bin/sh
echo "$@" > "$(dirname "$0")/args"
echo "NVIDIA H100 80GB HBM3, 81559, 550.54.15"
echo "NVIDIA H100 80GB HBM3, 81559, 550.54.15"
"""


def compared(hardware: dict[str, str]) -> str:
    """What the report compares arms on, for a run that recorded `hardware` (collect's columns)."""
    return compared_hardware(pd.DataFrame([{HARDWARE_COLUMNS[k]: v for k, v in hardware.items()}])).iloc[0]


def fake_nvidia_smi(folder, script, monkeypatch):
    """A stand-in nvidia-smi first on PATH: this machine has no GPU (the real query is one command)."""
    smi = folder / "nvidia-smi"
    smi.write_text(script)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder / "args"


def test_this_machine_is_described_in_every_field_with_torchs_own_kernel_level(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: a CPU machine
    hardware = describe_hardware(threads=3)
    assert tuple(hardware) == HARDWARE_FIELDS
    assert hardware["torch"] == torch.__version__ and hardware["threads"] == "3" and hardware["gpu"] == ""
    level, *flags = hardware["cpu_kernels"].split()
    assert level == torch.backends.cpu.get_cpu_capability()
    assert set(flags) <= set(KERNEL_FLAGS) and hardware["cpu"]
    assert compared(hardware) == hardware["cpu_kernels"]  # no GPU: the CPU kernels decide
    assert flags == cpu_flags()  # what render's bf16 note reads, without torch or nvidia-smi
    assert set(BF16_KERNEL_FLAGS) <= set(KERNEL_FLAGS)


def test_the_gpus_this_job_sees_are_counted_by_kind_with_their_driver(tmp_path, monkeypatch):
    args = fake_nvidia_smi(tmp_path, SMI_TWO_H100, monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    hardware = describe_hardware()
    assert hardware["gpu"] == "2× NVIDIA H100 80GB HBM3 (81559 MiB)" and hardware["driver"] == "550.54.15"
    assert "--id=2,3" in args.read_text()  # only the GPUs the scheduler gave this job
    assert compared(hardware) == hardware["gpu"]


def test_a_failing_nvidia_smi_is_said_not_taken_for_a_cpu_machine(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n", monkeypatch)
    assert describe_hardware()["gpu"] == "unknown (nvidia-smi failed)"


def test_every_hardware_field_is_a_tag_and_a_column_of_collects_runs_frame():
    tags = hardware_tags({"gpu": "1× A100", "host": "n1"})
    assert set(tags) == {HARDWARE_TAG_PREFIX + f for f in HARDWARE_FIELDS} and tags[HARDWARE_TAG_PREFIX + "gpu"] == "1× A100"
    assert all(TAG_COLUMNS[tag] == "hardware_" + tag.removeprefix(HARDWARE_TAG_PREFIX) for tag in tags)
