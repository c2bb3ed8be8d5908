"""`cancelctl smoke` end to end on planted errors: `cancelctl data prepare chain_sum`, then one smoke of
a sweep whose arms each carry one mistake a user makes — a template key verl does not have, a
micro-batch that would split DFPO's groups, a reward that returns None — each refused before any job
starts, with its own one-line cause; a tokenizer with no chat template is refused earlier still, by the
prompt-length check every smoke starts with (no prompt renders, so verl would keep none). No verl job runs here: the smoke's real `main_ppo` jobs, with a resume, are README's first verl
sweep (tests/test_readme.py); the other shapes of the shipped experiments (reward_balanced, δ with
TIS, DFPO) train, requeue and resume on real `main_ppo` in tests/slurm/test_verl_e2e.py, and a job
that fails inside verl shows its worker's own line (there, and in the smoke's row:
tests/smoke/test_smoke_parts.py). Each verl job costs ~110 CPU-seconds of start-up on CI's 2 cores."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")
pytest.importorskip("reasoning_gym")
pytestmark = [pytest.mark.verl, pytest.mark.timeout(600)]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "verl"))
from tiny_verl import build_model  # noqa: E402

CLI = Path(sys.executable).with_name("cancelctl")


def cli(*args: str, cwd: Path, timeout: float = 500) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})


@pytest.fixture(scope="module")
def smoked(tmp_path_factory):
    root = tmp_path_factory.mktemp("smoke")
    prepared = cli("data", "prepare", "chain_sum", "--size", "160", "--seed", "1", cwd=root)  # >= a step's 128 prompts
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    build_model(root / "model")  # the user's model: a tiny Qwen2 with a ChatML byte-level tokenizer
    shutil.copytree(root / "model", root / "no-chat")
    (root / "no-chat" / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((root / "no-chat" / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (root / "no-chat" / "tokenizer_config.json").write_text(json.dumps(config))
    (root / "bad-key.yaml").write_text(yaml.safe_dump({"extends": "fsdp", "overrides": {"actor_rollout_ref.actor.ppo_epoch_count": 2}}))
    (root / "dynamic.yaml").write_text(yaml.safe_dump({"extends": "fsdp", "overrides": {
        "actor_rollout_ref.actor.use_dynamic_bsz": True, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 256}}))
    (root / "none_reward.py").write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return None\n")
    spec = {
        "name": "smoke-shapes",
        "base": {
            "backend": "verl", "executor": "slurm",
            "model": {"path": "model"},
            "data": {"train_files": ["data/chain_sum/train.parquet"], "val_files": ["data/chain_sum/test.parquet"],
                     "max_prompt_length": 512, "max_response_length": 1024},
            "algorithm": {"mini_batch_size": 32, "micro_batch_size_per_gpu": 4},
            "rollout": {"G": 4},
            "budget": {"steps": 300, "prompts_per_step": 128},
            "eval": {"every": 20, "k": 8},
            "batching": {"strategy": "query_preserved"},
            "cluster": {"partition": "gpu", "gpus_per_node": 8},
        },
        "arms": {
            "bad-key": {"model": {"template": str(root / "bad-key.yaml")}},
            "split-groups": {"algorithm": {"loss": "dfpo"}, "model": {"template": str(root / "dynamic.yaml")}},
            "reward-none": {"data": {"reward_function": "none_reward.py"}},
        },
        "seeds": [0, 1],
    }
    (root / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = cli("smoke", "sweep.yaml", "--workdir", "work", cwd=root)
    return root, result, table_rows(result.stdout, spec["arms"])


def table_rows(text: str, arms) -> dict[str, str]:
    """The smoke table's row of each arm, its folded continuation lines joined on."""
    rows: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        words = line.split()
        if words and words[0] in arms:
            current, rows[words[0]] = words[0], line
        elif current and line.startswith(" ") and words:
            rows[current] += " " + " ".join(words)
        else:
            current = None
    return rows


def test_each_planted_error_gives_its_own_one_line_cause_and_no_job_starts(smoked):
    root, result, rows = smoked
    assert result.returncode == 2, result.stdout + result.stderr  # bad input: exit 2, nothing ran
    assert set(rows) == {"bad-key", "split-groups", "reward-none"}, result.stdout
    assert "refused" in rows["bad-key"] and "ppo_epoch_count" in rows["bad-key"] and "not in struct" in rows["bad-key"]
    assert "refused" in rows["split-groups"] and "whole groups per micro-batch" in rows["split-groups"]
    assert "refused" in rows["reward-none"] and "returned None" in rows["reward-none"]


def test_a_tokenizer_without_a_chat_template_is_refused_before_any_configuration(smoked):
    root, _, _ = smoked
    spec = yaml.safe_load((root / "sweep.yaml").read_text())
    spec["name"], spec["arms"] = "no-chat", {"no-chat-template": {"model": {"path": "no-chat"}}}
    (root / "no-chat.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = cli("smoke", "no-chat.yaml", "--workdir", "work-no-chat", cwd=root)
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2 and "data.max_prompt_length" in text, text
    assert "no prompt renders under the chat template" in text, text
    assert not (root / "work-no-chat" / "smoke" / "no-chat" / "work" / "sweeps").exists()  # no job was launched


def test_a_refused_smoke_never_enters_the_sweeps_experiment_or_manifest(smoked):
    root, result, rows = smoked
    work = root / "work"
    assert not (work / "sweeps").exists() and not (work / "mlflow.db").exists()
    assert not (work / "smoke" / "smoke-shapes" / "work" / "sweeps").exists()  # no job was launched
