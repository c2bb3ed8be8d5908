"""The stall watchdog's parts (cancelctl.jobs.watchdog): its limit, the median step time it reads, the
processes it counts as the job's, the retries it counts, the stacks it saves of a frozen process. The
whole watchdog on real runs: tests/launch/test_stall.py (local), tests/slurm/test_slurm_stall.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from cancelctl.jobs.heartbeat import beat, read_beat
from cancelctl.jobs.watchdog import py_spy, StallLimits, job_processes, median_step_s, requeues_used, save_stacks
from cancelctl.spec.monitor import StallRule

LIMITS = StallLimits(after_s=None, floor_s=600.0, multiple=10.0, startup_s=1800.0, retries=2)


def test_the_limit_is_the_startup_one_before_a_step_then_the_larger_of_the_floor_and_a_multiple_of_the_median():
    assert LIMITS.limit_s(False, 30.0) == 1800.0
    assert LIMITS.limit_s(True, 30.0) == 600.0  # the floor
    assert LIMITS.limit_s(True, 120.0) == 1200.0  # 10 x the median step: a slow run's steps may grow 5x
    assert LIMITS.limit_s(True, None) == 600.0
    fixed = StallLimits.of(StallRule(after_min=2.0, startup_min=1.0))
    assert fixed.limit_s(True, 120.0) == 120.0 and fixed.limit_s(False, None) == 120.0  # startup never shorter


def test_the_spec_defaults_suit_week_long_runs():
    limits = StallLimits.of(StallRule())
    assert (limits.floor_s, limits.multiple, limits.startup_s, limits.retries) == (600.0, 10.0, 1800.0, 2)


def test_the_median_step_time_ignores_the_gap_of_a_requeue(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    times = [0, 10, 20, 30, 3030, 3040, 3050]  # steps of 10 s, and 50 min between two attempts
    metrics.write_text("".join(json.dumps({"step": i, "ts": t * 1000, "metrics": {}}) + "\n" for i, t in enumerate(times)))
    assert median_step_s(metrics) == 10.0
    assert median_step_s(tmp_path / "missing.jsonl") is None


def test_retries_count_stall_requeues_since_the_last_stall_that_failed_the_run():
    stall = {"event": "end", "outcome": "stalled"}
    lines = [{**stall, "requeue": True}, {"event": "end", "outcome": "finished"}, {**stall, "requeue": True}]
    assert requeues_used(lines) == 2
    assert requeues_used([*lines, {**stall, "requeue": False}]) == 0  # a --retry-failed starts afresh


def test_a_heartbeat_says_a_step_or_a_phase_and_changes_on_every_beat(tmp_path):
    assert read_beat(tmp_path) == (None, {})
    beat(tmp_path, step=3)
    first = read_beat(tmp_path)
    beat(tmp_path, phase="rollout")
    second = read_beat(tmp_path)
    assert first[1] == {"step": 3} and second[1] == {"phase": "rollout"} and first[0] != second[0]


@pytest.fixture
def job_tree():
    """A process with a child in its own session, which has a child of its own (verl's child and its Ray)."""
    code = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
            "'import subprocess, sys, time; subprocess.Popen([sys.executable, \"-c\", \"import time; time.sleep(60)\"]); "
            "time.sleep(60)'], start_new_session=True); print('ready', flush=True); time.sleep(60)")
    root = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert root.stdout.readline().strip() == "ready"
    yield root
    for pid in job_processes(root.pid):
        os.kill(pid, signal.SIGKILL)
    root.wait()


def test_the_job_s_processes_are_its_descendants_and_the_sessions_they_lead(job_tree):
    import time

    deadline = time.monotonic() + 30
    while len(job_processes(job_tree.pid)) < 3 and time.monotonic() < deadline:  # the grandchild starting
        time.sleep(0.05)
    found = job_processes(job_tree.pid)
    assert len(found) == 3 and found[0] == job_tree.pid and os.getpid() not in found


def test_the_stacks_of_a_frozen_process_are_read_and_what_proc_says_of_it(tmp_path, job_tree):
    os.kill(job_tree.pid, signal.SIGSTOP)
    try:
        save_stacks(tmp_path / "stacks.txt", job_tree.pid, [job_tree.pid], "header\n", tmp_path)
    finally:
        os.kill(job_tree.pid, signal.SIGCONT)
    text = (tmp_path / "stacks.txt").read_text()
    assert text.startswith("header\n") and f"=== process {job_tree.pid}:" in text and "T (stopped)" in text
    if py_spy() is not None:  # the test extra installs it; without it, what /proc says (above) is all
        assert "<module> (<string>:1)" in text  # py-spy's dump of the frozen interpreter


def test_a_phase_said_from_a_process_that_knows_only_the_environment_beats_the_run_folder(tmp_path, monkeypatch):
    from cancelctl.jobs.heartbeat import HEARTBEAT_DIR_ENV, beat_phase, read_beat

    monkeypatch.delenv(HEARTBEAT_DIR_ENV, raising=False)
    beat_phase("rollout")  # verl run by hand: nowhere to say it, nothing raised
    assert read_beat(tmp_path) == (None, {})
    monkeypatch.setenv(HEARTBEAT_DIR_ENV, str(tmp_path))
    beat_phase("rollout")
    stamp, said = read_beat(tmp_path)
    assert stamp is not None and said == {"phase": "rollout"}


def test_verls_steps_and_the_cpu_rollouts_weight_syncs_are_progress_an_earlier_attempts_syncs_are_not(tmp_path):
    pytest.importorskip("verl")
    from cancelctl.backends.verl.command import ROLLOUT_WEIGHTS, VERL_METRICS
    from cancelctl.backends.verl.supervisor import _beat_on_steps, _size
    from cancelctl.jobs.heartbeat import read_beat

    (tmp_path / ROLLOUT_WEIGHTS).write_text('{"version": 1}\n')  # the attempt before this one's
    written = _beat_on_steps(tmp_path, (0, _size(tmp_path / ROLLOUT_WEIGHTS)))
    assert read_beat(tmp_path) == (None, {})
    with open(tmp_path / ROLLOUT_WEIGHTS, "a") as handle:
        handle.write('{"version": 1}\n')  # this attempt's first sync
    written = _beat_on_steps(tmp_path, written)
    assert read_beat(tmp_path)[1] == {"phase": "weight sync"}
    (tmp_path / VERL_METRICS).write_text('{"step": 1, "data": {}}\n')
    _beat_on_steps(tmp_path, written)
    assert read_beat(tmp_path)[1] == {"step": None}
