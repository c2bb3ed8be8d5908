"""Executors are chosen in one registry: a test-only executor, defined in this file and registered
with one call, runs a sweep end to end (launch, status, rerun, CLI) with no other change; and no
module outside the registry compares executor names."""

from __future__ import annotations

import ast
import dataclasses
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cancelctl.cli import app
from cancelctl.errors import SpecError
from cancelctl.executors import (
    executor_names,
    get_executor,
    register_executor,
    unregister_executor,
)
from cancelctl.executors.base import Executor, Submitted
from cancelctl.executors.handle import JobHandle
from cancelctl.jobs.outcome import read_error
from cancelctl.jobs.runjob import RunJob
from cancelctl.launch import launch_sweep, sweep_status
from cancelctl.manifest import SUBMITTED
from cancelctl.runstate import FAILED
from cancelctl.spec.expand import load_sweep

ROOT = Path(__file__).resolve().parents[2]
BUILT_IN = ("local", "slurm", "debug")


class InProcessJob(JobHandle):
    """A run submit has already run: it ended without a result (a completed run never gets here)."""

    def classify(self, state, entry, now):
        error = read_error(state.run_dir)
        return dataclasses.replace(state, state=FAILED, reason=error[1] if error else "ended without a result")


class InProcessExecutor(Executor):
    """Runs each submitted run at once, in the launcher's process (a scheduler with no queue)."""

    name = "inproc"
    job_class = InProcessJob

    def plan(self, runs, workdir):
        return None  # nothing to check per run

    def submit(self, paths, runs, plan, lock_fd):
        done = Submitted()
        for run in runs:
            with paths.store.update() as manifest:
                sub = manifest.add_submission(self.name, [run.run_id], state=SUBMITTED, job_id=f"inproc-{run.run_id}",
                                              submitted_at=time.time())
            try:
                RunJob(paths.run_dir(run.run_id, run.name), sub.token)()
            except Exception:  # noqa: BLE001 - in error.txt; status reports it
                pass
            done.submitted.append(run.run_id)
            done.job_ids.append(sub.job_id)
        return done

    def task_states(self, paths, submissions, freshness):
        return {}  # no scheduler to ask: submit ran them

    def cancel(self, paths, active, signalled):
        return []  # nothing of it outlives submit


@pytest.fixture
def inproc():
    register_executor(InProcessExecutor.name, InProcessExecutor)  # the one registration
    yield InProcessExecutor.name
    unregister_executor(InProcessExecutor.name)


def tiny_sweep(tmp_path: Path) -> Path:
    spec = {
        "name": "inproc-demo",
        "base": {
            "backend": "lab",
            "lab": {"d_model": 16, "n_layers": 1, "n_heads": 2, "warmstart_steps": 5, "checkpoint_every": 2, "max_operand": 5},
            "rollout": {"G": 2},
            "budget": {"steps": 2, "prompts_per_step": 4},
            "eval": {"every": 2, "k": 1, "prompts": 4},
            "algorithm": {"lr": 1.0e-3},
        },
        "arms": {"grpo": {"algorithm": {"loss": "grpo"}}, "gspo": {"algorithm": {"loss": "gspo"}}},
        "seeds": [0],
    }
    path = tmp_path / "inproc-demo.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_a_test_only_executor_runs_a_sweep_end_to_end(tmp_path, workdir, inproc):
    sweep = load_sweep(tiny_sweep(tmp_path))
    result = launch_sweep(sweep, workdir=workdir, executor=inproc)
    assert result.ok and result.executor == inproc, result.errors
    assert sorted(result.submitted) == sorted(r.run_id for r in sweep.runs)
    states = sweep_status(workdir, sweep.name)
    assert [s.state for s in states] == ["completed", "completed"], [(s.name, s.reason) for s in states]
    assert [(s.executor, s.job_id) for s in states] == [(inproc, f"inproc-{s.run_id}") for s in states]
    assert [s.step for s in states] == [s.steps for s in states], "every planned step logged"
    assert all(s.final and s.run_dir.name == f"{s.name}__{s.run_id}" for s in states)
    again = launch_sweep(sweep, workdir=workdir, executor=inproc)  # finished runs are never rerun
    assert again.submitted == [] and sorted(again.skipped_finished) == sorted(r.run_id for r in sweep.runs)


def test_the_cli_accepts_a_registered_executor(tmp_path, workdir, inproc):
    path = tiny_sweep(tmp_path)
    result = CliRunner().invoke(app, ["sweep", str(path), "--executor", inproc, "--workdir", str(workdir)])
    assert result.exit_code == 0, result.output
    assert f"inproc-demo ({inproc}): submitted 2, skipped 0 finished" in result.output
    assert "2 completed" in result.output


def test_unknown_executor_is_bad_input_naming_the_known_ones(inproc):
    expected = "expected 'local', 'slurm', 'debug' or 'inproc'"  # one spelling: spec.executors.check_executor_name
    with pytest.raises(SpecError, match=f"executor 'k8s': {expected}"):
        get_executor("k8s")
    for argv in (["sweep", "x.yaml"], ["smoke", "x.yaml"]):
        result = CliRunner().invoke(app, [*argv, "--executor", "k8s"])
        assert result.exit_code == 2 and f"--executor' / '-e': 'k8s': {expected}" in result.output, result.output
    assert "<local|slurm|debug|inproc>" in CliRunner().invoke(app, ["sweep", "--help"]).output  # --help lists them


def test_built_in_executors_are_registered_and_wait_as_before():
    assert executor_names()[:3] == list(BUILT_IN)
    waits = {name: get_executor(name).waits_by_default for name in BUILT_IN}
    assert waits == {"local": True, "slurm": False, "debug": True}
    assert {name: type(get_executor(name)).name for name in BUILT_IN} == {name: name for name in BUILT_IN}


def test_no_executor_name_is_compared_outside_the_registry():
    """`x == "slurm"`, `x in ("local", "debug")` ... only executors/registry.py may spell these."""
    offenders = []
    for path in sorted((ROOT / "cancelctl").rglob("*.py")):
        if path.relative_to(ROOT).as_posix() == "cancelctl/executors/registry.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            names = {
                const.value
                for side in (node.left, *node.comparators)
                for const in ast.walk(side)
                if isinstance(const, ast.Constant) and const.value in BUILT_IN
            }
            if names:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {', '.join(sorted(names))}")
    assert offenders == []
