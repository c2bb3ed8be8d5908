"""The attempt fence (`cancelctl.fencing`): a run never has two attempts writing. Unit properties,
then a real one: a lab run stepping in its own process stops without writing once a newer attempt
claims its folder (what a hand-run sbatch, or a requeue racing a resubmit, does)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from polling import wait_until
from sweep_files import TINY_LAB, write_sweep

from cancelctl import fencing
from cancelctl.jobs.outcome import read_attempts, write_result
from cancelctl.launch import cancel_sweep, launch_sweep, sweep_status
from cancelctl.spec.expand import load_sweep
from cancelctl.workdir import RunFolder, sweep_paths


def test_each_claim_is_the_next_attempt_and_only_the_newest_may_write(tmp_path):
    first = fencing.claim(tmp_path, "812_0")
    first.check()  # the newest: writes
    second = fencing.claim(tmp_path, "812_0")
    assert (first.number, second.number) == (1, 2) and fencing.current_attempt(tmp_path) == 2
    assert json.loads(RunFolder(tmp_path).fence.read_text())["job_id"] == "812_0"
    second.check()
    with pytest.raises(fencing.StaleAttempt, match="attempt 2 started after this attempt \\(1\\)"):
        first.check()


def test_writers_check_the_fence_this_process_holds(tmp_path):
    write_result(tmp_path, {"x": 1.0}, token="t")  # a run folder no attempt of this process claimed: no fence
    old = fencing.claim(tmp_path)
    with fencing.hold(old):
        write_result(tmp_path, {"x": 2.0}, token="t")
        fencing.claim(tmp_path)  # a newer attempt, somewhere else
        with pytest.raises(fencing.StaleAttempt):
            write_result(tmp_path, {"x": 3.0}, token="t")
    assert json.loads(RunFolder(tmp_path).result.read_text())["metrics"] == {"x": 2.0}  # the stale write never landed
    assert isinstance(fencing.StaleAttempt("x"), BaseException) and not isinstance(fencing.StaleAttempt("x"), Exception)


def test_a_stale_attempt_alive_beside_a_newer_one_stops_without_writing(tmp_path, workdir):
    lab = {**TINY_LAB, "checkpoint_every": 3}
    path = write_sweep(tmp_path, "fence", arms={"grpo": {"algorithm": {"loss": "grpo"}}}, seeds=(0,), steps=100_000,
                       base={"lab": lab})
    sweep = load_sweep(path)
    run = sweep.runs[0]
    folder = RunFolder(sweep_paths(workdir, sweep.name).run_dir(run.run_id, run.name))
    launch_sweep(sweep, workdir=workdir, executor="local", wait=False)
    try:
        wait_until(lambda: (folder.last_step() or 0) >= 4, 90, "step 4", poll_s=0.05)
        pid = next(a["pid"] for a in read_attempts(folder.path) if a["event"] == "start")
        newer = fencing.claim(folder.path, "manual-sbatch")  # a second attempt of the same run starts
        wait_until(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3],
                   60, "the stale attempt to stop", poll_s=0.05)
        files = {p.name: p.stat().st_mtime_ns for p in folder.path.iterdir()}
        metrics = folder.metrics.read_bytes()
        time.sleep(1.0)
        assert folder.metrics.read_bytes() == metrics  # it wrote no step after the newer attempt claimed the run
        assert not folder.result.exists() and not folder.error.exists()  # nor an outcome
        assert [a["event"] for a in read_attempts(folder.path)] == ["start"]  # nor an end of its attempt
        assert {p.name: p.stat().st_mtime_ns for p in folder.path.iterdir()} == files
        assert newer.number == 2 and fencing.current_attempt(folder.path) == 2
    finally:
        if any(s.active for s in sweep_status(workdir, sweep.name)):
            cancel_sweep(workdir, sweep.name)
