"""The sweep's one view of SLURM (cancelctl.executors.slurm_view): shared while fresh, asked by one
process at a time, never waited on by a watcher; sacct/squeue stand in for the scheduler here (the
real cluster's version is tests/slurm/test_slurm_outage.py)."""

from __future__ import annotations

import threading
from subprocess import CompletedProcess

import pytest

from cancelctl.executors import slurm_states, slurm_view
from cancelctl.executors.base import DECIDE, SHOW, WATCH, Freshness
from cancelctl.executors.slurm_states import LastKnownStates, TaskState
from cancelctl.fileio import file_lock

SIZES = {"271": 2}
NAMES = ["cancelctl:s:tok"]


@pytest.fixture
def scheduler(monkeypatch):
    """A scheduler answering every call (the calls are counted); `hold` makes the next calls hang
    until released."""

    class Scheduler:
        calls: list[str] = []
        hold = threading.Event()
        release = threading.Event()

        def __call__(self, cmd, **_):
            self.calls.append(cmd[0])
            if self.hold.is_set():
                self.release.wait(10)
                return CompletedProcess(cmd, 1, "", f"{cmd[0]}: error: Socket timed out on send/recv operation")
            if cmd[0] == "sacct":
                return CompletedProcess(cmd, 0, "271_0|RUNNING|0:0\n271_1|PENDING|0:0\n", "")
            return CompletedProcess(cmd, 0, "271|0|RUNNING|None\n271|1|PENDING|Priority\n", "")

    fake = Scheduler()
    monkeypatch.setattr(slurm_states, "run_command", fake)
    yield fake
    fake.release.set()


def test_verbs_within_the_views_age_share_one_query_and_a_deciding_verb_asks_again(tmp_path, scheduler):
    for _ in range(3):  # status, list and logs within 30 s
        states = slurm_view.shared_task_states(tmp_path, SIZES, NAMES, SHOW)
        assert states[("271", 0)].state == "RUNNING" and states.unreachable_note() is None
    assert sorted(scheduler.calls) == ["sacct", "squeue"]
    slurm_view.shared_task_states(tmp_path, SIZES, NAMES, DECIDE)  # sweep / cancel: asked now
    assert len(scheduler.calls) == 4


def test_a_watcher_never_waits_on_a_hanging_scheduler_and_says_since_when(tmp_path, scheduler, monkeypatch):
    monkeypatch.setattr(slurm_states, "QUERY_TIMEOUT_S", 1)
    slurm_view.shared_task_states(tmp_path, SIZES, NAMES, DECIDE)  # an answer, then the scheduler hangs
    scheduler.hold.set()
    stale = Freshness(max_age_s=0.0, wait=False)
    drawn = slurm_view.shared_task_states(tmp_path, SIZES, NAMES, stale)  # returns with the last known states
    assert drawn[("271", 0)] == TaskState("RUNNING", "")
    asking = slurm_view._asking[tmp_path]
    assert asking.is_alive()  # the query goes on in the background, under the view's lock
    scheduler.release.set()
    asking.join(10)
    after = slurm_view.shared_task_states(tmp_path, SIZES, NAMES, WATCH)  # the failed query is the view now
    assert after.unanswered == {"271"} and after[("271", 0)].state == "RUNNING"
    note = after.unreachable_note()
    assert note.startswith("SLURM unreachable: ") and "no answer since 20" in note


def test_a_verb_waits_for_another_askers_answer_at_most_one_query_timeout(tmp_path, scheduler, monkeypatch):
    monkeypatch.setattr(slurm_states, "QUERY_TIMEOUT_S", 0.5)
    slurm_view.shared_task_states(tmp_path, SIZES, NAMES, DECIDE)
    calls = len(scheduler.calls)
    with file_lock(tmp_path / slurm_view.VIEW_LOCK, 1.0):  # another process is asking (and hangs)
        shown = slurm_view.shared_task_states(tmp_path, SIZES, NAMES, DECIDE)
    assert len(scheduler.calls) == calls  # it did not ask beside the other asker
    assert shown[("271", 1)].state == "PENDING" and "another cancelctl process" in shown.unreachable_note()


def test_a_watchers_first_look_before_any_answer_is_no_outage(tmp_path, scheduler):
    scheduler.hold.set()
    first = slurm_view.shared_task_states(tmp_path, SIZES, NAMES, WATCH)
    assert first.unasked == {"271"} and first.unreachable_note() is None and first.no_answer_for("271")
    scheduler.release.set()
    slurm_view._asking[tmp_path].join(10)


def test_an_answer_older_than_the_runs_own_result_does_not_outrank_it(tmp_path):
    import json
    import time

    from cancelctl.executors.slurm import SlurmExecutor
    from cancelctl.manifest import Submission
    from cancelctl.workdir import sweep_paths

    sub = Submission(token="t", executor="slurm", run_ids=["r"], job_id="271", job_name=NAMES[0])
    answered = slurm_states.TaskStates({("271", 0): TaskState("RUNNING")})
    answered.as_of["271"] = time.time()
    (tmp_path / "result.json").write_text(json.dumps({"metrics": {}, "finished_at": time.time() + 5, "token": "t"}))
    job = SlurmExecutor().handle(sweep_paths(tmp_path, "s"), sub, 0, answered, tmp_path)
    assert not job.requeued()  # said running before it finished
    answered.as_of["271"] = time.time() + 10
    assert job.requeued()  # said running (again) after: a requeue


def test_a_run_folder_that_started_after_slurm_said_pending_is_running(tmp_path):
    import json
    import time

    from cancelctl.executors.slurm import SlurmExecutor
    from cancelctl.manifest import RunEntry, Submission
    from cancelctl.runstate import RunState
    from cancelctl.workdir import sweep_paths

    sub = Submission(token="t", executor="slurm", run_ids=["r"], job_id="271", submitted_at=0.0)
    view = slurm_states.TaskStates({("271", 0): TaskState("PENDING", "Priority")})
    view.as_of["271"] = time.time() - 20  # a shared view 20 s old
    state = RunState("r", "r", "a", 0, "unsubmitted", run_dir=tmp_path)
    job = SlurmExecutor().handle(sweep_paths(tmp_path, "s"), sub, 0, view, tmp_path)
    classify = lambda: job.classify(state, RunEntry(name="r", arm="a", seed=0), now=time.time())  # noqa: E731
    assert classify().state == "pending"
    (tmp_path / "job.json").write_text(json.dumps({"job_id": "271_0", "started_at": time.time() - 5}))
    assert classify().state == "running"
    (tmp_path / "job.json").write_text(json.dumps({"job_id": "271_0", "started_at": time.time() - 60}))
    assert classify().state == "pending"  # the attempt before the requeue SLURM reported


def test_the_view_file_remembers_the_last_answer_through_silence(tmp_path):
    memory = LastKnownStates(tmp_path / "slurm_states.json")
    answered = slurm_states.TaskStates({("271", 0): TaskState("RUNNING")})
    answered.as_of["271"] = 100.0
    memory.merge(answered, asked_at=100.0)
    silent = slurm_states.TaskStates()
    silent.unanswered.add("271")
    silent.failures["sacct"] = "Socket timed out"
    merged = memory.merge(silent, asked_at=200.0)
    assert merged[("271", 0)].state == "RUNNING" and merged.as_of["271"] == 100.0 and merged.silent_since == 200.0
    again = memory.merge(silent, asked_at=300.0)
    assert again.silent_since == 200.0  # since the outage began, not since the last try
    cached, asked_at = memory.cached(["271"])
    assert asked_at == 300.0 and cached.unanswered == {"271"} and cached.silent_since == 200.0
