"""executor: slurm against a real cluster (.ci/slurm-up.sh: slurmctld + slurmd + slurmdbd, MaxArraySize 8).

Job counts come from the scheduler itself (sacct + squeue, array tasks mapped to runs through the
job comment), not from cancelctl's manifest. Lab runs are tiny; long runs are cancelled once
they have served their purpose.
"""

from __future__ import annotations

from figures import record_figure
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import sweep_files
from polling import wait_until
from slurm_gate import cluster_cpus, cluster_problem
from sweep_files import TINY_LAB

from cancelctl.executors import slurm_commands as slurm_mod
from cancelctl.executors import slurm_states
from cancelctl.jobs.outcome import read_error
from cancelctl.launch import cancel_sweep, launch_sweep, sweep_status, wait_for_sweep
from cancelctl.spec.expand import load_sweep
from cancelctl.workdir import sweep_paths

_PROBLEM = cluster_problem()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or "")]

LOSSES = ["grpo", "gspo", "dapo", "grpo_symclip", "dfpo"]
LONG = 1_000_000  # steps of a run that is only ever cancelled


def write_sweep(directory: Path, prefix: str, *, arms: dict, seeds=(0,), steps=4, lab=None) -> Path:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"  # the accounting DB outlives test runs
    base = {"executor": "slurm", "lab": {**TINY_LAB, **(lab or {})}, "cluster": {"time_min": 30, "cpus_per_task": 1}}
    return sweep_files.write_sweep(directory, name, arms=arms, seeds=seeds, steps=steps, base=base)


def loss_arms(n: int) -> dict:
    arms = {}
    for i in range(n):
        loss = LOSSES[i % len(LOSSES)]
        arms[f"{loss}-{i}"] = {"algorithm": {"loss": loss, "lr": 1.0e-3 * (1 + i)}}
    return arms


@pytest.fixture
def launched():
    """(workdir, sweep) pairs to cancel at teardown, so a failed test leaves no job behind."""
    pairs: list[tuple[Path, str]] = []
    yield pairs
    for workdir, sweep in pairs:
        if sweep_paths(workdir, sweep).store.exists() and any(s.active for s in sweep_status(workdir, sweep)):
            cancel_sweep(workdir, sweep)


def make_workdir(tmp_path: Path, template_db: Path, name: str = "work") -> Path:
    path = tmp_path / name
    path.mkdir()
    shutil.copy(template_db, path / "mlflow.db")
    return path


def scheduler_tasks(sweep: str, since: float) -> dict[str, list[str]]:
    """run id -> the scheduler's task ids carrying it, for every job of `sweep` since `since`:
    sacct (accounting) and squeue (live) joined; the comment lists run ids in array order."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    acct = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-S", start, "-E", "now", "-o", "JobID,JobName,Comment"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout
    live = subprocess.run(
        ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%j|%k"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    tasks: dict[tuple[str, int], str] = {}
    for line in (acct + live).splitlines():
        job_id, name, comment = (line.split("|") + ["", ""])[:3]
        if not name.startswith(f"cancelctl:{sweep}:"):
            continue
        runs = comment.split("runs=", 1)[1].split(",") if "runs=" in comment else []
        for array_id, index in slurm_states.expand_job_id(job_id):
            tasks[(array_id, index)] = runs[index] if index < len(runs) else f"?{line!r}"  # shows in the assert
    out: dict[str, list[str]] = {}
    for (array_id, index), run_id in sorted(tasks.items()):
        out.setdefault(run_id, []).append(f"{array_id}_{index}")
    return out


def mlflow_states(workdir: Path, sweep: str) -> dict[str, str]:
    from cancelctl.tracking import collect, default_tracking_uri

    runs, _ = collect(default_tracking_uri(workdir), sweep)
    return dict(zip(runs["run_id"], runs["state"]))


# ---------------------------------------------------------------------------------- tests


def test_sweep_goes_out_as_one_array_lands_in_mlflow_and_retry_resubmits_only_the_failed_run(tmp_path, template_db, launched):
    since = time.time()
    arms = loss_arms(6)
    arms["broken"] = {"algorithm": {"loss": "grpo"}, "lab": {"fail_at_step": 2}}
    sweep = load_sweep(write_sweep(tmp_path, "array", arms=arms))
    workdir = make_workdir(tmp_path, template_db)
    launched.append((workdir, sweep.name))
    broken = next(r.run_id for r in sweep.runs if r.arm == "broken")

    result = launch_sweep(sweep, workdir=workdir)  # slurm: returns after submission
    assert len(result.job_ids) == 1 and len(result.arrays) == 1 and len(result.submitted) == 7
    states = wait_for_sweep(workdir, sweep.name, poll_s=2, timeout_s=300)
    by_id = {s.run_id: s for s in states}
    assert by_id[broken].state == "failed" and "injected failure" in by_id[broken].reason
    assert sorted(s.state for s in states) == ["completed"] * 6 + ["failed"]
    tasks = scheduler_tasks(sweep.name, since)
    assert sorted(tasks) == sorted(r.run_id for r in sweep.runs)
    assert {t[0].split("_")[0] for t in tasks.values()} == {result.job_ids[0]}  # one sbatch
    assert all(len(t) == 1 for t in tasks.values())
    mlflow = mlflow_states(workdir, sweep.name)
    assert len(mlflow) == 7 and mlflow[broken] == "FAILED"
    assert sorted(mlflow.values()) == ["FAILED"] + ["FINISHED"] * 6

    again = launch_sweep(sweep, workdir=workdir)
    assert again.submitted == [] and again.skipped_failed == [broken] and len(again.skipped_finished) == 6
    retry = launch_sweep(sweep, workdir=workdir, retry_failed=True)
    assert retry.submitted == [broken] and len(retry.job_ids) == 1 and retry.job_ids != result.job_ids
    final = {s.run_id: s for s in wait_for_sweep(workdir, sweep.name, poll_s=2, timeout_s=180)}
    assert final[broken].state == "failed" and final[broken].attempts == 2
    tasks = scheduler_tasks(sweep.name, since)
    assert len(tasks[broken]) == 2 and all(len(t) == 1 for run_id, t in tasks.items() if run_id != broken)

    cli = Path(sys.executable).with_name("cancelctl")
    report = subprocess.run(
        [str(cli), "report", sweep.name, "--baseline", "grpo-0", "--workdir", str(workdir), "--out", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=300,
    )
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]


def test_scancelled_task_is_failed_within_30s_and_cancel_leaves_nothing_running(tmp_path, template_db, launched):
    if cluster_cpus() < 4:  # four 1-CPU tasks must train at once (a victim, a killed one, two that go on)
        pytest.skip(f"needs 4 CPUs for 4 concurrent tasks; the cluster offers {cluster_cpus()}")
    sweep = load_sweep(write_sweep(tmp_path, "cancel", arms=loss_arms(2), seeds=(0, 1), steps=LONG))
    workdir = make_workdir(tmp_path, template_db)
    launched.append((workdir, sweep.name))
    result = launch_sweep(sweep, workdir=workdir)
    array = result.job_ids[0]

    def all_training():
        states = sweep_status(workdir, sweep.name)
        return states if all(s.state == "running" and (s.step or 0) >= 1 for s in states) else None

    states = wait_until(all_training, 180, "every run training")
    victim = states[1]
    started = time.monotonic()
    subprocess.run(["scancel", victim.job_id], check=True, timeout=30)
    failed = wait_until(
        lambda: next((s for s in sweep_status(workdir, sweep.name) if s.run_id == victim.run_id and s.state == "failed"), None),
        30, f"{victim.job_id} to show failed", poll_s=0.5,
    )
    elapsed = time.monotonic() - started
    record_figure(f"scancel {victim.job_id} -> status FAILED after {elapsed:.1f} s ({failed.reason})")
    assert "CANCELLED" in failed.reason and "outside cancelctl" in failed.reason and failed.cancel_requested
    # a task SIGKILLed (as by the OOM killer) cannot close its MLflow run: `status` does, FAILED
    killed = states[2]
    job = json.loads((sweep_paths(workdir, sweep.name).run_dir(killed.run_id) / "job.json").read_text())
    os.kill(job["pid"], signal.SIGKILL)  # single-node cluster: the task's process is on this machine
    wait_until(
        lambda: next((s for s in sweep_status(workdir, sweep.name) if s.run_id == killed.run_id and s.state == "failed"), None),
        30, f"{killed.job_id} to show failed", poll_s=0.5,
    )
    others = [s for s in sweep_status(workdir, sweep.name) if s.run_id not in (victim.run_id, killed.run_id)]
    assert [s.state for s in others] == ["running"] * 2

    cancelled = cancel_sweep(workdir, sweep.name)
    assert cancelled == [array]
    live = subprocess.run(["squeue", "-h", "-j", array, "-t", "PD,R,CG,S,CF,RQ"], capture_output=True, text=True, timeout=30)
    assert live.stdout.strip() == ""
    final = {s.run_id: s.state for s in sweep_status(workdir, sweep.name)}
    assert final[victim.run_id] == final[killed.run_id] == "failed"
    assert sorted(final.values()) == ["cancelled"] * 2 + ["failed"] * 2
    mlflow = mlflow_states(workdir, sweep.name)
    # scancel's SIGTERM: the victim checkpointed at its next step and closed its own MLflow run KILLED
    assert mlflow[killed.run_id] == "FAILED" and sorted(mlflow.values()) == ["FAILED"] + ["KILLED"] * 3
    assert read_error(sweep_paths(workdir, sweep.name).run_dir(victim.run_id))[0] == "INTERRUPTED"


# A launcher killed between the intent and sbatch, a requeue (scontrol, and submitit's USR2) resumed to
# the same final metrics with every step once: tests/slurm/test_chaos_soak.py, among its faults.
@pytest.mark.parametrize("pause", [slurm_mod.PAUSE_AFTER_SBATCH])
def test_launcher_killed_during_submission_then_rerun_one_job_per_run(tmp_path, template_db, launched, pause):
    since = time.time()
    path = write_sweep(tmp_path, "crash", arms=loss_arms(3), steps=LONG)
    sweep = load_sweep(path)
    workdir = make_workdir(tmp_path, template_db)
    launched.append((workdir, sweep.name))
    store = sweep_paths(workdir, sweep.name).store
    code = "import sys; from pathlib import Path; from cancelctl.spec.expand import load_sweep; " \
           "from cancelctl.launch import launch_sweep; launch_sweep(load_sweep(sys.argv[1]), workdir=Path(sys.argv[2]))"
    launcher = subprocess.Popen([sys.executable, "-c", code, str(path), str(workdir)], env={**os.environ, pause: "120"})
    try:
        def intent():
            if not store.exists():
                return None
            subs = store.load().intents()
            return subs[0] if subs else None

        sub = wait_until(intent, 120, "the submission intent")
        if pause == slurm_mod.PAUSE_AFTER_SBATCH:  # killed after sbatch, before the job id is recorded
            wait_until(lambda: slurm_states.find_by_name([sub.job_name], since), 60, "the job in the queue")
        else:
            time.sleep(0.5)  # killed between recording the intent and calling sbatch
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
    assert store.load().intents(), "the killed launcher should have left its intent behind"

    rerun = launch_sweep(sweep, workdir=workdir)
    run_ids = sorted(r.run_id for r in sweep.runs)
    if pause == slurm_mod.PAUSE_AFTER_SBATCH:  # the job was found by its name and adopted
        assert rerun.submitted == [] and sorted(rerun.skipped_running) == run_ids
    else:  # the job never reached SLURM: submitted now, once
        assert sorted(rerun.submitted) == run_ids and len(rerun.job_ids) == 1
    assert not store.load().intents()
    tasks = wait_until(lambda: scheduler_tasks(sweep.name, since) or None, 30, "the sweep's jobs in SLURM")
    assert sorted(tasks) == run_ids and all(len(t) == 1 for t in tasks.values()), tasks
    cancel_sweep(workdir, sweep.name)


def test_sweep_larger_than_max_array_size_is_split(tmp_path, template_db, launched):
    size = slurm_mod.max_array_size()
    if size > 16:
        pytest.skip(f"MaxArraySize is {size}; the CI cluster (.ci/slurm-up.sh) sets 8")
    since = time.time()
    n = size + 2
    sweep = load_sweep(write_sweep(tmp_path, "split", arms={"grpo": {}}, seeds=range(n), steps=LONG))
    workdir = make_workdir(tmp_path, template_db)
    launched.append((workdir, sweep.name))
    result = launch_sweep(sweep, workdir=workdir)
    assert len(result.job_ids) == math.ceil(n / size) >= 2
    assert [len(a.run_ids) for a in result.arrays] == [size, n - size]
    tasks = wait_until(lambda: (t := scheduler_tasks(sweep.name, since)) and len(t) == n and t, 30, "all tasks in SLURM")
    arrays = {}
    for task_ids in tasks.values():
        assert len(task_ids) == 1
        arrays.setdefault(task_ids[0].split("_")[0], []).append(task_ids[0])
    assert sorted(len(v) for v in arrays.values()) == sorted([size, n - size])
    assert sorted(cancel_sweep(workdir, sweep.name)) == sorted(result.job_ids)
