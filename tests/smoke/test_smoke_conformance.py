"""`cancelctl smoke`'s rollout–trainer conformance gate on real `main_ppo` runs: one smoke of a sweep whose
fp32 arms carry one planted rollout fault each (rollout_faults.py, a test plugin: stale weights after
the sync, another chat template, a bf16 rollout behind an fp32 declaration), a healthy fp32 arm and a
bf16-rollout arm. The faulty arms are refused (exit 2) with their figures; the healthy one passes; the
bf16 one reports its figures. All arms share one checkpoint family, so only the healthy arm resumes
(its step 2 in a second job); the others run step 2 in their first job: six verl starts, two at a time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")
pytestmark = [pytest.mark.verl, pytest.mark.machine, pytest.mark.timeout(1800)]

HERE = Path(__file__).resolve().parent
from conformance_sweep import base_spec, figures, tiny_world  # noqa: E402
from rollout_faults import FAULTS_ENV  # noqa: E402

CLI = Path(sys.executable).with_name("cancelctl")
FAULTY = {"stale-weights": "stale", "chat-template": "chat_template", "rollout-dtype": "dtype"}


@pytest.fixture(scope="module")
def smoked(tmp_path_factory):
    root = tmp_path_factory.mktemp("conformance")
    env = {k: v for k, v in os.environ.items() if k not in ("CANCELCTL_WORKDIR", "MLFLOW_TRACKING_URI")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env["VERL_USE_EXTERNAL_MODULES"] = "rollout_faults"
    env[FAULTS_ENV] = ",".join(f"/{arm}-s0__={fault}" for arm, fault in FAULTY.items())  # the arm's run folder
    env["CANCELCTL_LOCAL_PARALLEL"] = "2"  # two verl runs (~5 GiB each) at a time: a verl start keeps ~1 of 2 cores busy

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(CLI), *args], cwd=root, capture_output=True, text=True, timeout=1700,
                              check=False, env=env)

    tiny = tiny_world(root / "tiny")
    spec = {
        "name": "conformance",
        "base": base_spec(tiny, {"precision": "fp32"}),
        # arms must differ: the faulty ones by a clip the gate does not look at (the fault is the env's)
        "arms": {"healthy": {}, **{arm: {"algorithm": {"clip_high": 0.25 + i / 100}} for i, arm in enumerate(FAULTY)},
                 "bf16-rollout": {"rollout": {"precision": "bf16"}}},
        "seeds": [0],
    }
    (root / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = cli("smoke", "sweep.yaml", "--workdir", "work")
    print(result.stdout, result.stderr)
    return result, table_rows(result.stdout, spec["arms"])


def table_rows(text: str, arms) -> dict[str, str]:
    """The smoke table's row of each arm, its folded continuation lines joined on."""
    rows: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        words = line.split()
        if words and words[0] in arms and not line.startswith(" "):  # a folded line may begin with an arm's name
            current, rows[words[0]] = words[0], line
        elif current and line.startswith(" ") and words:
            rows[current] += " " + " ".join(words)
        else:
            current = None
    return {arm: " ".join(row.split()) for arm, row in rows.items()}  # a folded cell's padding is not a word gap


def test_a_healthy_fp32_configuration_passes_with_its_figures(smoked):
    result, rows = smoked
    assert " ok " in rows["healthy"] and "conformance ok (fp32)" in rows["healthy"], result.stdout + result.stderr
    assert "resumed at step 2" in rows["healthy"] and "weight sync not tested" not in rows["healthy"]
    mean, p99, top, _, _ = figures(rows["healthy"])
    assert 0 <= mean <= p99 <= top


@pytest.mark.parametrize("arm", sorted(FAULTY))
def test_each_planted_rollout_fault_is_refused_with_exit_2_and_its_figures(smoked, arm):
    result, rows = smoked
    assert result.returncode == 2, result.stdout + result.stderr
    assert "refused" in rows[arm] and "above the healthy fp32 band" in rows[arm], result.stdout
    assert arm in rows and figures(rows[arm])[0] > 0


def test_a_bf16_rollout_is_reported_not_refused(smoked):
    result, rows = smoked
    assert " ok " in rows["bf16-rollout"] and "conformance reported (rollout.precision bf16)" in rows["bf16-rollout"], \
        result.stdout
    healthy, bf16 = figures(rows["healthy"]), figures(rows["bf16-rollout"])
    assert bf16[0] > healthy[0]  # bf16 rounding: a real mismatch, larger than fp32's
