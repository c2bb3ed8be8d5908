"""The SLURM executor's pieces that need no cluster: parameter checks, array planning, the sbatch
golden file, sacct job ids (the live-cluster tests are in tests/slurm/)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError
from sweep_files import write_sweep

from cancelctl.errors import SpecError
from cancelctl.executors import slurm_commands as slurm_mod
from cancelctl.executors import slurm_states
from cancelctl.launch import launch_sweep
from cancelctl.spec.cluster import ClusterSpec
from cancelctl.spec.expand import load_sweep
from cancelctl.spec.experiment import ExperimentSpec

GOLDEN = Path(__file__).resolve().parents[1] / "slurm" / "golden" / "array.sbatch"


def test_slurm_dry_run_one_array_per_shape_chunked_to_max_array_size(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_mod, "max_array_size", lambda: 3)
    arms = {
        "small": {"algorithm": {"loss": "grpo"}},
        "small2": {"algorithm": {"loss": "gspo"}},
        "big": {"algorithm": {"loss": "dapo"}, "cluster": {"cpus_per_task": 2}},
    }
    sweep = load_sweep(write_sweep(tmp_path, "arrays", arms=arms, seeds=(0, 1), base={"executor": "slurm"}))
    result = launch_sweep(sweep, workdir=tmp_path / "w", dry_run=True)
    assert result.executor == "slurm" and not (tmp_path / "w").exists()
    sizes = [len(a.run_ids) for a in result.arrays]
    assert sizes == [3, 1, 2]  # 4 runs of one shape cut to MaxArraySize 3, then the 2-CPU shape
    assert "#SBATCH --array=0-2%3" in result.arrays[0].script
    assert "#SBATCH --cpus-per-task=2" in result.arrays[2].script
    by_run = {run_id for a in result.arrays for run_id in a.run_ids}
    assert by_run == {r.run_id for r in sweep.runs}


def golden_shape(tmp_path: Path) -> slurm_mod.JobShape:
    spec = ExperimentSpec.model_validate(
        {
            "executor": "slurm",
            "cluster": {
                "partition": "gpu",
                "account": "rl-lab",
                "qos": "normal",
                "gpus_per_node": 8,
                "cpus_per_task": 16,
                "mem_gb": 200,
                "time_min": 240,
                "array_parallelism": 4,
                "container_image": "/images/cancelctl.sqsh",
                "container_runtime": "pyxis",
                "setup": ["module load cuda/12.4", "export NCCL_DEBUG=WARN"],
                "additional": {"constraint": "a100", "mail-type": "FAIL"},
            },
        }
    )
    return slurm_mod.job_shape(spec, Path("/scratch/work"))


def test_sbatch_script_matches_golden_file(tmp_path):
    """The one place that renders sbatch scripts (submitit's renderer with cancelctl's entry).
    Regenerate after an intended change: CANCELCTL_UPDATE_GOLDEN=1 pytest -k golden."""
    shape = golden_shape(tmp_path)
    script = slurm_mod.render_sbatch(
        shape,
        folder=Path("/scratch/work/sweeps/demo/submitit"),
        token="0123456789",
        n_tasks=6,
        job_name=slurm_mod.job_name("demo", "0123456789"),
        comment=slurm_mod.job_comment("demo", ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]),
    )
    if os.environ.get("CANCELCTL_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(script)
    assert script == GOLDEN.read_text()


def test_container_runtimes(tmp_path):
    shape = golden_shape(tmp_path)
    assert shape.python == "python" and "--container-image=/images/cancelctl.sqsh" in shape.parameters["srun_args"]
    spec = ExperimentSpec.model_validate(
        {"cluster": {"container_image": "/images/c.sif", "container_runtime": "apptainer", "gpus_per_node": 1}}
    )
    apptainer = slurm_mod.job_shape(spec, Path("/w"))
    assert apptainer.python == "apptainer exec --nv --bind /w:/w /images/c.sif python"
    assert "srun_args" not in apptainer.parameters
    plain = slurm_mod.job_shape(ExperimentSpec(), Path("/w"))
    assert plain.python == sys.executable and "gpus_per_node" not in plain.parameters


@pytest.mark.parametrize(
    ("additional", "message"),
    [
        ({"job-name": "x"}, "set by cancelctl"),
        ({"array": "0-3"}, "set by cancelctl"),
        ({"bad flag!": "1"}, "not an sbatch option name"),
        ({"mail-user": "a@b\nc"}, "one line"),
        ({"nodes": 2}, "set cluster.nodes instead"),
        ({"cpus-per-task": 2}, "set cluster.cpus_per_task instead"),
        ({"exclusive": "user", "constraint": "a100", "mail-user": "a@b"}, None),
    ],
)
def test_bad_cluster_settings_are_refused_before_submission(tmp_path, additional, message):
    if message is None:  # submitit's own names go through submitit, others become raw sbatch flags
        spec = ExperimentSpec.model_validate({"executor": "slurm", "cluster": {"additional": additional}})
        shape = slurm_mod.job_shape(spec, tmp_path)
        slurm_mod.check_shape(shape)
        assert shape.parameters["exclusive"] == "user" and shape.parameters["additional_parameters"] == {"mail-user": "a@b"}
        return
    with pytest.raises((SpecError, ValidationError), match=message):  # the spec's types, or the shape check
        spec = ExperimentSpec.model_validate({"executor": "slurm", "cluster": {"additional": additional}})
        slurm_mod.check_shape(slurm_mod.job_shape(spec, tmp_path))


def test_unknown_submitit_parameter_is_refused(tmp_path):
    shape = slurm_mod.job_shape(ExperimentSpec(executor="slurm"), tmp_path)
    bad = replace(shape, parameters={**shape.parameters, "gpus_per_nod": 1})
    with pytest.raises(SpecError, match="not a submitit SLURM parameter"):
        slurm_mod.check_shape(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("812_3", [("812", 3)]),
        ("812_[0-2,5%4]", [("812", 0), ("812", 1), ("812", 2), ("812", 5)]),
        ("812_[7]", [("812", 7)]),
        ("812", [("812", 0)]),
        ("812_3.batch", []),
    ],
)
def test_job_ids_from_sacct(text, expected):
    assert slurm_states.expand_job_id(text) == expected


# ---------------------------------------------------------------- directive injection

INJECTED = "debug\n#SBATCH --wrap=id"


def _string_fields(model) -> list[tuple[str, str]]:
    """(field, YAML of an injected value in its shape) for every ClusterSpec field that takes text."""
    out = []
    for name, info in model.model_fields.items():
        text = repr(info.annotation)
        if "Literal" in text or "str" not in text:
            continue
        value = '"' + INJECTED.replace("\n", "\\n") + '"'  # a YAML double-quoted string with a line break
        if text.startswith("list"):
            value = f"[{value}]"
        elif text.startswith("dict"):
            value = f"{{constraint: {value}}}"
        out.append((name, value))
    return out


@pytest.mark.parametrize(("field", "value"), [*_string_fields(ClusterSpec), ("additional", '{"a\\n#SBATCH --wrap=id": 1}')])
def test_every_text_field_that_reaches_the_script_refuses_a_line_break(write_yaml, field, value):
    path = write_yaml(f"name: t\nbase:\n  executor: slurm\n  cluster:\n    {field}: {value}\narms:\n  a: {{}}\n")
    with pytest.raises(SpecError) as exc:
        load_sweep(path)
    [issue] = exc.value.issues
    assert issue.location.line == 5 and issue.path.startswith(f"base.cluster.{field}"), issue
    assert "one line" in issue.message or "sbatch option name" in issue.message


def test_text_fields_of_the_cluster_spec_are_all_covered():
    # a new text field of ClusterSpec is caught by the test above; these are the ones today
    assert {f for f, _ in _string_fields(ClusterSpec)} == {"partition", "account", "qos", "container_image", "setup", "additional"}


def test_an_sbatch_directive_in_setup_is_refused(write_yaml):
    path = write_yaml("name: t\nbase:\n  cluster:\n    setup: ['module load x', '#SBATCH --account=other']\narms:\n  a: {}\n")
    with pytest.raises(SpecError, match="cluster.additional"):
        load_sweep(path)


def test_rendering_refuses_a_line_break_from_outside_the_spec(tmp_path):
    # the work dir's path reaches `#SBATCH --output=`: the last guard before a script is written
    shape = slurm_mod.job_shape(ExperimentSpec(executor="slurm"), tmp_path)
    with pytest.raises(SpecError, match="folder"):
        slurm_mod.render_sbatch(shape, folder=tmp_path / "w\n#SBATCH --wrap=id", token="t", n_tasks=1, job_name="j", comment="c")
    bad = replace(shape, parameters={**shape.parameters, "partition": INJECTED})
    with pytest.raises(SpecError, match="partition"):
        slurm_mod.check_shape(bad)


def test_a_task_sacct_has_not_recorded_yet_is_asked_of_squeue(monkeypatch):
    """The window CI hit: task 4 has left sacct's pending record (`271_[4-5]` is now `271_5`) but its
    start is not in accounting yet; the array is in sacct, so only its size tells squeue is needed."""
    from subprocess import CompletedProcess

    asked = []

    def fake(cmd, **_):
        asked.append(cmd[0])
        if cmd[0] == "sacct":
            rows = ["271_0|RUNNING|0:0", "271_1|COMPLETED|0:0", "271_2|RUNNING|0:0", "271_3|RUNNING|0:0", "271_5|PENDING|0:0"]
            return CompletedProcess(cmd, 0, "\n".join(rows) + "\n", "")
        return CompletedProcess(cmd, 0, "271|4|RUNNING|None\n271|5|PENDING|Resources\n", "")

    monkeypatch.setattr(slurm_states, "run_command", fake)
    states = slurm_states.task_states(["271"], {"271": 6})
    assert states[("271", 4)] == slurm_states.TaskState("RUNNING", "")
    assert states[("271", 5)].state == "PENDING" and states[("271", 5)].detail == ""  # sacct's word stands
    assert sorted(asked) == ["sacct", "squeue"]  # one call each


def test_sacct_and_squeue_are_asked_at_the_same_time_and_squeue_once_for_every_array(monkeypatch):
    import threading
    from subprocess import CompletedProcess

    both_in_flight = threading.Barrier(2, timeout=10)  # one after the other would break it
    asked = []

    def fake(cmd, **_):
        asked.append(cmd)
        both_in_flight.wait()
        if cmd[0] == "sacct":
            return CompletedProcess(cmd, 0, "271_0|RUNNING|0:0\n", "")
        return CompletedProcess(cmd, 0, "271|0|RUNNING|None\n272|0|PENDING|Priority\n999|0|RUNNING|None\n", "")

    monkeypatch.setattr(slurm_states, "run_command", fake)
    states = slurm_states.task_states(["271", "272"], {"271": 1, "272": 1}, names=["cancelctl:s:a", "cancelctl:s:b"])
    assert states[("272", 0)] == slurm_states.TaskState("PENDING", "Priority") and ("999", 0) not in states
    squeues = [cmd for cmd in asked if cmd[0] == "squeue"]
    assert len(asked) == 2 and len(squeues) == 1 and "cancelctl:s:a,cancelctl:s:b" in squeues[0]


# ---------------------------------------------------------------------------------- an outage is not a failure

UNREACHABLE = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"


def _scheduler(monkeypatch, sacct, squeue):
    """sacct and squeue answering (stdout), failing (an exception: its message on stderr, exit 1)."""
    from subprocess import CompletedProcess

    def fake(cmd, **_):
        said = sacct if cmd[0] == "sacct" else squeue
        if isinstance(said, Exception):
            return CompletedProcess(cmd, 1, "", f"{cmd[0]}: error: {said}\n")
        return CompletedProcess(cmd, 0, said, "")

    monkeypatch.setattr(slurm_states, "run_command", fake)


def test_silence_from_both_commands_leaves_the_array_unanswered_and_its_last_states_stand(monkeypatch, tmp_path):
    memory = slurm_states.LastKnownStates(tmp_path / "slurm_states.json")
    _scheduler(monkeypatch, "271_0|RUNNING|0:0\n271_1|PENDING|0:0\n", "")
    answered = memory.merge(slurm_states.task_states(["271"], {"271": 2}))
    assert not answered.unanswered and answered.unreachable_note() is None
    _scheduler(monkeypatch, RuntimeError("Problem talking to the database: Connection refused"), RuntimeError(UNREACHABLE))
    silent = memory.merge(slurm_states.task_states(["271"], {"271": 2}))
    assert silent.unanswered == {"271"}
    assert silent[("271", 0)].state == "RUNNING" and silent[("271", 1)].state == "PENDING"  # as last said
    note = silent.unreachable_note()
    assert note.startswith("SLURM unreachable: sacct: ") and "Connection refused" in note and UNREACHABLE in note
    assert "states as of 20" in note


@pytest.mark.parametrize("sacct, squeue, unanswered", [
    (RuntimeError("Socket timed out"), "271|1|RUNNING|None\n", {"271"}),  # task 0 may have ended: only sacct knows
    ("\udcff\udcfe garbled\n", RuntimeError(UNREACHABLE), {"271"}),  # an unreadable answer is no answer
    ("271_1|RUNNING|0:0\n", RuntimeError(UNREACHABLE), {"271"}),  # sacct lacks task 0, squeue silent
    ("271_1|RUNNING|0:0\n", "271|1|RUNNING|None\n", set()),  # both answered; neither knows task 0: gone
])
def test_a_task_is_unknown_to_slurm_only_when_both_commands_answered(monkeypatch, sacct, squeue, unanswered):
    _scheduler(monkeypatch, sacct, squeue)
    assert slurm_states.task_states(["271"], {"271": 2}).unanswered == unanswered


def test_classify_keeps_a_silent_schedulers_runs_and_fails_only_on_a_positive_answer(monkeypatch, tmp_path):
    from cancelctl.executors.slurm import ACCOUNTING_GRACE_S, SlurmExecutor
    from cancelctl.manifest import RunEntry, Submission
    from cancelctl.runstate import RunState
    from cancelctl.workdir import sweep_paths

    sub = Submission(token="t", executor="slurm", run_ids=["r"], created_at=0.0, job_id="271", submitted_at=0.0)
    entry = RunEntry(name="r", arm="a", seed=0)
    silent = slurm_states.TaskStates()
    silent.unanswered.add("271")
    state = RunState("r", "r", "a", 0, "unsubmitted", run_dir=tmp_path)
    paths = sweep_paths(tmp_path, "s")
    kept = SlurmExecutor().handle(paths, sub, 0, silent, tmp_path).classify(state, entry, now=ACCOUNTING_GRACE_S + 10)
    assert kept.state == "pending" and "unreachable" in kept.reason and state.state == "unsubmitted"
    gone = SlurmExecutor().handle(paths, sub, 0, slurm_states.TaskStates(), tmp_path).classify(
        state, entry, now=ACCOUNTING_GRACE_S + 10)
    assert gone.state == "failed" and "unknown to SLURM" in gone.reason


def test_a_submission_is_abandoned_only_when_both_commands_say_no_such_job(monkeypatch):
    from cancelctl.errors import SchedulerError

    _scheduler(monkeypatch, "", RuntimeError(UNREACHABLE))  # sacct has not recorded it; squeue silent
    with pytest.raises(SchedulerError, match="cannot tell whether jobs cancelctl:s:tok were submitted"):
        slurm_states.find_by_name(["cancelctl:s:tok"], since=0.0)
    _scheduler(monkeypatch, "", "")
    assert slurm_states.find_by_name(["cancelctl:s:tok"], since=0.0) == {}


def test_scheduler_output_that_is_not_utf8_is_read_with_replacement_characters():
    result = slurm_mod.run_command(["printf", "271_0|RUNNING|0:0 \\377\\376\\n"], timeout=5, check=False)
    assert "\ufffd" in result.stdout and result.stdout.startswith("271_0|RUNNING")


def test_an_unreachable_controller_at_test_only_is_a_runtime_failure_not_bad_settings(monkeypatch, tmp_path):
    from subprocess import CompletedProcess

    from cancelctl.errors import SchedulerError

    monkeypatch.setattr(slurm_mod, "run_command", lambda cmd, **_: CompletedProcess(
        cmd, 1, "", "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n"))
    with pytest.raises(SchedulerError, match="SLURM unreachable: sbatch --test-only"):
        slurm_mod.sbatch_test_only(tmp_path / "x.sh")
    monkeypatch.setattr(slurm_mod, "run_command", lambda cmd, **_: CompletedProcess(
        cmd, 1, "", "sbatch: error: invalid partition specified: nope\n"))
    assert "invalid partition" in slurm_mod.sbatch_test_only(tmp_path / "x.sh")  # a refusal stays a refusal (exit 2)


@pytest.mark.parametrize("returncode, stdout, stderr, lost", [
    (1, "", "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation", True),
    (1, "", "sbatch: error: Batch job submission failed: Unable to contact slurm controller", True),
    (-9, "", "", True),  # the process killed before it answered
    (0, "Welcome to the cluster\n", "", True),  # a banner, no job id
    (1, "", "sbatch: error: Batch job submission failed: Invalid partition name specified", False),  # a refusal
])
def test_only_a_clear_refusal_from_sbatch_means_nothing_was_queued(monkeypatch, tmp_path, returncode, stdout, stderr, lost):
    from subprocess import CompletedProcess

    from cancelctl.errors import SchedulerError

    monkeypatch.setattr(slurm_mod, "run_command", lambda cmd, **_: CompletedProcess(cmd, returncode, stdout, stderr))
    with pytest.raises(SchedulerError) as raised:
        slurm_mod.sbatch(tmp_path / "a.sh")
    assert isinstance(raised.value, slurm_mod.AnswerLost) is lost, raised.value


def test_an_sbatch_that_hangs_past_its_timeout_lost_its_answer(monkeypatch, tmp_path):
    def hung(cmd, **_):
        raise slurm_mod.CommandTimedOut("sbatch --parsable ... did not answer within 60 s")

    monkeypatch.setattr(slurm_mod, "run_command", hung)
    with pytest.raises(slurm_mod.AnswerLost, match="did not answer"):
        slurm_mod.sbatch(tmp_path / "a.sh")


def test_a_lost_answer_is_not_queued_only_when_both_commands_say_so_past_the_grace(monkeypatch, tmp_path):
    import time

    from cancelctl.executors import slurm as slurm_exec
    from cancelctl.manifest import SUBMIT_FAILED, UNCONFIRMED, Manifest, RunEntry
    from cancelctl.workdir import sweep_paths

    paths = sweep_paths(tmp_path, "s")
    paths.sweep_dir.mkdir(parents=True)
    store = paths.store
    with store.update(create=Manifest(sweep="s", executor="slurm", runs={"r": RunEntry(name="r", arm="a", seed=0)})) as manifest:
        sub = manifest.add_submission("slurm", ["r"])
        sub.job_name, sub.state, sub.error, sub.submitted_at = "cancelctl:s:tok", UNCONFIRMED, "lost", time.time()
    _scheduler(monkeypatch, RuntimeError(UNREACHABLE), RuntimeError(UNREACHABLE))  # no answer: stays unconfirmed
    slurm_exec.SlurmExecutor().reconcile(paths, store.load().intents(), wait=False)
    recorded = store.load().submissions[sub.token]
    assert recorded.state == UNCONFIRMED and "Unable to contact" in recorded.lookup_error
    _scheduler(monkeypatch, "", "")  # both answer, no such job, but within the grace: still unconfirmed
    slurm_exec.SlurmExecutor().reconcile(paths, store.load().intents(), wait=False)
    assert store.load().submissions[sub.token].state == UNCONFIRMED
    monkeypatch.setattr(slurm_exec, "LOST_ANSWER_GRACE_S", 0.0)
    slurm_exec.SlurmExecutor().reconcile(paths, store.load().intents(), wait=False)
    recorded = store.load().submissions[sub.token]
    assert recorded.state == SUBMIT_FAILED and "it was not queued" in recorded.error


def test_the_planned_lead_is_the_signal_line_and_the_planned_count_is_in_every_tasks_pickle(tmp_path):
    """sbatch `--signal=USR2@<lead>` and submitit's `max_num_timeout` follow the run's time-limit plan."""
    from submitit.core.utils import DelayedSubmission

    from cancelctl.jobs.time_limit import TimeLimitPlan

    plan = TimeLimitPlan(time_s=60, lead_s=17, allocations=9, max_timeouts=12)
    shape = slurm_mod.job_shape(ExperimentSpec(executor="slurm"), tmp_path, plan)
    script = slurm_mod.render_sbatch(shape, folder=tmp_path, token="t", n_tasks=2, job_name="j", comment="c")
    assert "#SBATCH --signal=USR2@17" in script
    slurm_mod.write_array_files(tmp_path, "t", [print, print], shape, script)
    assert DelayedSubmission.load(tmp_path / "t_1.pkl")._timeout_countdown == 12
    default = slurm_mod.job_shape(ExperimentSpec(executor="slurm"), tmp_path)  # no plan: submitit's own
    assert (default.parameters["signal_delay_s"], default.max_timeouts) == (90, 3)
