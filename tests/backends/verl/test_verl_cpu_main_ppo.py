"""verl's whole loop on CPU: plain `python -m verl.trainer.main_ppo`, 3 GRPO steps, exit 0.

Only the installed package is used: the CPU env vars and overrides come from
cancelctl.backends.verl.cpu.overrides and everything else (platform, `hf_cpu` rollout) is loaded by
cancelctl's `verl.plugins` entry point — PYTHONPATH is removed from the environment. The tiny model,
data and reward are built in tmp_path (tiny_verl.py). ~90 s and ~5 GiB over ~16 processes (Ray,
TransferQueue, workers); every process of the run is killed by process group afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

from cancelctl.backends.verl.cpu.overrides import CPU_ENV, CPU_OVERRIDES
from cancelctl.backends.verl.cpu.rollout import WEIGHT_LOG_ENV

pytestmark = pytest.mark.verl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_verl import build_tiny_verl, main_ppo_overrides

STEPS = 3


def run_main_ppo(
    tmp_path: Path, steps: int = STEPS, cpu_overrides=CPU_OVERRIDES, extra=()
):
    """Run main_ppo on the tiny world; (completed process, verl's metrics JSONL, the rollout's weight log)."""
    tiny = build_tiny_verl(tmp_path / "tiny", steps=steps)
    metrics, weights = (
        tmp_path / "verl_metrics.jsonl",
        tmp_path / "rollout_weights.jsonl",
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "RAY_ADDRESS", "VERL_USE_EXTERNAL_MODULES")
    }
    env.update(
        CPU_ENV, VERL_FILE_LOGGER_PATH=str(metrics), **{WEIGHT_LOG_ENV: str(weights)}
    )
    cmd = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        *cpu_overrides,
        *main_ppo_overrides(tiny, tmp_path, steps),
        *extra,
    ]
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=540)
    finally:
        try:  # Ray's processes stay in the run's process group: leave none behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    (tmp_path / "main_ppo.log").write_text(out or "")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, ""), metrics, weights


def test_main_ppo_trains_on_cpu_with_the_installed_plugin(tmp_path):
    proc, metrics_file, weights_file = run_main_ppo(tmp_path)
    assert proc.returncode == 0, proc.stdout[-6000:]
    steps = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    steps = [s for s in steps if "actor/pg_loss" in s["data"]]
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    for s in steps:
        data = s["data"]
        assert "critic/score/mean" in data and "actor/pg_loss" in data
        assert (
            data["training/rollout_probs_diff_mean"] < 1e-3
        )  # the rollout has the trainer's weights
    versions = [json.loads(line) for line in weights_file.read_text().splitlines()]
    # the sync at init is version 1; the sync after step k is version k + 1
    assert [v["version"] for v in versions] == list(range(1, STEPS + 2))
    assert all(
        v["missing"] == 0 and v["unexpected"] == 0 and v["tensors"] > 0
        for v in versions
    )
