"""Execution on the local and debug executors with the real lab (tiny settings) and a real MLflow
sqlite store: end to end, reruns, a launcher killed midway, retry of failed runs, cancel, dry run,
(the SLURM pieces that need no cluster are in tests/executors/test_slurm.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sweep_files import STOPPING_ARM, TINY_LAB, write_sweep

from cancelctl.errors import SpecError
from cancelctl.jobs.outcome import read_attempts
from cancelctl.launch import cancel_sweep, latest_sweep, launch_sweep, sweep_status
from cancelctl.launch.states import last_step
from cancelctl.spec.expand import load_sweep
from cancelctl.workdir import sweep_paths

ROOT = Path(__file__).resolve().parents[2]
def mlflow_runs(workdir: Path, experiment: str):
    from cancelctl.tracking import collect, default_tracking_uri

    runs, _ = collect(default_tracking_uri(workdir), experiment)
    return runs


def starts(workdir: Path, sweep: str, run_id: str) -> int:
    run_dir = sweep_paths(workdir, sweep).run_dir(run_id)
    return sum(1 for a in read_attempts(run_dir) if a["event"] == "start")


# ---------------------------------------------------------------------------------- local


def test_local_sweep_killed_midway_rerun_completes_only_what_was_missing(tmp_path, workdir):
    """The launcher (driving local runs one at a time) is SIGKILLed after the first run finished;
    a rerun submits only runs that had not started, waits for the one still running, and a third
    launch submits nothing. MLflow holds exactly one run per RunSpec with the lab's metrics."""
    path = write_sweep(tmp_path, "kill-local", arms={"grpo": {"algorithm": {"loss": "grpo"}}}, seeds=(0, 1, 2))
    sweep = load_sweep(path)
    run_ids = [r.run_id for r in sweep.runs]
    paths = sweep_paths(workdir, sweep.name)
    script = "import sys; from pathlib import Path; from cancelctl.spec.expand import load_sweep; " \
             "from cancelctl.launch import launch_sweep; launch_sweep(load_sweep(sys.argv[1]), workdir=Path(sys.argv[2]))"
    env = {**os.environ, "CANCELCTL_LOCAL_PARALLEL": "1"}
    launcher = subprocess.Popen([sys.executable, "-c", script, str(path), str(workdir)], env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not (paths.run_dir(run_ids[0]) / "result.json").exists():
            assert launcher.poll() is None, "the launcher ended before it could be killed"
            assert time.monotonic() < deadline, "first run did not finish in 120 s"
            time.sleep(0.1)
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
    before = {s.run_id: s.state for s in sweep_status(workdir, sweep.name)}
    assert before[run_ids[0]] == "completed"
    assert before[run_ids[2]] == "unsubmitted"  # queued behind one core; its driver is gone

    rerun = launch_sweep(sweep, workdir=workdir, executor="local")
    assert run_ids[0] in rerun.skipped_finished
    assert run_ids[0] not in rerun.submitted and run_ids[2] in rerun.submitted
    assert sorted(rerun.submitted + rerun.skipped_finished + rerun.skipped_running) == sorted(run_ids)
    assert [s.state for s in rerun.states] == ["completed"] * 3, [(s.name, s.state, s.reason) for s in rerun.states]
    assert rerun.ok
    for run_id in run_ids:  # nothing ran twice
        assert starts(workdir, sweep.name, run_id) == 1

    again = launch_sweep(sweep, workdir=workdir, executor="local")
    assert again.submitted == [] and sorted(again.skipped_finished) == sorted(run_ids)

    runs = mlflow_runs(workdir, sweep.name)
    assert sorted(runs["run_id"]) == sorted(run_ids)  # one MLflow run per RunSpec
    assert set(runs["state"]) == {"FINISHED"}
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    mlflow_run = client.get_run(runs["mlflow_run_id"].iloc[0])
    tags = mlflow_run.data.tags
    for key in ("sweep", "arm", "seed", "group", "G", "spec_hash", "axes", "run_id"):
        assert f"cancelctl.{key}" in tags
    assert tags["cancelctl.sweep"] == sweep.name and json.loads(tags["cancelctl.axes"]) == {}
    assert mlflow_run.data.params["lab.d_model"] == "16"
    assert "actor/pg_loss" in mlflow_run.data.metrics
    assert latest_sweep(workdir) == sweep.name


def test_local_cancel_stops_runs_and_rerun_resumes_them(tmp_path, workdir):
    """wait=False leaves a detached driver; cancel interrupts the running runs (their MLflow runs
    end KILLED) and leaves no process; a rerun submits the cancelled runs again."""
    path = write_sweep(tmp_path, "cancel-local", arms={"grpo": {"algorithm": {"loss": "grpo"}}}, steps=100000)
    sweep = load_sweep(path)
    result = launch_sweep(sweep, workdir=workdir, executor="local", wait=False)
    assert sorted(result.submitted) == sorted(r.run_id for r in sweep.runs) and result.job_ids  # the driver's pid
    deadline = time.monotonic() + 90
    while True:
        states = sweep_status(workdir, sweep.name)
        if all(s.state == "running" and (s.step or 0) > 2 for s in states):
            break
        assert time.monotonic() < deadline, [(s.name, s.state, s.step) for s in states]
        time.sleep(0.5)
    pids = [int(s.job_id) for s in states]
    cancelled = cancel_sweep(workdir, sweep.name)
    assert sorted(cancelled) == sorted(s.job_id for s in states)
    states = sweep_status(workdir, sweep.name)
    assert [s.state for s in states] == ["cancelled"] * 2, [(s.name, s.state, s.reason) for s in states]
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
    assert set(mlflow_runs(workdir, sweep.name)["state"]) == {"KILLED"}
    plan = launch_sweep(sweep, workdir=workdir, executor="local", dry_run=True)
    assert sorted(plan.submitted) == sorted(r.run_id for r in sweep.runs)  # cancelled runs go again


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.05)
    return value


def test_local_preemption_signals_checkpoint_at_the_next_step_and_lose_nothing(tmp_path, workdir):
    """USR2 (submitit's timeout/preemption signal) and SIGTERM (requeue, preemption, kill) reach the
    run mid-step, far from a periodic checkpoint. USR2: it checkpoints at the next step boundary,
    submitit's local controller requeues it and it resumes there. SIGTERM: it checkpoints and ends
    interrupted; a rerun resumes it. Every step is logged exactly once and the final metrics equal an
    uninterrupted run's."""
    steps = 150  # ~40 ms each; the signals land around steps 5 and 15
    lab = {**TINY_LAB, "checkpoint_every": 10_000}
    arms = {"grpo": {"algorithm": {"loss": "grpo"}}}
    path = write_sweep(tmp_path, "preempt", arms=arms, seeds=(0,), steps=steps, base={"lab": lab})
    sweep = load_sweep(path)
    run_dir = sweep_paths(workdir, sweep.name).run_dir(sweep.runs[0].run_id, sweep.runs[0].name)

    def attempt_pid(n: int) -> int | None:
        started = [a for a in read_attempts(run_dir) if a["event"] == "start"]
        return started[n - 1]["pid"] if len(started) >= n else None

    launch_sweep(sweep, workdir=workdir, executor="local", wait=False)
    pid = _wait_for(lambda: attempt_pid(1), 60, "the run to start")
    _wait_for(lambda: (last_step(run_dir) or 0) >= 5, 60, "step 5")
    os.kill(pid, signal.SIGUSR2)
    requeued = _wait_for(lambda: attempt_pid(2), 60, "the requeued attempt")
    assert requeued != pid
    at_usr2 = max(json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines())
    _wait_for(lambda: (last_step(run_dir) or 0) >= at_usr2 + 5, 60, "5 steps after the requeue")
    os.kill(requeued, signal.SIGTERM)
    def outcomes() -> list[str]:
        return [a["outcome"] for a in read_attempts(run_dir) if a["event"] == "end"]

    _wait_for(lambda: len(outcomes()) == 2, 60, "the second attempt to end")
    assert outcomes() == ["requeued", "terminated"]
    state = sweep_status(workdir, sweep.name)[0]
    assert state.state == "cancelled" and "SIGTERM" in (run_dir / "error.txt").read_text(), state
    assert mlflow_runs(workdir, sweep.name)["state"].tolist() == ["KILLED"]
    assert last_step(run_dir) < steps

    rerun = launch_sweep(sweep, workdir=workdir, executor="local")  # an interrupted run goes again
    assert rerun.submitted == [sweep.runs[0].run_id] and rerun.ok, [(s.state, s.reason) for s in rerun.states]
    logged = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert logged == list(range(steps + 1))  # nothing lost, nothing redone
    assert not (run_dir / "error.txt").exists() and (run_dir / "error.prev.txt").exists()

    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    reference = launch_sweep(load_sweep(path), workdir=reference_dir, executor="debug").states[0]
    timing = {"compute/hours_cum"}
    final = {k: v for k, v in rerun.states[0].final.items() if k not in timing}
    assert final == {k: v for k, v in reference.final.items() if k not in timing} and len(final) > 10


# ---------------------------------------------------------------------------------- debug


def test_debug_failed_run_is_reported_and_retry_resubmits_only_it(tmp_path, workdir):
    arms = {"ok": {"algorithm": {"loss": "grpo"}}, "broken": {"algorithm": {"loss": "grpo"}, "lab": {"fail_at_step": 2}}}
    sweep = load_sweep(write_sweep(tmp_path, "retry", arms=arms, seeds=(0,)))
    ok, broken = (r.run_id for r in sweep.runs)
    first = launch_sweep(sweep, workdir=workdir, executor="debug")
    assert sorted(first.submitted) == sorted([ok, broken])
    assert first.failed == [broken] and "injected failure" in first.errors[broken]
    error = (sweep_paths(workdir, sweep.name).run_dir(broken) / "error.txt").read_text()
    assert error.startswith("FAILED") and "Traceback" in error and "fail_at_step=2" in error
    states = {s.run_id: s for s in sweep_status(workdir, sweep.name)}
    assert states[ok].state == "completed" and states[broken].state == "failed"
    runs = mlflow_runs(workdir, sweep.name).set_index("run_id")
    assert runs.loc[ok, "state"] == "FINISHED" and runs.loc[broken, "state"] == "FAILED"

    rerun = launch_sweep(sweep, workdir=workdir, executor="debug")
    assert rerun.submitted == [] and rerun.skipped_failed == [broken] and rerun.skipped_finished == [ok]
    retry = launch_sweep(sweep, workdir=workdir, executor="debug", retry_failed=True)
    assert retry.submitted == [broken] and retry.skipped_finished == [ok]
    assert starts(workdir, sweep.name, ok) == 1 and starts(workdir, sweep.name, broken) == 2
    assert (sweep_paths(workdir, sweep.name).run_dir(broken) / "error.prev.txt").exists()
    assert len(mlflow_runs(workdir, sweep.name)) == 2


def test_a_final_status_the_store_missed_is_settled_after_the_run_ended(tmp_path, workdir):
    """A run recorded its final status but the store call failed (sqlite locked while its neighbours
    closed, a store down, SIGKILL mid-close): the sweep's settling step still sets it there."""
    from cancelctl.launch.control import settle_tracking
    from cancelctl.tracking import SyncState, default_tracking_uri
    from cancelctl.tracking.runs import client_for

    arms = {"broken": {"algorithm": {"loss": "grpo"}, "lab": {"fail_at_step": 2}}}
    sweep = load_sweep(write_sweep(tmp_path, "settle", arms=arms, seeds=(0,)))
    launch_sweep(sweep, workdir=workdir, executor="debug")
    (run,) = sweep.runs
    run_dir, uri = sweep_paths(workdir, sweep.name).run_dir(run.run_id), default_tracking_uri(workdir)
    state = SyncState.load(run_dir)
    assert state.final_status == "FAILED"
    client_for(uri).update_run(state.progress(uri).mlflow_run_id, status="RUNNING")  # the lost store call
    state.progress(uri).status = "RUNNING"
    state.save(run_dir)
    assert set(mlflow_runs(workdir, sweep.name)["state"]) == {"RUNNING"}
    settle_tracking(sweep_status(workdir, sweep.name))
    assert set(mlflow_runs(workdir, sweep.name)["state"]) == {"FAILED"}


def test_a_run_whose_process_still_closes_itself_is_left_to_it(tmp_path, workdir, monkeypatch):
    """scancel: the scheduler says CANCELLED at once while the task's process, on SIGTERM, checkpoints
    at its next step and closes its MLflow run KILLED. Settling meanwhile would race it (and could
    leave FAILED over KILLED): a run whose process holds its attempt lock is left alone, and settled
    by the first status after the process is gone (as after a SIGKILL, which frees the lock)."""
    import cancelctl.jobs.runjob as jobs
    from cancelctl.fileio import LockBusy, file_lock
    from cancelctl.launch.control import settle_tracking
    from cancelctl.tracking import SyncState, default_tracking_uri
    from cancelctl.tracking.runs import client_for
    from cancelctl.workdir import RunFolder

    held_while_training = []
    real_backend = jobs.backend_train

    def probing_backend(name):
        train = real_backend(name)

        def probed(run, run_dir, logger, cache_dir):
            with pytest.raises(LockBusy):  # another open file description: flock conflicts in-process too
                with file_lock(RunFolder(run_dir).attempt_lock, 0):
                    pass
            held_while_training.append(run.run_id)
            return train(run, run_dir, logger, cache_dir)

        return probed

    monkeypatch.setattr(jobs, "backend_train", probing_backend)
    arms = {"broken": {"algorithm": {"loss": "grpo"}, "lab": {"fail_at_step": 2}}}
    sweep = load_sweep(write_sweep(tmp_path, "closing", arms=arms, seeds=(0,)))
    launch_sweep(sweep, workdir=workdir, executor="debug")
    (run,) = sweep.runs
    assert held_while_training == [run.run_id]
    run_dir, uri = sweep_paths(workdir, sweep.name).run_dir(run.run_id), default_tracking_uri(workdir)
    state = SyncState.load(run_dir)  # as if still mid-run: nothing closed yet
    client_for(uri).update_run(state.progress(uri).mlflow_run_id, status="RUNNING")
    state.final_status, state.progress(uri).status = None, "RUNNING"
    state.save(run_dir)
    with file_lock(RunFolder(run_dir).attempt_lock, 0):  # the process, still closing
        settle_tracking(sweep_status(workdir, sweep.name))
        assert set(mlflow_runs(workdir, sweep.name)["state"]) == {"RUNNING"}
    settle_tracking(sweep_status(workdir, sweep.name))  # gone without a word: FAILED
    assert set(mlflow_runs(workdir, sweep.name)["state"]) == {"FAILED"}


def test_points_a_closed_run_left_in_its_folder_are_uploaded_by_settling(tmp_path, workdir):
    """A run whose status reached the store but whose last points did not (SIGKILLed mid-upload at
    the scheduler's kill wait): settling uploads them from metrics.jsonl."""
    from cancelctl.launch.control import settle_tracking
    from cancelctl.tracking import RunLogger, SyncState, default_tracking_uri
    from cancelctl.tracking.runs import client_for

    arms = {"broken": {"algorithm": {"loss": "grpo"}, "lab": {"fail_at_step": 2}}}
    sweep = load_sweep(write_sweep(tmp_path, "tail", arms=arms, seeds=(0,)))
    launch_sweep(sweep, workdir=workdir, executor="debug")
    (run,) = sweep.runs
    run_dir, uri = sweep_paths(workdir, sweep.name).run_dir(run.run_id), default_tracking_uri(workdir)
    mlflow_run_id = SyncState.load(run_dir).progress(uri).mlflow_run_id
    history = lambda: client_for(uri).get_metric_history(mlflow_run_id, "critic/score/mean")  # noqa: E731
    before = len(history())
    assert before >= 1
    late = RunLogger(run_dir, uri, mlflow_run_id, mark_running=False, flush_every=10**6, flush_interval_s=1e9)
    late.log(7, {"critic/score/mean": 0.25})  # written to the folder, then the process is gone
    late._jsonl.flush()
    settle_tracking(sweep_status(workdir, sweep.name))
    assert len(history()) == before + 1 and history()[-1].step == 7
    assert set(mlflow_runs(workdir, sweep.name)["state"]) == {"FAILED"}


def test_a_completed_run_whose_close_lost_the_store_race_is_settled_finished(tmp_path, workdir, monkeypatch):
    """Seven array tasks finishing at once into one sqlite store: a close that waited past the store
    lock's patience left its MLflow run SCHEDULED/RUNNING. Settling (every `status`, the end of every
    wait) sets FINISHED; a store found down is probed once per call, not once per run."""
    import cancelctl.tracking.uri as uri_mod
    from cancelctl.launch.control import settle_tracking
    from cancelctl.tracking import SyncState, default_tracking_uri
    from cancelctl.tracking.runs import client_for

    sweep = load_sweep(write_sweep(tmp_path, "race", seeds=(0,)))
    launch_sweep(sweep, workdir=workdir, executor="debug")
    uri = default_tracking_uri(workdir)
    for run in sweep.runs:
        run_dir = sweep_paths(workdir, sweep.name).run_dir(run.run_id)
        state = SyncState.load(run_dir)
        assert state.final_status == "FINISHED"
        client_for(uri).update_run(state.progress(uri).mlflow_run_id, status="SCHEDULED")  # the lost close
        state.final_status, state.progress(uri).status = None, "SCHEDULED"  # not even recorded
        state.save(run_dir)
    assert set(mlflow_runs(workdir, sweep.name)["state"]) == {"SCHEDULED"}

    probes = []
    real_probe = uri_mod.probe_store
    monkeypatch.setattr(uri_mod, "probe_store", lambda uri: probes.append(uri) or "connection refused")
    settle_tracking(sweep_status(workdir, sweep.name))  # store down: left for later, asked once
    assert probes == [uri] and set(mlflow_runs(workdir, sweep.name)["state"]) == {"SCHEDULED"}
    monkeypatch.setattr(uri_mod, "probe_store", real_probe)
    settle_tracking(sweep_status(workdir, sweep.name))
    assert set(mlflow_runs(workdir, sweep.name)["state"]) == {"FINISHED"}
    assert [s.state for s in sweep_status(workdir, sweep.name)] == ["completed"] * 2


def test_report_defaults_to_the_sweep_files_baseline(tmp_path, workdir):
    from cancelctl.errors import SpecError
    from cancelctl.report.options import ReportOptions
    from cancelctl.report.sweep_report import report_sweep
    from cancelctl.stats.options import ComparisonOptions

    with_baseline = load_sweep(write_sweep(tmp_path, "with-baseline", seeds=(0,), baseline="gspo"))
    launch_sweep(with_baseline, workdir=workdir, executor="debug")
    report = report_sweep(workdir, None, ReportOptions(compare=ComparisonOptions(allow_unmatched=True)), out=tmp_path / "report")
    assert report.baseline == "gspo" and report.sweep == "with-baseline"

    without = load_sweep(write_sweep(tmp_path, "no-baseline", seeds=(0,)))
    launch_sweep(without, workdir=workdir, executor="debug")
    with pytest.raises(SpecError, match=r"names no baseline arm: pass --baseline ARM \(arms: grpo, gspo\)"):
        report_sweep(workdir, "no-baseline", out=tmp_path / "report2")
    assert report_sweep(workdir, "no-baseline", ReportOptions(baseline="grpo"), out=tmp_path / "report2").baseline == "grpo"


def test_runs_finished_in_a_shared_store_are_adopted_not_rerun(tmp_path, template_db):
    """Two work dirs, one MLflow store (a shared tracking server): the second launch of the same sweep
    runs only what the store does not hold FINISHED; a FAILED run there is run again."""
    store = tmp_path / "shared.db"
    shutil.copy(template_db, store)
    arms = {"grpo": {"algorithm": {"loss": "grpo"}}, "broken": {"algorithm": {"loss": "gspo"}, "lab": {"fail_at_step": 2}}}
    path = write_sweep(tmp_path, "shared", arms=arms, seeds=(0, 1), base={"tracking": {"uri": f"sqlite:///{store}"}})
    first_dir, second_dir = tmp_path / "alice", tmp_path / "bob"
    first = launch_sweep(load_sweep(path), workdir=first_dir, executor="debug")
    broken = sorted(r.run_id for r in load_sweep(path).runs if r.arm == "broken")
    assert sorted(first.failed) == broken

    def points() -> int:
        from mlflow import MlflowClient

        client = MlflowClient(f"sqlite:///{store}")
        runs = client.search_runs([client.get_experiment_by_name("shared").experiment_id])
        return sum(len(client.get_metric_history(r.info.run_id, "actor/pg_loss")) for r in runs)

    before = points()
    second = launch_sweep(load_sweep(path), workdir=second_dir, executor="debug")
    finished = sorted(r.run_id for r in load_sweep(path).runs if r.arm == "grpo")
    assert sorted(second.skipped_finished) == finished and sorted(second.submitted) == broken
    assert any("adopted" in w for w in second.warnings)
    states = {s.run_id: s for s in sweep_status(second_dir, "shared")}
    for run_id in finished:
        assert states[run_id].state == "completed" and states[run_id].final["actor/pg_loss"] is not None
        assert starts(second_dir, "shared", run_id) == 0 and states[run_id].reason.startswith("adopted: FINISHED in sqlite")
        assert states[run_id].final == {s.run_id: s for s in first.states}[run_id].final
    assert points() == before + 2  # only the 2 broken runs logged again (1 step each before failing)


def test_dry_run_submits_and_writes_nothing(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path, "dry"))
    workdir = tmp_path / "never"
    result = launch_sweep(sweep, workdir=workdir, dry_run=True)
    assert result.dry_run and result.executor == "local"
    assert sorted(result.submitted) == sorted(r.run_id for r in sweep.runs)
    assert [s.state for s in result.states] == ["unsubmitted"] * 4
    assert not workdir.exists()


def test_mixed_executors_need_an_override(tmp_path):
    arms = {"a": {"executor": "local"}, "b": {"executor": "debug", "algorithm": {"lr": 2.0e-3}}}
    sweep = load_sweep(write_sweep(tmp_path, "mixed", arms=arms, seeds=(0,)))
    with pytest.raises(SpecError, match="several executors"):
        launch_sweep(sweep, workdir=tmp_path / "w", dry_run=True)
    assert launch_sweep(sweep, workdir=tmp_path / "w", dry_run=True, executor="debug").executor == "debug"


def test_status_of_unknown_workdir_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no sweep"):
        sweep_status(tmp_path)
    assert latest_sweep(tmp_path) is None


def test_launch_package_stays_importable_without_slurm_tools():
    code = "import cancelctl.launch, cancelctl.jobs.runjob, cancelctl.jobs.entry; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env={**os.environ, "PATH": "/nonexistent"})
    assert out.stdout.strip() == "ok", out.stderr


# ---------------------------------------------------------------------------------- monitor stops



def test_a_run_stopped_by_a_rule_is_stopped_kept_and_only_retried_when_asked(tmp_path, workdir):
    from cancelctl.tracking.tags import STOPPED_AT_STEP_TAG, STOPPED_BY_TAG

    arms = {"grpo": {"algorithm": {"loss": "grpo"}}, "gspo": STOPPING_ARM}
    claims = [  # the claims see the stopped run: its curve up to the stop, its stop as an outcome
        {"id": "entropy-falls", "source": "t", "statement": "s", "metric": {"kind": "mean", "key": "actor/entropy"},
         "direction": "lower", "arm": "gspo", "versus": "grpo"},
        {"id": "collapses", "source": "t", "statement": "s",
         "metric": {"kind": "collapse_rate", "rule": "entropy_collapse", "event": "stop"},
         "direction": "higher", "arm": "gspo", "versus": "grpo"},
    ]
    sweep = load_sweep(write_sweep(tmp_path, "stops", arms=arms, seeds=(0,), steps=6, claims=claims),
                       allow_unmatched=True)
    ok, stopped = (r.run_id for r in sweep.runs)
    first = launch_sweep(sweep, workdir=workdir, executor="debug")
    assert first.ok and sorted(first.submitted) == sorted([ok, stopped])
    states = {s.run_id: s for s in sweep_status(workdir, sweep.name)}
    assert states[ok].state == "completed" and states[ok].step == 6
    assert states[stopped].state == "stopped" and states[stopped].reason == "entropy_collapse at step 2"
    assert states[stopped].step == 2 and states[stopped].final  # result.json kept its metrics
    run_dir = sweep_paths(workdir, sweep.name).run_dir(stopped)
    result = json.loads((run_dir / "result.json").read_text())
    assert result["stopped"]["rule"] == "entropy_collapse" and result["stopped"]["step"] == 2
    assert (run_dir / "checkpoint.pt").exists() and (run_dir / "stopped.json").exists()
    assert read_attempts(run_dir)[-1]["outcome"] == "stopped"
    runs = mlflow_runs(workdir, sweep.name).set_index("run_id")
    assert runs.loc[stopped, "state"] == "FINISHED" and runs.loc[ok, "state"] == "FINISHED"
    from cancelctl.tracking import default_tracking_uri
    from cancelctl.tracking.runs import client_for

    client = client_for(default_tracking_uri(workdir))
    tags = {rid: client.get_run(runs.loc[rid, "mlflow_run_id"]).data.tags for rid in (ok, stopped)}
    assert tags[stopped][STOPPED_BY_TAG] == "entropy_collapse" and tags[stopped][STOPPED_AT_STEP_TAG] == "2"
    assert STOPPED_BY_TAG not in tags[ok]
    artifacts = [a.path for a in client.list_artifacts(runs.loc[stopped, "mlflow_run_id"])]
    assert artifacts == ["alerts.jsonl"]

    # the report lists the alert and leaves the stopped run out of its tables unless asked
    from cancelctl.report.options import ReportOptions
    from cancelctl.report.sweep_report import report_sweep
    from cancelctl.stats.options import ComparisonOptions

    options = ReportOptions(baseline="grpo", compare=ComparisonOptions(allow_unmatched=True))
    report = report_sweep(workdir, sweep.name, options, out=tmp_path / "report")
    tables = {t.name: t for t in report.tables}
    alerts = tables["alerts"].data
    assert list(zip(alerts["run_id"], alerts["rule"], alerts["step"], alerts["action"])) == [
        (stopped, "entropy_collapse", 2, "stop")]
    assert any("left out of the compute-matched tables" in n and "gspo-s0 (entropy_collapse at step 2)" in n
               for n in report.notes)
    used = {str(r) for t in report.tables if t.name != "alerts" and "run_id" in t.data for r in t.data["run_id"]}
    assert stopped not in used and ok in used
    assert "## Alerts" in (tmp_path / "report" / "report.md").read_text()
    verdicts = tables["claims"].data.set_index("claim_id")  # one seed: no verdict, but the stopped run is in
    assert verdicts.loc["entropy-falls", "n_seeds"] == 1
    assert "1 of 1 run(s) of 'gspo' stopped by a monitor rule, used up to the stop: seed 0 (entropy_collapse at step 2)" \
        in verdicts.loc["entropy-falls", "notes"]
    assert (verdicts.loc["collapses", "arm_mean"], verdicts.loc["collapses", "versus_mean"]) == (1.0, 0.0)
    included = report_sweep(workdir, sweep.name, dataclasses.replace(options, include_stopped=True), out=tmp_path / "report2")
    used = {str(r) for t in included.tables if t.name != "alerts" and "run_id" in t.data for r in t.data["run_id"]}
    assert stopped in used and any("included" in n for n in included.notes)

    rerun = launch_sweep(sweep, workdir=workdir, executor="debug", retry_failed=True)
    assert rerun.submitted == [] and rerun.skipped_stopped == [stopped] and rerun.skipped_finished == [ok]
    assert starts(workdir, sweep.name, stopped) == 1

    retry = launch_sweep(sweep, workdir=workdir, executor="debug", retry_stopped=True)
    assert retry.submitted == [stopped] and starts(workdir, sweep.name, stopped) == 2
    assert (run_dir / "stopped.prev.json").exists()
    # resumed from the kept checkpoint at step 2; the rule is still firing, so no new stop: it completes
    state = {s.run_id: s for s in sweep_status(workdir, sweep.name)}[stopped]
    assert state.state == "completed" and state.step == 6 and not (run_dir / "stopped.json").exists()
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps.count(2) == 1 and max(steps) == 6  # no step before the checkpoint was trained again


# ---------------------------------------------------------------------------------- interruptions


def test_runs_of_an_earlier_spec_version_are_stale_not_failures(tmp_path, workdir):
    """A run that failed under an earlier version of the sweep file (no longer planned) does not keep
    `sweep` failing; status counts only the planned runs and lists the old one as stale."""
    from typer.testing import CliRunner

    from cancelctl.cli import app

    arms = {"ok": {"algorithm": {"loss": "grpo"}}, "b": {"algorithm": {"loss": "grpo"}, "lab": {"fail_at_step": 1}}}
    first = launch_sweep(load_sweep(write_sweep(tmp_path, "edited", arms=arms, seeds=(0,), steps=2)), workdir=workdir,
                         executor="debug")
    assert len(first.failed) == 1
    arms["b"] = {"algorithm": {"loss": "grpo", "lr": 2.0e-3}}  # the arm fixed: a new run id
    edited = load_sweep(write_sweep(tmp_path, "edited", arms=arms, seeds=(0,), steps=2))
    second = launch_sweep(edited, workdir=workdir, executor="debug")
    assert second.ok and second.failed == [], second.errors
    assert any("no longer planned" in w and "b-s0" in w for w in second.warnings), second.warnings
    assert sorted(s.run_id for s in sweep_status(workdir, "edited")) == sorted(r.run_id for r in edited.runs)
    stale = [s for s in sweep_status(workdir, "edited", include_stale=True) if s.stale]
    assert [(s.run_id, s.state) for s in stale] == [(first.failed[0], "failed")]
    shown = CliRunner().invoke(app, ["status", "edited", "-w", str(workdir)])
    assert shown.exit_code == 0 and "edited: 2 completed" in shown.output and "stale: 1 run(s)" in shown.output, shown.output


def test_local_runs_honour_the_specs_array_parallelism(tmp_path, workdir, monkeypatch):
    """`cluster.array_parallelism: 1` (a run that does not fit in memory twice) holds the local
    executor to one run at a time even where the cores (here CANCELCTL_LOCAL_PARALLEL=3) allow three."""
    monkeypatch.setenv("CANCELCTL_LOCAL_PARALLEL", "3")
    path = write_sweep(tmp_path, "one-at-a-time", seeds=(0, 1, 2), base={"cluster": {"array_parallelism": 1}},
                       arms={"grpo": {"algorithm": {"loss": "grpo"}}})
    sweep = load_sweep(path)
    launched = launch_sweep(sweep, workdir=workdir, wait=True)
    assert sorted(launched.submitted) == sorted(r.run_id for r in sweep.runs)
    paths = sweep_paths(workdir, sweep.name)
    spans = []
    for run in sweep.runs:
        events = read_attempts(paths.run_dir(run.run_id))
        start = next(e["started_at"] for e in events if e["event"] == "start")
        end = next(e["ts"] for e in events if e["event"] == "end")
        spans.append((start, end))
    spans.sort()
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:])), spans  # never two at once


def test_a_local_run_killed_from_outside_is_interrupted_not_failed(tmp_path):
    """No result and no error after its attempt started: SIGKILL, a closed terminal or the OOM killer
    ended the process. A plain rerun resumes it (cancelled), it is no run failure."""
    from cancelctl.executors.local import LocalExecutor
    from cancelctl.manifest import Manifest, RunEntry
    from cancelctl.runstate import RunState

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    manifest = Manifest(sweep="s", executor="local", runs={"r1": RunEntry("a-s0", "a", 0)})
    sub = manifest.add_submission("local", ["r1"], state="submitted", job_id="999999999", pid_start=1)
    (run_dir / "attempts.jsonl").write_text(json.dumps({"event": "start", "token": sub.token, "pid": 999999999}) + "\n")
    state = RunState("r1", "a-s0", "a", 0, "unsubmitted", run_dir=run_dir)
    job = LocalExecutor().handle(sweep_paths(tmp_path, "s"), sub, 0, {}, run_dir)
    assert job.state is None  # its controller and its run's process are gone
    classified = job.classify(state, manifest.runs["r1"], time.time())
    assert classified.state == "cancelled" and "killed" in classified.reason and "rerun resumes" in classified.reason
    assert state.state == "unsubmitted" and state.reason == ""  # a new state: the one given is left as it was


def test_a_closed_terminal_interrupts_the_sweep_and_a_plain_rerun_completes_it(tmp_path, workdir):
    """SIGHUP to `cancelctl sweep`'s process group (the terminal closed) mid-run: one line saying how
    to resume, no run left failed, and a plain rerun completes every run."""
    path = write_sweep(tmp_path, "hangup", arms={"grpo": {"algorithm": {"loss": "grpo"}}}, steps=30)
    sweep = load_sweep(path)
    paths = sweep_paths(workdir, sweep.name)
    cli = subprocess.Popen([sys.executable, "-m", "cancelctl.cli", "sweep", str(path), "-w", str(workdir)],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                           env={**os.environ, "CANCELCTL_LOCAL_PARALLEL": "2"})
    try:
        _wait_for(lambda: any((last_step(paths.run_dir(r.run_id)) or 0) >= 2 for r in sweep.runs), 150, "a run at step 2")
        os.killpg(cli.pid, signal.SIGHUP)
        out, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    assert cli.returncode == 128 + signal.SIGHUP, (out, err)
    assert "interrupted (SIGHUP)" in err and f"resume with: cancelctl sweep {path} -w {workdir}" in err
    assert "Traceback" not in err
    def ended():
        states = sweep_status(workdir, sweep.name)
        return None if any(s.active for s in states) else states

    states = _wait_for(ended, 60, "runs to end")
    assert "failed" not in {s.state for s in states}, [(s.name, s.state, s.reason) for s in states]
    rerun = launch_sweep(sweep, workdir=workdir, executor="local")
    assert [s.state for s in rerun.states] == ["completed"] * 2 and rerun.ok


# ---------------------------------------------------------------------------------- a full or read-only disk


def test_a_full_disk_fails_the_run_with_its_cause_and_a_retry_logs_no_step_twice(tmp_path, workdir, monkeypatch):
    """ENOSPC in the checkpoint write after steps 5-6 were logged (and in error.txt's own write): the
    run fails with "No space left on device: <path>" as its reason; once space returns,
    --retry-failed resumes from step 4 and metrics.jsonl and MLflow hold every step once."""
    import errno
    import pathlib

    from mlflow import MlflowClient

    from cancelctl.backends.lab import checkpoint
    from cancelctl.tracking import default_tracking_uri

    base = {"lab": {**TINY_LAB, "checkpoint_every": 4}}
    sweep = load_sweep(write_sweep(tmp_path, "full", arms={"grpo": {"algorithm": {"loss": "grpo"}}}, seeds=(0,),
                                   steps=6, base=base))
    (run,) = sweep.runs
    save, write_text = checkpoint.save, pathlib.Path.write_text

    def full_disk_save(run_dir, state):
        if state["progress"]["step"] >= 6:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(run_dir) / "checkpoint.pt"))
        return save(run_dir, state)

    def full_disk_write_text(self, *args, **kwargs):
        if self.name == "error.txt":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save", full_disk_save)
    monkeypatch.setattr(pathlib.Path, "write_text", full_disk_write_text)
    first = launch_sweep(sweep, workdir=workdir, executor="debug")
    run_dir = sweep_paths(workdir, sweep.name).run_dir(run.run_id)
    cause = f"No space left on device: {run_dir / 'checkpoint.pt'}"
    assert first.failed == [run.run_id] and cause in first.errors[run.run_id], first.errors
    (state,) = sweep_status(workdir, sweep.name)
    assert state.state == "failed" and cause in state.reason and "killed" not in state.reason

    monkeypatch.undo()  # space returns
    retry = launch_sweep(sweep, workdir=workdir, executor="debug", retry_failed=True)
    assert retry.ok and [s.state for s in retry.states] == ["completed"]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sorted(steps) == list(range(7)), steps
    record = json.loads((run_dir / "run.json").read_text())
    history = MlflowClient(default_tracking_uri(workdir)).get_metric_history(record["mlflow_run_id"], "actor/pg_loss")
    assert sorted(m.step for m in history) == [1, 2, 3, 4, 5, 6]


def test_a_read_only_work_dir_is_one_screen_naming_path_and_cause(tmp_path, monkeypatch):
    """EROFS (as root, chmod stops nothing: the error is injected) on the first write of a sweep."""
    import errno
    import pathlib

    from typer.testing import CliRunner

    from cancelctl.cli import app

    path = write_sweep(tmp_path, "ro", arms={"grpo": {"algorithm": {"loss": "grpo"}}}, seeds=(0,), steps=1)
    workdir = tmp_path / "ro-work"
    mkdir = pathlib.Path.mkdir

    def read_only_mkdir(self, *args, **kwargs):
        if str(self).startswith(str(workdir)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", read_only_mkdir)
    result = CliRunner().invoke(app, ["sweep", str(path), "-w", str(workdir), "--executor", "debug"])
    assert result.exit_code == 1, result.output
    assert f"Read-only file system: {workdir}" in result.output and "--workdir" in result.output
    assert "Traceback" not in result.output and len(result.output.splitlines()) <= 4


# ---------------------------------------------------------------------------------- cancel while starting


def _cancel_from_another_thread(workdir: Path, sweep: str) -> list[str]:
    """`cancelctl cancel` as a second command would issue it while `sweep` is busy starting."""
    import threading

    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(cancel_sweep(workdir, sweep)))
    thread.start()
    thread.join(timeout=90)
    assert not thread.is_alive() and outcome, "cancel did not return"
    return outcome[0]


def _sweep_cli(path: Path, workdir: Path):
    from typer.testing import CliRunner

    from cancelctl.cli import app

    return CliRunner().invoke(app, ["sweep", str(path), "-w", str(workdir), "--executor", "local"])


def test_cancel_in_warm_start_leaves_runs_cancelled_and_sweep_exits_3(tmp_path, workdir, monkeypatch):
    """A cancel between submission and the driver starting the first run (the warm start): the
    runs are `cancelled`, not `unsubmitted`, and `sweep` exits 3 so `sweep && report` stops; a
    cancel while the launch is still planning (before it holds the submit lock) stops it too."""
    from cancelctl.executors.driver import DrivenExecutor
    from cancelctl.launch import launcher

    path = write_sweep(tmp_path, "cancel-start", arms={"grpo": {"algorithm": {"loss": "grpo"}}})
    sweep = load_sweep(path)
    start = DrivenExecutor.start

    def start_after_a_cancel(self, paths, runs, **kwargs):
        _cancel_from_another_thread(workdir, sweep.name)
        return start(self, paths, runs, **kwargs)

    monkeypatch.setattr(DrivenExecutor, "start", start_after_a_cancel)
    result = _sweep_cli(path, workdir)
    assert result.exit_code == 3, result.output
    states = sweep_status(workdir, sweep.name)
    assert [s.state for s in states] == ["cancelled"] * 2, [(s.name, s.state, s.reason) for s in states]
    assert all(starts(workdir, sweep.name, s.run_id) == 0 for s in states)
    assert "2 run(s) cancelled" in result.output
    monkeypatch.setattr(DrivenExecutor, "start", start)

    refuse = launcher.refuse_unlaunchable

    def refuse_after_a_cancel(planned):
        _cancel_from_another_thread(workdir, sweep.name)
        return refuse(planned)

    monkeypatch.setattr(launcher, "refuse_unlaunchable", refuse_after_a_cancel)
    result = _sweep_cli(path, workdir)
    assert result.exit_code == 3, result.output
    states = sweep_status(workdir, sweep.name)
    assert [s.state for s in states] == ["cancelled"] * 2, [(s.name, s.state, s.reason) for s in states]
    assert all(starts(workdir, sweep.name, s.run_id) == 0 for s in states)
    monkeypatch.setattr(launcher, "refuse_unlaunchable", refuse)
    plan = launch_sweep(sweep, workdir=workdir, executor="local", dry_run=True)
    assert sorted(plan.submitted) == sorted(r.run_id for r in sweep.runs)  # a plain rerun submits them again


def test_a_completed_run_whose_folder_was_deleted_says_so(tmp_path, workdir):
    sweep = load_sweep(write_sweep(tmp_path, "gone", arms={"grpo": {"algorithm": {"loss": "grpo"}}}, seeds=(0,), steps=2))
    (state,) = launch_sweep(sweep, workdir=workdir, executor="debug").states
    shutil.rmtree(state.run_dir)
    (after,) = sweep_status(workdir, sweep.name)
    assert after.state == "unsubmitted" and "run folder" in after.reason and "is gone" in after.reason, after.reason
    assert "ended before the run started" not in after.reason
