"""`cancelctl render experiments/delta-injection.yaml --run <id>` on SLURM: the exact sbatch script of
a 4-node allocation and its in-task commands (Ray head + 3 workers, then verl with trainer.nnodes=4),
pinned by golden files for both container runtimes. No cluster needed.

Regenerate after an intended change: CANCELCTL_UPDATE_GOLDEN=1 pytest tests/slurm/test_render_golden.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cancelctl.backends.registry import get_backend
from cancelctl.executors.slurm_render import render_run
from cancelctl.spec.expand import load_sweep

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
EXPERIMENT = ROOT / "experiments" / "delta-injection.yaml"
WORKDIR = Path("/scratch/work")  # a fixed, machine-independent work dir
RUNTIMES = {"pyxis": "/images/cancelctl-verl-0.9.1.sqsh", "apptainer": "/images/cancelctl-verl-0.9.1.sif"}


@pytest.fixture(autouse=True)
def no_model_config(tmp_path, monkeypatch):
    """The USR2 lead follows the model's shape where its config.json is here (`jobs.time_limit`): the
    golden files are rendered without one (submitit's 90 s), whatever this machine's cache holds."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))


def containerised_sweep(tmp_path: Path, runtime: str):
    data = yaml.safe_load(EXPERIMENT.read_text())
    data["base"]["cluster"].update(container_image=RUNTIMES[runtime], container_runtime=runtime)
    path = tmp_path / EXPERIMENT.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_sweep(path, allow_unmatched=True)


def normalise(text: str) -> str:
    """Only this machine's interpreter path could differ between machines; containers use the image's."""
    return text.replace(sys.executable, "<python>")


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_render_of_a_4_node_run_matches_golden(tmp_path, runtime):
    sweep = containerised_sweep(tmp_path, runtime)
    run = sweep.runs[0]
    text = normalise(render_run(run, WORKDIR, lambda run_dir: get_backend(run.spec.backend).workload_lines(run, run_dir)))
    golden = GOLDEN / f"delta-injection-{runtime}.txt"
    if os.environ.get("CANCELCTL_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_rendered_allocation_is_four_nodes_with_one_head_and_three_workers(tmp_path, runtime):
    run = containerised_sweep(tmp_path, runtime).runs[0]
    text = render_run(run, WORKDIR, lambda run_dir: get_backend(run.spec.backend).workload_lines(run, run_dir))
    assert "#SBATCH --nodes=4" in text and "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --gpus-per-node=8" in text
    starts = [line for line in text.splitlines() if line.startswith("ray start")]
    assert len(starts) == 4 and sum("--head" in line for line in starts) == 1
    head_port = re.search(r"--head --port=(\d+)", starts[0]).group(1)
    assert all(f"--address=192.0.2.1:{head_port}" in line for line in starts[1:])
    assert all("--include-dashboard=false" in starts[0] and "--disable-usage-stats" in line for line in starts)
    assert len({re.search(r"--temp-dir=(\S+)", line).group(1) for line in starts}) == 4
    assert "trainer.nnodes=4" in text and "trainer.n_gpus_per_node=8" in text
    assert "ray stop" not in text.replace("never `ray stop`", "")
    image = RUNTIMES[runtime]
    if runtime == "pyxis":
        assert f"--container-image={image}" in text and "--container-mounts=/scratch/work:/scratch/work" in text
    else:
        assert f"apptainer exec --nv --bind /scratch/work:/scratch/work {image} python -u -m cancelctl.jobs" in text


def test_cli_render_prints_the_same(tmp_path):
    sweep = containerised_sweep(tmp_path, "pyxis")
    run = sweep.runs[1]
    cli = Path(sys.executable).with_name("cancelctl")
    out = subprocess.run([str(cli), "render", str(tmp_path / EXPERIMENT.name), "--run", run.run_id, "-w", str(WORKDIR)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == render_run(run, WORKDIR, lambda run_dir: get_backend(run.spec.backend).workload_lines(run, run_dir))
