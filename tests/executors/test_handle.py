"""Job handles: each executor hands out its own, bound to the answer it gave for the whole sweep, and
`status` reads a run's job id, scheduler state, log, requeue and run state through it alone."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from cancelctl.executors import get_executor
from cancelctl.executors.base import Executor
from cancelctl.executors.driver import RUNNING_PROCESS, DrivenJob
from cancelctl.executors.handle import JobHandle
from cancelctl.executors.local import LocalJob
from cancelctl.executors.slurm import ACCOUNTING_GRACE_S, SlurmJob
from cancelctl.executors.slurm_states import TaskState, TaskStates
from cancelctl.jobs.outcome import process_start
from cancelctl.launch.states import run_state
from cancelctl.manifest import SUBMITTED, Manifest, RunEntry, Submission
from cancelctl.runstate import CANCELLED, COMPLETED, FAILED, PENDING, RUNNING, UNSUBMITTED, RunState
from cancelctl.workdir import sweep_paths


def slurm_job(tmp_path, tasks: TaskStates, index: int = 3, job_id: str | None = "812", submitted_at: float = 0.0):
    sub = Submission(token="t", executor="slurm", run_ids=[f"r{i}" for i in range(index + 1)], state=SUBMITTED,
                     created_at=0.0, job_id=job_id, submitted_at=submitted_at)
    return get_executor("slurm").handle(sweep_paths(tmp_path, "s"), sub, index, tasks, tmp_path)


def fresh_state(tmp_path) -> RunState:
    return RunState("r3", "a-s3", "a", 3, UNSUBMITTED, run_dir=tmp_path, job_id="812_3")


@pytest.mark.parametrize(("name", "job_class"), [("slurm", SlurmJob), ("local", LocalJob), ("debug", DrivenJob)])
def test_each_executor_hands_out_its_own_job_bound_to_the_answer_it_gave(tmp_path, name, job_class):
    tasks = TaskStates() if name == "slurm" else {}
    sub = Submission(token="t", executor=name, run_ids=["r0", "r1"], state=SUBMITTED, job_id="812")
    job = get_executor(name).handle(sweep_paths(tmp_path, "s"), sub, 1, tasks, tmp_path / "run")
    assert type(job) is job_class and isinstance(job, JobHandle)
    assert job.tasks is tasks and job.sub is sub and job.run_id == "r1" and job.run_dir == tmp_path / "run"


def test_the_executor_protocol_reads_no_run_of_a_submission_itself():
    """plan, submit, task_states, cancel (+ start/reconcile, + handle): what one run's job says is the handle's."""
    for per_run in ("classify", "requeued", "task_job_id", "log_path", "answered"):
        assert not hasattr(Executor, per_run), per_run
        for name in ("slurm", "local", "debug"):
            assert not hasattr(get_executor(name), per_run), (name, per_run)


def test_a_slurm_task_is_named_and_logged_as_its_array_task(tmp_path):
    job = slurm_job(tmp_path, TaskStates())
    assert job.job_id == "812_3"
    assert job.log_path == sweep_paths(tmp_path, "s").submitit_dir / "812_3_0_log.err"
    assert job.log_path.with_suffix(".out").name == "812_3_0_log.out"  # submitit's pair, as `logs` shows it
    unsent = slurm_job(tmp_path, TaskStates(), job_id=None)  # no job id yet (an intent): nothing to name
    assert unsent.job_id is None and unsent.log_path is None


def test_a_slurm_jobs_state_is_slurms_word_for_that_task_only(tmp_path):
    tasks = TaskStates({("812", 3): TaskState("RUNNING"), ("812", 2): TaskState("FAILED")})
    assert slurm_job(tmp_path, tasks).state == "RUNNING"
    assert slurm_job(tmp_path, tasks, index=2).state == "FAILED"
    assert slurm_job(tmp_path, tasks, index=1).state is None  # a task SLURM did not show


def test_a_slurm_job_is_answered_unless_slurm_was_silent_or_not_asked(tmp_path):
    tasks = TaskStates()
    assert slurm_job(tmp_path, tasks).answered
    tasks.unanswered.add("812")
    assert not slurm_job(tmp_path, tasks).answered
    tasks = TaskStates()
    tasks.unasked.add("812")
    assert not slurm_job(tmp_path, tasks).answered


@pytest.mark.parametrize(("word", "detail", "cancelled_at", "expected", "reason", "cancel_requested"), [
    ("PENDING", "Priority", None, PENDING, "Priority", False),
    ("RUNNING", "", None, RUNNING, "", False),
    ("COMPLETED", "", None, COMPLETED, "", False),
    ("CANCELLED", "CANCELLED by 0", 5.0, CANCELLED, "cancelled by cancelctl", True),
    ("CANCELLED", "CANCELLED by 1001", None, FAILED, "CANCELLED by 1001 (killed outside cancelctl)", True),
    ("TIMEOUT", "", None, FAILED, "TIMEOUT", False),
    ("OUT_OF_MEMORY", "", None, FAILED, "OUT_OF_MEMORY", False),
])
def test_a_slurm_job_classifies_each_word_and_leaves_the_given_state_alone(
        tmp_path, word, detail, cancelled_at, expected, reason, cancel_requested):
    job = slurm_job(tmp_path, TaskStates({("812", 3): TaskState(word, detail)}))
    state = fresh_state(tmp_path)
    classified = job.classify(state, RunEntry("a-s3", "a", 3, cancelled_at=cancelled_at), now=1000.0)
    assert (classified.state, classified.reason, classified.cancel_requested) == (expected, reason, cancel_requested)
    assert state.state == UNSUBMITTED and state.reason == ""


def test_a_slurm_task_not_shown_is_pending_for_the_grace_then_unknown(tmp_path):
    state, entry = fresh_state(tmp_path), RunEntry("a-s3", "a", 3)
    job = slurm_job(tmp_path, TaskStates(), submitted_at=100.0)
    assert job.classify(state, entry, now=100.0 + ACCOUNTING_GRACE_S - 1).state == PENDING
    gone = job.classify(state, entry, now=100.0 + ACCOUNTING_GRACE_S + 1)
    assert gone.state == FAILED and "unknown to SLURM" in gone.reason
    (tmp_path / "error.txt").write_text("FAILED ValueError: bad reward\n")
    assert job.classify(state, entry, now=100.0).reason == "FAILED ValueError: bad reward"  # its own record first


def test_a_slurm_job_is_requeued_only_when_slurm_runs_it_again_after_its_result(tmp_path):
    finished = time.time()
    (tmp_path / "result.json").write_text(json.dumps({"metrics": {}, "finished_at": finished, "token": "t"}))
    for word, as_of, requeued in [("RUNNING", finished + 5, True), ("PENDING", finished + 5, True),
                                  ("RUNNING", finished - 5, False), ("COMPLETED", finished + 5, False)]:
        tasks = TaskStates({("812", 3): TaskState(word)})
        tasks.as_of["812"] = as_of
        assert slurm_job(tmp_path, tasks).requeued() is requeued, (word, as_of)


def test_run_state_reads_a_requeued_result_through_the_handle(tmp_path):
    """A run with result.json whose task SLURM runs again is running, not completed; the job id and
    log `status` shows are the handle's."""
    paths = sweep_paths(tmp_path, "s")
    manifest = Manifest(sweep="s", executor="slurm", runs={"r0": RunEntry("a-s0", "a", 0)})
    sub = manifest.add_submission("slurm", ["r0"], state=SUBMITTED, job_id="271", submitted_at=time.time())
    run_dir = paths.run_dir("r0", "a-s0")
    run_dir.mkdir(parents=True)
    finished = time.time()
    (run_dir / "result.json").write_text(json.dumps({"metrics": {"acc": 0.5}, "finished_at": finished, "token": sub.token}))
    tasks = TaskStates({("271", 0): TaskState("RUNNING")})
    tasks.as_of["271"] = finished + 5
    job = get_executor("slurm").handle(paths, sub, 0, tasks, run_dir)
    again = run_state(paths, manifest, "r0", job, False, time.time())
    assert again.state == RUNNING and again.job_id == "271_0" and again.log == job.log_path
    tasks.as_of["271"] = finished - 5  # SLURM's word predates the result: the result stands
    done = run_state(paths, manifest, "r0", job, False, time.time())
    assert done.state == COMPLETED and done.final == {"acc": 0.5}
    never = run_state(paths, Manifest(sweep="s", executor="slurm", runs={"r0": RunEntry("a-s0", "a", 0)}), "r0",
                      None, False, time.time())
    assert never.state == COMPLETED and never.job_id is None and never.log is None  # adopted/unsubmitted: no job


def test_a_driven_job_runs_while_its_process_does_and_ends_with_it(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sub = Submission(token="t", executor="local", run_ids=["r0"], state=SUBMITTED, job_id=str(proc.pid),
                         pid_start=process_start(proc.pid), created_at=0.0)
        job = get_executor("local").handle(sweep_paths(tmp_path, "s"), sub, 0, {}, tmp_path)
        state, entry = fresh_state(tmp_path), RunEntry("a-s0", "a", 0)
        assert job.job_id == str(proc.pid) and job.state == RUNNING_PROCESS
        assert job.classify(state, entry, time.time()).state == RUNNING
        assert job.log_path == sweep_paths(tmp_path, "s").submitit_dir / "local" / f"{proc.pid}_0_log.err"
    finally:
        proc.kill()
        proc.wait()
    assert job.state is None
    assert job.classify(state, entry, time.time()).state == UNSUBMITTED  # ended before its run started
    (tmp_path / "error.txt").write_text("INTERRUPTED KeyboardInterrupt\n")
    assert job.classify(state, RunEntry("a-s0", "a", 0, cancelled_at=1.0), time.time()).reason == "interrupted by cancelctl"


def test_a_debug_job_keeps_no_log_of_its_own(tmp_path):
    sub = Submission(token="t", executor="debug", run_ids=["r0"], state=SUBMITTED, job_id="1")
    assert get_executor("debug").handle(sweep_paths(tmp_path, "s"), sub, 0, {}, tmp_path).log_path is None
