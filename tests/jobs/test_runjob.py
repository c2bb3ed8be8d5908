"""How a job's attempt is recorded when submitit's time-limit handler ends it (SystemExit after its
requeue): in attempts.jsonl, whether USR2 came mid-training or while the store was still connecting,
and before anything that can wait on the store (SLURM kills the requeued step after its KillWait)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_files import write_sweep

from cancelctl.jobs import runjob
from cancelctl.jobs.outcome import read_attempts
from cancelctl.launch import launch_sweep
from cancelctl.spec.expand import load_sweep
from cancelctl.workdir import sweep_paths


def finished_run(tmp_path: Path, workdir: Path) -> tuple[Path, str]:
    """A one-run lab sweep run to the end in process: its run folder and its submission's token."""
    sweep = load_sweep(write_sweep(tmp_path, "attempts", arms={"grpo": {"algorithm": {"loss": "grpo"}}}, seeds=(0,), steps=1))
    launch_sweep(sweep, workdir=workdir, executor="debug")
    run_dir = sweep_paths(workdir, sweep.name).run_dir(sweep.runs[0].run_id)
    return run_dir, json.loads((run_dir / "job.json").read_text())["token"]


def last_end(run_dir: Path) -> dict:
    return [a for a in read_attempts(run_dir) if a["event"] == "end"][-1]


def submitit_requeues(*args, **kwargs):
    raise SystemExit(-1)  # what submitit's USR2 handler ends the job with, after `scontrol requeue`


def test_usr2_while_the_store_connects_still_ends_the_attempt_as_requeued(tmp_path, workdir, monkeypatch):
    import cancelctl.tracking

    run_dir, token = finished_run(tmp_path, workdir)
    starts = sum(a["event"] == "start" for a in read_attempts(run_dir))
    monkeypatch.setattr(cancelctl.tracking, "RunLogger", submitit_requeues)  # a busy store: USR2 during its wait
    with pytest.raises(SystemExit):
        runjob.run_in_folder(run_dir, token=token)
    assert sum(a["event"] == "start" for a in read_attempts(run_dir)) == starts + 1
    assert last_end(run_dir)["outcome"] == "requeued" and last_end(run_dir)["token"] == token


def test_a_requeued_attempt_is_recorded_before_its_points_are_flushed(tmp_path, workdir, monkeypatch):
    import cancelctl.tracking

    run_dir, token = finished_run(tmp_path, workdir)
    ends_at_flush: list[str] = []

    class EndCheckingLogger(cancelctl.tracking.RunLogger):
        def flush(self):  # the step may be killed here: the attempt's end must already be on disk
            ends_at_flush.append(last_end(run_dir)["outcome"])
            return super().flush()

    monkeypatch.setattr(cancelctl.tracking, "RunLogger", EndCheckingLogger)
    monkeypatch.setattr(runjob, "backend_train", lambda name: submitit_requeues)  # USR2 mid-training
    ends = sum(a["event"] == "end" for a in read_attempts(run_dir))
    with pytest.raises(SystemExit):
        runjob.run_in_folder(run_dir, token=token)
    assert ends_at_flush and ends_at_flush[0] == "requeued"
    assert sum(a["event"] == "end" for a in read_attempts(run_dir)) == ends + 1
