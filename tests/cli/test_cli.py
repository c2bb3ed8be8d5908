"""The CLI verbs through Typer's CliRunner: exit codes, one-screen errors, README examples."""

import json

import jsonschema
import pytest
import yaml
from prepared_data import experiment_datasets, write_stand_ins
from project_paths import EXPERIMENTS
from typer.testing import CliRunner

from cancelctl.cli import app

runner = CliRunner()
ALL_SPECS = sorted(EXPERIMENTS.glob("*.yaml"))


def test_validate_all_experiments_skip_verl():
    result = runner.invoke(app, ["validate", "--skip-verl", "--skip-data", *map(str, ALL_SPECS)])
    assert result.exit_code == 0, result.output
    assert result.output.count("ok ") == len(ALL_SPECS)


def test_validate_bad_spec_exits_2_with_position(write_yaml):
    path = write_yaml("name: t\nbase:\n  algorithm:\n    loss: grpoo\n")
    result = runner.invoke(app, ["validate", "--skip-verl", "--skip-data", str(path)])
    assert result.exit_code == 2
    assert f"{path}:4:5" in result.output and "base.algorithm.loss" in result.output
    assert "Traceback" not in result.output
    assert len(result.output.splitlines()) < 25


def test_validate_mixed_files_exit_2_but_reports_each(write_yaml):
    bad = write_yaml("name: t\nbase: {rollout: {G: 1}}\n")
    result = runner.invoke(app, ["validate", "--skip-verl", "--skip-data", str(EXPERIMENTS / "lab-demo.yaml"), str(bad)])
    assert result.exit_code == 2
    assert "lab-demo.yaml" in result.output and "base.rollout.G" in result.output


def test_plan_table_and_json():
    result = runner.invoke(app, ["plan", str(EXPERIMENTS / "group-size.yaml")])
    assert result.exit_code == 0, result.output
    assert "group-size: 24 runs" in result.output and "dfpo-min-replace-G=16-s2" in result.output
    result = runner.invoke(app, ["plan", "--json", str(EXPERIMENTS / "group-size.yaml")])
    plan = json.loads(result.output)
    assert len(plan["runs"]) == 24 and plan["baseline"] == "gspo"
    assert {r["axes"]["rollout.G"] for r in plan["runs"]} == {2, 4, 8, 16}
    assert all(len(r["run_id"]) == 12 for r in plan["runs"])


def test_plan_shows_each_runs_budget_on_its_axis(write_yaml):
    """A token budget: the arms' tokens are the budget, their updates known only when each run ends."""
    path = write_yaml("name: t\nbase: {budget: {gen_tokens: 98304}}\narms:\n  a: {}\n"
                      "  b: {batching: {strategy: reward_balanced}}\n")
    result = runner.invoke(app, ["plan", str(path)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("b-s0"))
    assert row.split()[-6:] == ["98.3k", "tokens", "98.3k", "at", "the", "budget"], row
    plan = json.loads(runner.invoke(app, ["plan", "--json", str(path)]).output)
    assert [(r["budget_axis"], r["budget"], r["planned_gen_tokens"], r["planned_update_steps"]) for r in plan["runs"]] \
        == [("gen_tokens", 98304, 98304, None)] * 2
    demo = json.loads(runner.invoke(app, ["plan", "--json", str(EXPERIMENTS / "lab-demo.yaml")]).output)["runs"][0]
    assert demo["budget_axis"] == "steps" and demo["planned_update_steps"] > 0


def test_plan_shows_big_budgets_as_numbers_not_1e_plus_06T(write_yaml):
    path = write_yaml("name: t\nbase: {budget: {gen_tokens: 1000000000000000000}}\narms:\n  a: {}\n")
    result = runner.invoke(app, ["plan", str(path)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("a-s0"))
    assert row.split()[-6:-3] == ["1e18", "tokens", "1e18"], row
    from cancelctl.cli.inspecting import _si

    assert [_si(n) for n in (200, 98_304, 999_950, 2.5e9, 1e15)] == ["200", "98.3k", "1M", "2.5G", "1e15"]


def test_status_shows_the_step_alone_when_the_budget_ends_at_an_unknown_step():
    from rich.console import Console

    from cancelctl.cli.running import _states_table
    from cancelctl.runstate import RunState

    console = Console(width=200)
    with console.capture() as captured:
        console.print(_states_table("t", [RunState("abc", "a-s0", "a", 0, "running", step=12, steps=None),
                                          RunState("def", "b-s0", "b", 0, "running", step=12, steps=100)]))
    rows = captured.get().splitlines()
    assert rows[2].split()[:4] == ["a-s0", "abc", "running", "12"] and "12/100" in rows[3]


def test_plan_refuses_unmatched(write_yaml):
    path = write_yaml("name: t\narms:\n  a: {}\n  b: {budget: {steps: 7}}\n")
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 2
    assert "not compute-matched" in result.output and "a vs b" in result.output
    assert runner.invoke(app, ["plan", "--allow-unmatched", str(path)]).exit_code == 0


def test_schema_validates_every_example(tmp_path):
    out = tmp_path / "schema.json"
    assert runner.invoke(app, ["schema", "--output", str(out)]).exit_code == 0
    schema = json.loads(out.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    for path in ALL_SPECS:
        validator.validate(yaml.safe_load(path.read_text()))
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"name": "x", "base": {"algorithm": {"los": "grpo"}}})


def test_committed_schema_is_current():
    from cancelctl.spec.schema import sweep_json_schema

    committed = json.loads((EXPERIMENTS.parent / "schema" / "sweep.schema.json").read_text())
    assert committed == sweep_json_schema(), "run: cancelctl schema -o schema/sweep.schema.json"


def test_render_lab_run_prints_resolved_spec():
    plan = json.loads(runner.invoke(app, ["plan", "--json", str(EXPERIMENTS / "lab-demo.yaml")]).output)
    run_id = plan["runs"][0]["run_id"]
    result = runner.invoke(app, ["render", str(EXPERIMENTS / "lab-demo.yaml"), "--run", run_id])
    assert result.exit_code == 0
    assert json.loads(result.output)["run_id"] == run_id


def test_render_unknown_run_exits_2():
    result = runner.invoke(app, ["render", str(EXPERIMENTS / "lab-demo.yaml"), "--run", "nope"])
    assert result.exit_code == 2 and "no such run" in result.output


@pytest.mark.verl
def test_validate_composes_every_verl_spec_against_verl(tmp_path, monkeypatch):
    """The README's `cancelctl validate experiments/*.yaml`, with verl's real config (CI has verl)."""
    from cancelctl.backends.verl import verl_available

    if not verl_available():
        pytest.skip("verl not installed (pip install 'cancelctl[verl]')")
    monkeypatch.chdir(tmp_path)  # the experiments' data, as `cancelctl data prepare` writes it here
    write_stand_ins(experiment_datasets(), tmp_path)
    result = runner.invoke(app, ["validate", *map(str, ALL_SPECS)])
    assert result.exit_code == 0, result.output
    assert "verl config composed" in result.output and "skipped" not in result.output


@pytest.mark.verl
def test_render_verl_run_prints_shell_safe_command():
    result = runner.invoke(app, ["render", str(EXPERIMENTS / "group-size.yaml"), "--run", "gspo-G=8-s0"])
    assert result.exit_code == 0, result.output
    assert "verl.trainer.main_ppo" in result.output
    assert "actor_rollout_ref.rollout.n=8" in result.output
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=cancel_gspo" in result.output




def test_render_of_a_cpu_run_notes_its_bf16_rollout_and_the_speed_caveat():
    result = runner.invoke(app, ["render", str(EXPERIMENTS / "real-lm.yaml"), "--run", "gspo-s0"])
    assert result.exit_code == 0, result.output
    assert "actor_rollout_ref.rollout.dtype=bfloat16" in result.stdout and "note:" not in result.stdout
    assert "note: rollout.precision bf16: the hf_cpu rollout" in result.stderr and "generation 2.0x" in result.stderr


@pytest.fixture
def experiment_data(tmp_path, monkeypatch):
    """Run from a directory holding the data the verl experiments name (stand-ins for `data prepare`)."""
    here = tmp_path / "project"
    write_stand_ins(experiment_datasets(), here)
    monkeypatch.chdir(here)
    return here


def test_slurm_sweep_without_slurm_says_what_to_do_and_writes_nothing(tmp_path, monkeypatch, experiment_data):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no sbatch, sacct, ... on this PATH
    workdir = tmp_path / "work"
    result = runner.invoke(app, ["sweep", str(EXPERIMENTS / "clip-strength.yaml"), "--workdir", str(workdir)])
    assert result.exit_code == 1
    assert "sbatch" in result.output and "--dry-run" in result.output and "Traceback" not in result.output
    assert not workdir.exists()
    dry = runner.invoke(app, ["sweep", str(EXPERIMENTS / "clip-strength.yaml"), "--workdir", str(workdir), "--dry-run"])
    assert dry.exit_code == 0, dry.output


@pytest.mark.parametrize("name", ["group-size", "dfpo-vs-gspo", "batching"])
def test_every_arm_of_the_verl_experiments_plans(tmp_path, name, experiment_data):
    """dfpo (group ids through the loss wrapper) and every batching strategy run on verl: no refusal."""
    result = runner.invoke(app, ["sweep", str(EXPERIMENTS / f"{name}.yaml"), "--workdir", str(tmp_path / "w"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would submit" in result.output and "cannot launch" not in result.output


def test_verl_runs_the_backend_cannot_run_are_refused_before_submission(tmp_path, monkeypatch, experiment_data):
    """What the verl planning hook refuses (a data problem, planted here) is refused at sweep time
    (exit 2, file:line of each arm), not after its job got GPUs; the spec itself stays valid."""
    from cancelctl.backends.verl import data_files

    def unsupported(run):
        return [("algorithm.loss dfpo", "stand-in reason")] if run.spec.algorithm.loss == "dfpo" else []

    monkeypatch.setattr(data_files, "data_problems", unsupported)
    workdir = tmp_path / "work"
    result = runner.invoke(app, ["sweep", str(EXPERIMENTS / "group-size.yaml"), "--workdir", str(workdir), "--dry-run"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    line = (EXPERIMENTS / "group-size.yaml").read_text().splitlines().index("  dfpo-min-replace:") + 1
    assert f"group-size.yaml:{line}:3: arms.dfpo-min-replace: algorithm.loss dfpo" in " ".join(result.output.split())
    assert "12 runs" in result.output and "arms.gspo" not in result.output
    assert not workdir.exists()
    assert runner.invoke(app, ["validate", "--skip-verl", "--skip-data", str(EXPERIMENTS / "group-size.yaml")]).exit_code == 0


def test_status_colours_apply_to_the_state_words():
    """STATE_STYLE is keyed by the states status shows (lower case): each styled state is printed in
    its colour (the keys used to be upper case, so no colour ever applied)."""
    from rich.color import ColorSystem
    from rich.console import Console
    from rich.style import Style

    from cancelctl.cli.running import STATE_STYLE, _states_table
    from cancelctl.runstate import STATES, RunState

    def rendered(state: str) -> str:
        console = Console(force_terminal=True, color_system="truecolor", width=200)
        with console.capture() as captured:
            console.print(_states_table("t", [RunState("abc", "grpo-s0", "grpo", 0, state)]))
        return captured.get()

    assert set(STATE_STYLE) <= set(STATES) and {"completed", "failed", "running"} <= set(STATE_STYLE)
    for state, style in STATE_STYLE.items():
        code = Style.parse(style).render("\0", color_system=ColorSystem.TRUECOLOR).split("\0")[0]
        assert code and f"{code}{state}" in rendered(state), (state, style)
    assert "\x1b[" not in rendered("unsubmitted").split("abc")[1].split("unsubmitted")[0]  # unstyled: plain


def test_sweep_wait_shows_the_watch_view_and_watch_verb_reads_a_fixed_workdir(tmp_path, template_db):
    """`sweep` (debug executor, waits) prints the watch view's plain lines when piped and keeps its
    summary lines; `watch` then renders the ended sweep from the work dir alone and exits: 0 while no
    run failed, 1 once one has; `status` shows the stopped run with its rule and step."""
    import shutil

    from sweep_files import STOPPING_ARM, write_sweep

    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(template_db, workdir / "mlflow.db")
    arms = {"grpo": {"algorithm": {"loss": "grpo"}}, "gspo": STOPPING_ARM}
    path = write_sweep(tmp_path, "watched", arms=arms, seeds=(0,), steps=4)
    result = runner.invoke(app, ["sweep", str(path), "-e", "debug", "-w", str(workdir), "--allow-unmatched"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "submitted 2" in out and "watched: 1 completed, 1 stopped" in out  # the CLI's own summary lines
    assert "-> stopped at 2/4 (entropy_collapse at step 2)" in out  # an event line (from queued: debug runs in turn)
    assert "watched: 1/2 done, 0 running, 0 waiting, 1 stopped" in out  # the plain summary's totals
    assert "STOP gspo-s0 step 2 entropy_collapse:" in out

    watched = runner.invoke(app, ["watch", "-w", str(workdir)])
    assert watched.exit_code == 0, watched.output
    lines = watched.output.splitlines()
    assert lines[0].split() == ["run", "state", "step", "reward", "rho_std", "entropy", "reward", "trend", "s/step", "alerts"]
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert rows["grpo-s0"][1:3] == ["completed", "4/4"] and rows["gspo-s0"][1:3] == ["stopped", "2/4"]
    assert rows["gspo-s0"][-1] == "entropy_collapse@2" and "STOP" in rows["gspo-s0"]
    assert "watched: 1/2 done" in lines[3]

    status = runner.invoke(app, ["status", "-w", str(workdir)])
    assert "stopped" in status.output and "entropy_collapse at step 2" in status.output

    again = runner.invoke(app, ["sweep", str(path), "-e", "debug", "-w", str(workdir), "--allow-unmatched", "--retry-failed"])
    assert again.exit_code == 0 and "submitted 0" in again.output
    assert "1 stopped by a monitor rule (use --retry-stopped)" in again.output

    broken = write_sweep(tmp_path, "watched", arms={**arms, "broken": {"algorithm": {"loss": "grpo"}, "lab": {"fail_at_step": 1}}},
                         seeds=(0,), steps=4)
    assert runner.invoke(app, ["sweep", str(broken), "-e", "debug", "-w", str(workdir), "--allow-unmatched"]).exit_code == 1
    failed = runner.invoke(app, ["watch", "watched", "-w", str(workdir)])
    assert failed.exit_code == 1 and "1 failed" in failed.output


def test_watch_unknown_sweep_exits_2(tmp_path):
    result = runner.invoke(app, ["watch", "nope", "-w", str(tmp_path)])
    assert result.exit_code == 2 and "nope" in result.output and "Traceback" not in result.output


def test_sweep_wait_on_a_scheduler_follows_the_runs_in_the_watch_view(tmp_path, template_db, monkeypatch):
    """An executor that does not drive the runs itself (SLURM: waits_by_default False) with --wait:
    the launcher submits without waiting, then `sweep` follows the runs with `watch` until they end
    and counts the failures for its exit code. Stood in for by the debug executor's detached driver."""
    import shutil

    from sweep_files import STOPPING_ARM, write_sweep

    from cancelctl.executors.debug import DebugExecutor

    monkeypatch.setattr(DebugExecutor, "waits_by_default", False)
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(template_db, workdir / "mlflow.db")
    arms = {"gspo": STOPPING_ARM, "broken": {"algorithm": {"loss": "grpo"}, "lab": {"fail_at_step": 1}}}
    path = write_sweep(tmp_path, "followed", arms=arms, seeds=(0,), steps=4)
    result = runner.invoke(app, ["sweep", str(path), "-e", "debug", "-w", str(workdir), "--allow-unmatched", "--wait"])
    assert result.exit_code == 1, result.output  # the broken run failed
    out = result.output
    assert "followed: 0/2 done, 0 running, 0 waiting, 1 stopped, 1 failed" in out  # watch's plain summary
    assert "FAILED" in out and "followed: 1 failed, 1 stopped" in out


# ---------------------------------------------------------------------------------- trust: names, titles, misdiagnoses


@pytest.fixture(scope="module")
def ran_sweep(tmp_path_factory):
    """A finished tiny debug sweep (arms grpo, gspo; one seed): (work dir, sweep file)."""
    import shutil

    from sweep_files import write_sweep

    from cancelctl.launch import launch_sweep
    from cancelctl.spec.expand import load_sweep

    root = tmp_path_factory.mktemp("trust")
    path = write_sweep(root, "rt", seeds=(0,), steps=2, baseline="grpo")
    launched = launch_sweep(load_sweep(path), workdir=root / "work", executor="debug")
    assert launched.ok, launched.errors
    yield root / "work", path
    shutil.rmtree(root / "results", ignore_errors=True)


def copy_of(workdir, tmp_path):
    """A copy of the work dir whose run.json files point at the copy's own MLflow store."""
    import shutil

    shutil.copytree(workdir, tmp_path / "work")
    for record in (tmp_path / "work").glob("sweeps/*/runs/*/run.json"):
        record.write_text(record.read_text().replace(str(workdir), str(tmp_path / "work")))
    return tmp_path / "work"


@pytest.mark.parametrize("verb", ["status", "cancel", "report", "watch", "logs"])
@pytest.mark.parametrize("name", ["../../x", "../sweeps/rt", "rt/../rt", "..", "/etc", ".hidden"])
def test_every_verb_refuses_a_sweep_name_that_is_not_one_path_component(verb, name, ran_sweep, tmp_path, monkeypatch):
    workdir, _ = ran_sweep
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, [verb, name, "-w", str(workdir)])
    assert result.exit_code == 2, result.output
    assert "one path component" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("verb", ["status", "cancel", "report", "watch"])
def test_an_unknown_sweep_is_named_as_such_exit_2(verb, ran_sweep):
    result = runner.invoke(app, [verb, "nosuch", "-w", str(ran_sweep[0])])
    assert result.exit_code == 2, result.output
    assert "unknown sweep" in result.output and "has not been run" in result.output and "known: rt" in result.output
    assert "invalid experiment spec" not in result.output and "baseline" not in result.output


def test_argument_errors_say_they_are_about_arguments(ran_sweep, tmp_path):
    _, path = ran_sweep
    result = runner.invoke(app, ["render", str(path), "--run", "nope"])
    assert result.exit_code == 2 and "invalid argument" in result.output, result.output
    assert "invalid experiment spec" not in result.output
    # a choice typer checks itself: its bad-parameter screen, before the verb runs
    result = runner.invoke(app, ["sweep", str(path), "--executor", "foo", "-w", str(tmp_path)])
    assert result.exit_code == 2 and "Invalid value for '--executor'" in result.output, result.output
    assert "'foo': expected 'local', 'slurm' or 'debug'" in result.output
    assert "invalid experiment spec" not in result.output and not (tmp_path / "sweeps").exists()


def test_a_metric_typo_lists_the_known_metrics_exit_2(ran_sweep, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["report", "rt", "-w", str(ran_sweep[0]), "--metric", "critic/scor/mean"])
    assert result.exit_code == 2, result.output
    assert "not logged" in result.output and "did you mean: critic/score/mean" in result.output
    assert "known metrics" in result.output and "actor/entropy" in result.output


@pytest.mark.parametrize("kappa, where", [("-5", "below"), ("50", "above")])
def test_a_threshold_outside_the_metrics_values_is_bad_input_exit_2(ran_sweep, tmp_path, monkeypatch, kappa, where):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["report", "rt", "-w", str(ran_sweep[0]), "--kappa", kappa])
    assert result.exit_code == 2, result.output
    assert f"--kappa {kappa} is {where} every value of critic/score/mean in this sweep" in result.output
    assert not (tmp_path / "results").exists()  # nothing written


def test_report_on_a_running_sweep_warns_and_exits_1_unless_unfinished_runs_are_included(ran_sweep, tmp_path, monkeypatch):
    from cancelctl.tracking import SyncState, default_tracking_uri
    from cancelctl.tracking.runs import client_for
    from cancelctl.workdir import sweep_run_folders

    workdir = copy_of(ran_sweep[0], tmp_path)
    monkeypatch.chdir(tmp_path)
    record, folder = sweep_run_folders(workdir, "rt")[1]
    uri = default_tracking_uri(workdir)
    client_for(uri).update_run(record["mlflow_run_id"], status="RUNNING")  # as while the run trains
    sync = SyncState.load(folder.path)
    sync.final_status = None
    sync.save(folder.path)
    result = runner.invoke(app, ["report", "rt", "-w", str(workdir)])
    assert result.exit_code == 1, result.output
    assert "incomplete report" in result.output and record["name"] in result.output and "--include-unfinished" in result.output
    assert "include_unfinished" not in result.output.replace("--include-unfinished", "")
    assert runner.invoke(app, ["report", "rt", "-w", str(workdir), "--include-unfinished"]).exit_code == 0


def test_a_truncated_metrics_file_is_named_not_shown_as_a_shorter_run(ran_sweep, tmp_path, monkeypatch):
    """metrics.jsonl cut mid-line, the tracking store gone: status and report say the file is truncated."""
    from cancelctl.workdir import sweep_run_folders

    workdir = copy_of(ran_sweep[0], tmp_path)
    monkeypatch.chdir(tmp_path)
    (workdir / "mlflow.db").unlink()
    _, folder = sweep_run_folders(workdir, "rt")[0]
    data = folder.metrics.read_bytes()
    end = data.index(b"\n")
    folder.metrics.write_bytes(data[: end + 30])  # the first line whole, the second cut short
    first = f"truncated after step {json.loads(data[:end])['step']}"
    status = runner.invoke(app, ["status", "rt", "-w", str(workdir)], env={"COLUMNS": "400"})
    assert status.exit_code == 0 and first in status.output, status.output
    report = runner.invoke(app, ["report", "rt", "-w", str(workdir)], env={"COLUMNS": "400"})
    assert first in report.output and "later points are lost" in report.output, report.output


def test_version_list_and_logs(ran_sweep, tmp_path):
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"cancelctl {version('cancelctl')}"
    workdir, path = ran_sweep
    listed = runner.invoke(app, ["list", "-w", str(workdir)])
    assert listed.exit_code == 0 and "rt" in listed.output and "2 completed" in listed.output, listed.output
    assert "no sweep has been run" in runner.invoke(app, ["list", "-w", str(tmp_path)]).output
    from cancelctl.spec.expand import load_sweep

    run = load_sweep(path).runs[0]
    for name in (run.name, run.run_id, run.run_id[:5]):
        shown = runner.invoke(app, ["logs", name, "-w", str(workdir)])
        assert shown.exit_code == 0 and f"rt / {run.name} ({run.run_id}): completed" in shown.output, shown.output
        assert "error.txt (none)" in shown.output and "debug executor keeps no job log" in shown.output
    missing = runner.invoke(app, ["logs", "nope", "-w", str(workdir)])
    assert missing.exit_code == 2 and "no run 'nope' in sweep rt" in missing.output


def test_each_run_records_what_it_ran_on_in_status_json_and_its_mlflow_tags(ran_sweep):
    import socket

    from cancelctl.tracking.runs import client_for
    from cancelctl.tracking.tags import HARDWARE_TAG_PREFIX

    workdir, _ = ran_sweep
    states = json.loads(runner.invoke(app, ["status", "rt", "--json", "-w", str(workdir)]).output)
    runs = states
    assert runs and all(r["hardware"]["host"] == socket.gethostname() and r["hardware"]["cpu_kernels"] for r in runs)
    record = json.loads(next(workdir.glob("sweeps/rt/runs/*/run.json")).read_text())
    tags = client_for(record["tracking_uri"]).get_run(record["mlflow_run_id"]).data.tags
    assert tags[HARDWARE_TAG_PREFIX + "host"] == socket.gethostname()
    kernels = runs[0]["hardware"]["cpu_kernels"]
    report = runner.invoke(app, ["report", "rt", "-w", str(workdir)], env={"COLUMNS": "400"})
    assert f"ran on: {kernels} (all 2 runs with a record)" in report.output, report.output


def test_ui_prints_a_loopback_mlflow_command_for_the_sweeps_store(ran_sweep):
    workdir, _ = ran_sweep
    result = runner.invoke(app, ["ui", "rt", "-w", str(workdir), "--port", "5123"])
    assert result.exit_code == 0, result.output
    expected = f"mlflow ui --backend-store-uri sqlite:///{workdir / 'mlflow.db'} --host 127.0.0.1 --port 5123"
    assert expected in result.output
    assert runner.invoke(app, ["ui", "nosuch", "-w", str(workdir)]).exit_code == 2


def test_validate_shows_progress_as_plain_lines_when_piped():
    files = [str(EXPERIMENTS / "lab-demo.yaml"), str(EXPERIMENTS / "group-size.yaml")]
    result = runner.invoke(app, ["validate", "--skip-verl", "--skip-data", *files])
    assert result.exit_code == 0, result.output
    assert f"checking {files[0]} (1/2)" in result.output and f"checking {files[1]} (2/2)" in result.output


@pytest.mark.parametrize("verb", [["validate", "--skip-verl", "--skip-data"], ["plan"], ["sweep", "--dry-run"], ["render", "--run", "x"]])
def test_every_verb_that_loads_a_sweep_refuses_an_arm_overriding_an_axis(verb, write_yaml, tmp_path):
    path = write_yaml("name: t\narms:\n  grpo: {}\n  grpo8:\n    rollout: {G: 8}\ngrid:\n  rollout.G: [2, 4]\n")
    workdir = ["-w", str(tmp_path / "wd")] if verb[0] in ("sweep", "render") else []
    result = runner.invoke(app, [verb[0], str(path), *verb[1:], *workdir])
    assert result.exit_code == 2, result.output
    assert f"{path}:5:" in result.output and "arms.grpo8.rollout.G" in result.output and f"{path}:7:3" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "wd").exists()


def test_work_dir_errors_print_a_styled_label_not_markup(tmp_path):
    manifest = tmp_path / "wd" / "sweeps" / "s" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text("{not json")  # damaged, and no run folders to rebuild it from: exit 1
    result = runner.invoke(app, ["status", "s", "-w", str(tmp_path / "wd")])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: ") and "[bold red]" not in result.output and "[/]" not in result.output


def test_a_path_with_brackets_is_printed_as_it_is(tmp_path):
    path = tmp_path / "x[b]" / "sweep[bold].yaml"
    path.parent.mkdir()
    path.write_text("name: t\nbase: {rollout: {G: 1}}\n")
    result = runner.invoke(app, ["validate", "--skip-verl", "--skip-data", str(path)])
    assert result.exit_code == 2 and f"FAIL {path}: " in result.output, result.output


@pytest.mark.parametrize("field", [("launched_at", "yesterday"), ("file", 5), ("runs", [1]), ("driver", {"pid": "x"})])
def test_list_names_a_manifest_field_of_the_wrong_type_instead_of_a_traceback(tmp_path, field):
    manifest = {"version": 1, "sweep": "s", "executor": "local", "runs": {}, "submissions": {}, "created_at": 1.0}
    manifest[field[0]] = field[1]
    path = tmp_path / "sweeps" / "s" / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest))
    result = runner.invoke(app, ["list", "-w", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "unreadable" in result.output and field[0] in result.output


@pytest.mark.parametrize("args", [["report", "--kappa", "nan"], ["report", "-k", "inf"], ["watch", "--refresh", "inf"]])
def test_float_options_refuse_nan_and_inf(args, tmp_path):
    result = runner.invoke(app, [*args, "s", "-w", str(tmp_path)])
    assert result.exit_code == 2 and args[1] in result.output and "finite" in result.output, result.output


def test_plan_shows_the_allocations_each_slurm_run_needs_and_validate_warns_of_a_limit_too_short(write_yaml):
    """1 minute holds the lab's start-up and a step; a 9-layer lab at 512 wide whose steps take longer does not."""
    path = write_yaml("name: t\nbase: {executor: slurm, cluster: {time_min: 1}, budget: {steps: 200}}\narms:\n  a: {}\n"
                      "  big: {lab: {d_model: 1024, n_layers: 12, n_heads: 8}}\n")
    result = runner.invoke(app, ["plan", "--allow-unmatched", str(path)], env={"COLUMNS": "300"})
    assert result.exit_code == 0 and "allocations" in result.output, result.output
    rows = json.loads(runner.invoke(app, ["plan", "--json", "--allow-unmatched", str(path)]).output)["runs"]
    small = rows[0]["time_limit"]
    assert small["expected_allocations"] > 3 and small["max_timeouts"] > 3 and small["lead_s"] >= 10
    row = next(line for line in result.output.splitlines() if line.startswith("a-s0"))
    assert row.split()[-1] == str(small["expected_allocations"]), row
    checked = runner.invoke(app, ["validate", "--allow-unmatched", "--skip-verl", "--skip-data", str(path)])
    assert checked.exit_code == 0, checked.output  # a warning, not a refusal
    assert "warning: cluster.time_min 1 may not hold start-up" in checked.output and "[arm big]" in checked.output
    assert "[arm a" not in checked.output.replace("[arm big]", "")


@pytest.mark.parametrize(("argv", "choices"), [
    (["report", "--compute", "flops"], "'tokens', 'updates', 'hours'"),
    (["bench", "losses", "--device", "tpu"], "'cpu', 'cuda'"),
])
def test_choices_are_listed_and_others_refused_by_typer(argv, choices):
    """A choice option's values are in its --help, and typer refuses any other with exit 2 before the verb runs."""
    result = runner.invoke(app, argv)
    assert result.exit_code == 2 and f"is not one of {choices}" in result.output, result.output
    shown = runner.invoke(app, [*argv[:-2], "--help"]).output
    assert f"<{choices.replace(chr(39), '').replace(', ', '|')}>" in shown


def test_one_boolean_style_a_flag_or_a_pair_for_what_is_on_by_default():
    """A flag that is off by default is `--flag` alone; only an option on by default (or left to the
    executor: `--wait`) takes a `--no-` form. Every option is keyword-only in its verb."""
    import inspect

    import typer.main

    group = typer.main.get_command(app)
    ctx = group.make_context("cancelctl", ["--help"], resilient_parsing=True)
    paired = set()
    for name, command in _commands(group, ctx):
        for param in command.params:
            if getattr(param, "is_bool_flag", False) and param.secondary_opts:
                paired.add(f"{name} {param.opts[0]}")
            if param.param_type_name == "option" and command.callback is not None and param.name in inspect.signature(
                    command.callback).parameters:
                kind = inspect.signature(command.callback).parameters[param.name].kind
                assert kind is inspect.Parameter.KEYWORD_ONLY, f"{name} {param.opts[0]} is not keyword-only"
    assert paired == {"sweep --wait", "bench losses --verl"}


def _commands(group, ctx, prefix=""):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if hasattr(command, "list_commands"):
            yield from _commands(command, ctx, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command
