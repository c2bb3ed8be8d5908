"""verl's whole loop on CPU: the guide's plain-verl DFPO command, as written, 3 steps, exit 0.

The command is the ```bash block after the line `<!-- plain-verl-dfpo -->` in README.md or a page of
docs/ (docs/verl.md, "Plain verl with the plugin"): env vars, `python -m verl.trainer.main_ppo` and
its overrides, run with its three placeholders (model, data, reward) filled by the tiny world built in
tmp_path (tiny_verl.py) and the test's own settings for keys it does not set (lengths, steps, logging,
no validation). Only the installed package is used: everything (platform, its process group, the
`hf_cpu` rollout, the `cancel_dfpo` loss, the `cancelctl` trainer) is loaded by cancelctl's
`verl.plugins` entry points — PYTHONPATH is removed from the environment. One verl run (~55 s in CI,
~5 GiB over ~16 processes: Ray, TransferQueue, workers); every process of it is killed by process
group afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shlex
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
from tiny_verl import TinyVerl, build_tiny_verl, main_ppo_overrides

STEPS = 3
MARKER = "<!-- plain-verl-dfpo -->"
ENTRY = ["python", "-m", "verl.trainer.main_ppo"]
PLACEHOLDER = re.compile(r"(?P<key>[\w.+]+)=<[^>]*>")


def documented_command() -> tuple[Path, str]:
    """(page, text) of the one ```bash block right after MARKER in README.md and docs/**/*.md."""
    from guide_pages import guide_files

    found = []
    for page in guide_files():
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() == MARKER:
                assert lines[i + 1].strip() == "```bash", f"{page}:{i + 2}: {MARKER} must precede a ```bash block"
                end = lines.index("```", i + 2)
                found.append((page, "\n".join(lines[i + 2 : end])))
    assert len(found) == 1, f"{MARKER} marks {len(found)} blocks: {[str(p) for p, _ in found]}"
    return found[0]


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+")


def parse_command(text: str, tiny: TinyVerl) -> tuple[dict[str, str], list[str]]:
    """The block's env vars and main_ppo overrides, its `key=<...>` placeholders filled from `tiny`."""
    fill = {
        "actor_rollout_ref.model.path": tiny.model,
        "data.train_files": tiny.train,
        "data.val_files": tiny.val,
        "reward.custom_reward_function.path": tiny.reward,
    }
    text = PLACEHOLDER.sub(lambda m: f"{m['key']}={shlex.quote(str(fill[m['key']]))}", text)
    words = shlex.split(text.replace("\\\n", " "))  # a backslash-newline joins the lines, as in a shell
    start = words.index(ENTRY[0])
    assert words[start : start + 3] == ENTRY, words[: start + 3]
    env = dict(word.split("=", 1) for word in words[:start])
    return env, words[start + 3 :]


def run_documented_dfpo(tmp_path: Path, steps: int = STEPS):
    """Run the documented command on the tiny world; (completed process, overrides, verl's metrics
    JSONL, the rollout's weight log)."""
    page, text = documented_command()
    tiny = build_tiny_verl(tmp_path / "tiny", steps=steps)
    env_vars, documented = parse_command(text, tiny)
    keys = {_key(o) for o in documented}
    own = [o for o in main_ppo_overrides(tiny, tmp_path, steps) if _key(o) not in keys]
    metrics, weights = tmp_path / "verl_metrics.jsonl", tmp_path / "rollout_weights.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS", "VERL_USE_EXTERNAL_MODULES")}
    env.update(env_vars, VERL_FILE_LOGGER_PATH=str(metrics), **{WEIGHT_LOG_ENV: str(weights)})
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *documented, *own]
    proc = subprocess.Popen(
        cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=540)
    finally:
        try:  # Ray's processes stay in the run's process group: leave none behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    (tmp_path / "main_ppo.log").write_text(out or "")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, ""), (page, env_vars, documented), metrics, weights


def test_the_documented_plain_verl_dfpo_command_trains_on_cpu(tmp_path):
    proc, (page, env_vars, documented), metrics_file, weights_file = run_documented_dfpo(tmp_path)
    assert proc.returncode == 0, f"{page}'s command failed:\n" + proc.stdout[-6000:]
    # the guide's command is the CPU runtime's (overrides.py), plus DFPO's settings
    assert env_vars == CPU_ENV and set(CPU_OVERRIDES) <= set(documented)
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=cancel_dfpo" in documented
    assert not any("external_lib" in o for o in documented)  # the cpu platform makes the process group
    steps = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    steps = [s for s in steps if "actor/pg_loss" in s["data"]]
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    for s in steps:
        data = s["data"]
        assert "critic/score/mean" in data and data["actor/grad_norm"] > 0  # DFPO's loss value is ~0 by design
        assert data["training/rollout_probs_diff_mean"] < 1e-3  # the rollout has the trainer's weights
        assert data["batching/split_groups"] == 0  # cancelctl's trainer kept every group whole
        assert data["actor/dfpo/ortho_residual"] < 1e-5  # cancel_dfpo ran on whole groups
    versions = [json.loads(line) for line in weights_file.read_text().splitlines()]
    # the sync at init is version 1; the sync after step k is version k + 1
    assert [v["version"] for v in versions] == list(range(1, STEPS + 2))
    assert all(v["missing"] == 0 and v["unexpected"] == 0 and v["tensors"] > 0 for v in versions)
