"""What an attempt ran on: host, CPU model and the instruction sets that change torch's kernels, GPUs,
torch / CUDA / driver versions, threads — recorded by the job (`runjob`) in job.json, attempts.jsonl
and the MLflow run's tags, so a report can tell when arms of one comparison ran on different hardware.

Why it matters: the same lab seeds collapsed on one machine and not on another; the CPU
kernels torch picks (AVX2 / AVX512 / AMX) change float summation order, and GPU types differ in
kernels and memory. The GPU is read with `nvidia-smi`, not torch: `torch.cuda` would open a CUDA
context in the job's process and hold its memory on GPU 0 for the whole run.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path

# CPU flags (/proc/cpuinfo) under which torch/oneDNN dispatch different kernels for training's dtypes
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")
# those of KERNEL_FLAGS with native bf16 matmuls: without them torch emulates bf16 (docs/verl.md)
BF16_KERNEL_FLAGS = ("avx512_bf16", "amx_bf16")
NVIDIA_SMI_TIMEOUT_S = 10


def describe_hardware(threads: int | None = None) -> dict[str, str]:
    """This process's hardware, every field of `tracking.tags.HARDWARE_FIELDS` in that order, each a
    string ("" where there is none, e.g. no GPU).

    `cpu_kernels`: torch's dispatch level (`torch.backends.cpu.get_cpu_capability()`) and the flags
    of `KERNEL_FLAGS` the CPU has; `gpu`: "<count>× <name> (<memory> MiB)" of the GPUs this job sees."""
    torch_version, cuda, capability, torch_threads = _torch_facts()
    gpus, driver = _nvidia_gpus()
    hardware = {
        "host": socket.gethostname(),
        "cpu": _cpu_model(),
        "cpu_kernels": " ".join(filter(None, [capability, *cpu_flags()])),
        "gpu": gpus,
        "torch": torch_version,
        "cuda": cuda,
        "driver": driver,
        "threads": str(threads or torch_threads or ""),
    }
    return hardware


def _torch_facts() -> tuple[str, str, str, str]:
    try:
        import torch
    except ImportError:
        return "not installed", "", "", ""
    return torch.__version__, torch.version.cuda or "", torch.backends.cpu.get_cpu_capability(), str(torch.get_num_threads())


def _cpu_model() -> str:
    for line in _cpuinfo_lines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The `KERNEL_FLAGS` this CPU has (/proc/cpuinfo): no torch import, no nvidia-smi."""
    for line in _cpuinfo_lines():
        if line.startswith(("flags", "Features")):
            have = set(line.split(":", 1)[1].split())
            return [flag for flag in KERNEL_FLAGS if flag in have]
    return []


def _cpuinfo_lines() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:  # not Linux
        return []


def _nvidia_gpus() -> tuple[str, str]:
    """("8× NVIDIA H100 80GB HBM3 (81559 MiB)", driver) of the GPUs visible to this job, or ("", "")."""
    if shutil.which("nvidia-smi") is None:
        return "", ""
    command = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        command.append(f"--id={visible}")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown (nvidia-smi: {type(exc).__name__})", ""
    rows = [[part.strip() for part in line.split(",")] for line in done.stdout.splitlines() if line.count(",") == 2]
    if done.returncode != 0 or not rows:
        return ("unknown (nvidia-smi failed)" if done.returncode != 0 else ""), ""
    kinds: dict[str, int] = {}
    for name, memory, _ in rows:
        kinds[f"{name} ({memory} MiB)"] = kinds.get(f"{name} ({memory} MiB)", 0) + 1
    return " + ".join(f"{n}× {kind}" for kind, n in kinds.items()), rows[0][2]
