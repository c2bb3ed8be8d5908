"""The in-job entry with a stand-in for `python -m verl.trainer.main_ppo` (no GPU, no verl run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from verl_helpers import as_dict

from cancelctl.jobs import preemption
from cancelctl.jobs.children import stop_group
from cancelctl.backends.verl import command, forward, render, supervisor
from cancelctl.backends.verl.command import job_command
from cancelctl.backends.verl.supervisor import train
from cancelctl.backends.verl.forward import MetricsForwarder, sanitize_key

FAKE_VERL = textwrap.dedent(
    """
    import json, os, sys
    args = sys.argv[1:]
    with open("argv.json", "w") as fh:
        json.dump(args, fh)
    with open(os.environ["VERL_FILE_LOGGER_PATH"], "wb") as fh:
        if os.environ.get("FAKE_VERL_VAL_BEFORE_TRAIN"):  # verl's trainer.val_before_train: step 0, eval only
            fh.write((json.dumps({"step": 0, "data": {"val-core/aime/acc/mean@32": 0.05}}) + "\\n").encode())
        for step in range(1, int(os.environ.get("FAKE_VERL_STEPS", "2")) + 1):
            nan = step == 2 and os.environ.get("FAKE_VERL_NAN")  # a blow-up: the nonfinite rule stops the run
            data = {"actor/pg_loss": float("nan") if nan else 0.5 / step, "val-core/aime/acc/mean@32": 0.1 * step, "note": "x", "flag": True,
                    "response_length/mean": 10.0 * step, "actor/dfpo/asym": 0.3, "actor/cancel/energy_b0": 0.4}
            fh.write((json.dumps({"step": step, "data": data}) + "\\n").encode())
    import signal, time
    if os.environ.get("FAKE_VERL_JOB_SIGNAL"):  # SLURM signals the whole job: verl dies first, the job's signal lands after
        job = os.getppid()
        if os.fork() == 0:
            time.sleep(0.3)
            os.kill(job, signal.SIGTERM)
            os._exit(0)
        os.kill(os.getpid(), signal.SIGABRT)
    time.sleep(float(os.environ.get("FAKE_VERL_SLEEP", "0")))
    sys.exit(int(os.environ.get("FAKE_VERL_EXIT", "0")))
    """
)


class ListLogger:
    def __init__(self):
        self.points = []

    def log(self, step, metrics):
        self.points.append((step, dict(metrics)))


@pytest.fixture
def fake_verl(tmp_path, monkeypatch):
    script = tmp_path / "fake_verl.py"
    script.write_text(FAKE_VERL)
    monkeypatch.setattr(render, "VERL_ENTRY", [sys.executable, str(script)])
    monkeypatch.setattr(supervisor, "POLL_SECONDS", 0.05)
    monkeypatch.setattr(supervisor, "check_loss_plugin", lambda: None)  # its own tests below
    monkeypatch.setattr(supervisor, "inactive_plugin", lambda: None)  # imports verl: its own tests below
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return run_dir


def test_train_runs_verl_and_forwards_metrics(make_run, fake_verl):
    logger = ListLogger()
    result = train(make_run(), fake_verl, logger)
    assert [step for step, _ in logger.points] == [1, 2]
    # verl's numeric keys (sanitised as verl's MLflow logger does) plus the compute keys derived
    # from them: 32 prompts × G 4 trajectories, 2 mini-batches of 16 per step
    assert logger.points[1][1] == {
        "actor/pg_loss": 0.25, "val-core/aime/acc/mean_at_32": 0.2, "response_length/mean": 20.0,
        "compute/gen_tokens": 20.0 * 128, "compute/gen_tokens_cum": 30.0 * 128, "compute/update_steps_cum": 4.0,
        "dfpo/asym": 0.3, "cancel/energy_b0": 0.4,  # the loss plugin's keys, as verl logs them (actor/...)
    }
    assert result == logger.points[1][1]
    argv = json.loads((fake_verl / "argv.json").read_text())
    assert argv[:2] == ["--config-name", "ppo_trainer"]
    o = as_dict(argv[2:])
    assert o["trainer.logger"] == "[console,file]"
    assert o["trainer.default_local_dir"] == str(fake_verl / "checkpoints")
    assert o["ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"] == str(fake_verl / command.VERL_METRICS)


def test_the_evaluation_before_training_is_forwarded_as_step_0(make_run, fake_verl, monkeypatch):
    """verl logs its val_before_train evaluation at step 0: the first point of every held-out curve
    (the report's gain is last − first). A first attempt forwards it; nothing is "replayed" yet."""
    monkeypatch.setenv("FAKE_VERL_VAL_BEFORE_TRAIN", "1")
    logger = ListLogger()
    train(make_run(), fake_verl, logger)
    assert [step for step, _ in logger.points] == [0, 1, 2]
    assert logger.points[0][1] == {"val-core/aime/acc/mean_at_32": 0.05, "compute/update_steps_cum": 0.0}


def test_train_raises_when_verl_fails(make_run, fake_verl, monkeypatch):
    monkeypatch.setenv("FAKE_VERL_EXIT", "3")
    logger = ListLogger()
    with pytest.raises(RuntimeError, match="status 3"):
        train(make_run(), fake_verl, logger)
    assert len(logger.points) == 2  # what was logged before the failure is kept


def test_train_refuses_blocked_runs(make_run, fake_verl, monkeypatch):
    # a job whose environment lacks the verl trainer plugin (every strategy is implemented now)
    monkeypatch.setattr(render, "installed", lambda module: module != render.TRAINER_PLUGIN_MODULE)
    with pytest.raises(RuntimeError, match="plugin_trainer .*is not installed"):
        train(make_run("{batching: {strategy: query_preserved}}"), fake_verl, ListLogger())
    assert not (fake_verl / "argv.json").exists()


def test_forwarder_waits_for_complete_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    logger = ListLogger()
    fwd = MetricsForwarder(path, logger)
    assert fwd.pump() == 0  # no file yet
    path.write_bytes(b'{"step": 1, "data": {"a": 1}}\n{"step": 2, "da')
    assert fwd.pump() == 1
    with path.open("ab") as fh:
        fh.write(b'ta": {"a": 2}}\n')
    assert fwd.pump() == 1 and logger.points == [(1, {"a": 1.0}), (2, {"a": 2.0})]


def test_steps_a_resumed_verl_replays_are_forwarded_once(tmp_path):
    """A requeued verl resumes from its checkpoint (step 2 here) and logs steps 3 and 4 again: the
    earlier attempt logged them already (metrics.jsonl), so only 5 and 6 go on to the logger."""
    path = tmp_path / "m.jsonl"
    path.write_text("".join(f'{{"step": {s}, "data": {{"a": {s}}}}}\n' for s in (3, 4, 5, 6)))
    logger = ListLogger()
    fwd = MetricsForwarder(path, logger, skip_through=4)
    assert fwd.pump() == 2 and [s for s, _ in logger.points] == [5, 6] and fwd.replayed == {3, 4}


def test_steps_verl_logs_after_a_monitor_stop_are_not_forwarded(tmp_path):
    """The nonfinite rule fires at step 2; verl trains on until the job's SIGTERM lands (steps 3-6 on
    CI's cores, some in the same pump as step 2, the rest during the stop's grace): only 1-2 are the run's."""
    from cancelctl.jobs.monitor import RunMonitor
    from cancelctl.spec.monitor import MonitorSpec

    path = tmp_path / "verl_metrics.jsonl"
    def line(s):
        return json.dumps({"step": s, "data": {"actor/pg_loss": "NaN" if s == 2 else 0.5 / s}}) + "\n"

    path.write_text("".join(line(s) for s in (1, 2, 3)).replace('"NaN"', "NaN"))
    mon = RunMonitor(MonitorSpec(), tmp_path)
    logger = ListLogger()
    fwd = MetricsForwarder(path, logger, forward.monitored(lambda s, m: m, mon))
    assert fwd.pump() == 2 and mon.stopped is not None and mon.stopped.step == 2
    with path.open("a") as fh:  # verl still running while the job waits for it to end
        fh.write("".join(line(s) for s in (4, 5, 6)))
    assert fwd.pump() == 0
    assert [s for s, _ in logger.points] == [1, 2] and fwd.last == logger.points[-1][1]


def checkpoints(tmp_path, steps, latest):
    folder = tmp_path / "checkpoints"
    for step in steps:
        (folder / f"global_step_{step}").mkdir(parents=True)
    (folder / "latest_checkpointed_iteration.txt").write_text(str(latest))
    return folder


def test_a_resumed_verl_starts_from_its_newest_checkpoint_whose_step_was_logged(tmp_path):
    """verl saves step 4's checkpoint before it logs step 4: killed in between, auto resume would
    start at step 5 and step 4's metrics would never be logged — an older checkpoint replays it."""
    folder = checkpoints(tmp_path, [2, 4], latest=4)
    assert command.resume_overrides(folder, logged=4) == []  # verl's own auto resume is right
    assert command.resume_overrides(folder, logged=3) == [
        "trainer.resume_mode=resume_path", f"trainer.resume_from_path={folder / 'global_step_2'}"]
    assert command.resume_overrides(folder, logged=1) == ["trainer.resume_mode=disable"]  # replay it all
    assert command.resume_overrides(tmp_path / "none", logged=0) == []  # a first attempt


def test_root_exception_is_the_workers_own_not_rays_wrapper_nor_the_trainers():
    """A reward function that raises fails verl from a Ray worker: the worker's exception line comes
    first (with Ray's coloured "(Worker pid=N)" prefix), then Ray's wrapper and verl's generic error."""
    tail = [
        "/x/verl/workers/engine/__init__.py:69: UserWarning: megatron engine is not available: ModuleNotFoundError(...)",
        "\x1b[36m(AgentLoopWorkerTQ pid=12128)\x1b[0m     raise ValueError('reward broke on purpose: ' + ground_truth)",
        "\x1b[36m(AgentLoopWorkerTQ pid=12128)\x1b[0m ValueError: reward broke on purpose: apple",
        "ray.exceptions.RayTaskError(ValueError): ray::TaskRunnerV1.run() (pid=9, ip=127.0.0.1)",
        "RuntimeError: Sync replay buffer selected terminal groups with no materializable trajectories",
    ]
    assert supervisor.root_exception(tail) == "ValueError: reward broke on purpose: apple"
    assert supervisor.root_exception(tail[3:]) == "RuntimeError: Sync replay buffer selected terminal groups with no materializable trajectories"
    assert supervisor.root_exception(["plain log line", "step:1 - a:1"]) is None
    ray_start = ["Error executing job with overrides: ['a=1']", "Traceback (most recent call last):",
                 "Exception: The current node timed out during startup. This could happen because ..."]
    assert supervisor.root_exception(ray_start) == "Exception: The current node timed out during startup. This could happen because ..."
    # Ray's memory monitor killed workers (seen: two SmolLM2 runs at once on 24 GiB): its own line is the cause
    oom = ["ray.exceptions.RayTaskError(OutOfMemoryError): ray::TaskRunnerV1.run() (pid=7816, ip=127.0.0.1)",
           "ray.exceptions.OutOfMemoryError: 3 worker(s) were killed due to the node running low on memory. "
           "Memory on the node (IP: 127.0.0.1) was 22.36GB used / 23.54GB limit (0.950068)"]
    assert supervisor.root_exception(oom) == oom[1]


def test_previous_attempts_file_is_not_forwarded_again(make_run, fake_verl):
    (fake_verl / command.VERL_METRICS).write_text('{"step": 1, "data": {"old": 1}}\n' * 5)
    logger = ListLogger()
    train(make_run(), fake_verl, logger)
    assert all("old" not in m for _, m in logger.points)


def test_sanitize_key_like_verl():
    assert sanitize_key("val-core/x//y/acc/mean@4") == "val-core/x/y/acc/mean_at_4"
    assert sanitize_key("a(b)") == "a_b_"


def test_job_command_is_the_rendered_one_plus_job_settings(make_run, tmp_path):
    run = make_run()
    job = as_dict(job_command(run, tmp_path)[5:])
    shown = as_dict(render.render_overrides(run))
    assert {k: v for k, v in job.items() if k in shown and k != "trainer.logger"} == {
        k: v for k, v in shown.items() if k != "trainer.logger"
    }


def test_sigterm_stops_verl_at_the_next_poll(make_run, fake_verl, monkeypatch):
    # as inside submitit's job runtime: SIGTERM has a Python handler, which cancelctl defers
    monkeypatch.setenv("FAKE_VERL_SLEEP", "60")
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        with preemption.deferred_signals():
            signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGTERM))
            signal.setitimer(signal.ITIMER_REAL, 0.5)  # SIGTERM while verl runs
            started = time.monotonic()
            with pytest.raises(preemption.Terminated):
                train(make_run(), fake_verl, ListLogger())
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert time.monotonic() - started < 10  # verl was stopped, not waited for (it sleeps 60 s)
    assert json.loads((fake_verl / "argv.json").read_text())  # it had started


def test_verl_killed_by_the_jobs_own_signal_is_a_requeue_not_a_failure(make_run, fake_verl, monkeypatch):
    """`scontrol requeue` / scancel signal every process of the job: verl dies of it (SIGABRT in Ray's
    driver) at about the moment the job's deferred SIGTERM arrives. That is the job being stopped
    (Terminated: submitit requeues), not "verl exited with status -6" recorded as a failed run."""
    monkeypatch.setenv("FAKE_VERL_JOB_SIGNAL", "1")
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        with preemption.deferred_signals(), pytest.raises(preemption.Terminated):
            train(make_run(), fake_verl, ListLogger())
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_monitor_stop_ends_verl_and_returns(make_run, fake_verl, monkeypatch):
    """A NaN at step 2 (verl's keys): the default nonfinite rule (action stop) writes stopped.json,
    verl (sleeping 60 s after its steps) is stopped at the next poll, and train returns normally."""
    from cancelctl.jobs.monitor import read_alerts, read_stop

    monkeypatch.setenv("FAKE_VERL_NAN", "1")
    monkeypatch.setenv("FAKE_VERL_SLEEP", "60")
    monkeypatch.setenv("FAKE_VERL_STEPS", "4")  # verl trained on before the stop reached it: not forwarded
    started = time.monotonic()
    logger = ListLogger()
    result = train(make_run(), fake_verl, logger)
    assert time.monotonic() - started < 30
    stop = read_stop(fake_verl)
    assert stop is not None and (stop.rule, stop.step, stop.metric) == ("nonfinite", 2, "actor/pg_loss")
    assert [(a.rule, a.step) for a in read_alerts(fake_verl)] == [("nonfinite", 2)]
    assert [s for s, _ in logger.points] == [1, 2] and result == logger.points[-1][1]


def test_healthy_verl_run_is_not_stopped(make_run, fake_verl):
    from cancelctl.jobs.monitor import read_stop

    train(make_run(), fake_verl, ListLogger())
    assert read_stop(fake_verl) is None and not (fake_verl / "alerts.jsonl").exists()


TOKEN_BUDGET = "{budget: {steps: null, gen_tokens: 1000}}"  # 10 tokens × 128 responses at step 1 reach it


def test_a_token_budget_ends_verl_at_the_step_reaching_it_and_the_run_completes(make_run, fake_verl, monkeypatch):
    """Step 1 generates 1,280 tokens (≥ 1,000): verl (which logged step 2 too, then sleeps 60 s) is
    ended at the next poll as a monitor stop would, step 2 is not the run's, and nothing says stopped."""
    from cancelctl.jobs.monitor import read_stop

    monkeypatch.setenv("FAKE_VERL_SLEEP", "60")
    started = time.monotonic()
    logger = ListLogger()
    result = train(make_run(TOKEN_BUDGET), fake_verl, logger)
    assert time.monotonic() - started < 30
    assert [s for s, _ in logger.points] == [1] and result == logger.points[0][1]
    assert result["compute/gen_tokens_cum"] == 1280.0
    assert read_stop(fake_verl) is None and not (fake_verl / "alerts.jsonl").exists()
    o = as_dict(json.loads((fake_verl / "argv.json").read_text())[2:])
    assert o["trainer.total_training_steps"] == o["trainer.total_epochs"] == "8"  # ⌈1000 / (32 × 4)⌉: a cap never hit first


def test_a_token_budget_not_yet_reached_lets_verl_run_on(make_run, fake_verl):
    logger = ListLogger()
    train(make_run("{budget: {steps: null, gen_tokens: 5000}}"), fake_verl, logger)  # 3,840 tokens in 2 steps
    assert [s for s, _ in logger.points] == [1, 2]


def test_an_attempt_after_the_budget_was_spent_does_not_start_verl_again(make_run, fake_verl):
    """The job ended verl at the budget step and was requeued before writing its result: the steps it
    logged spent the budget, so the next attempt returns the last one's metrics without running verl."""
    (fake_verl / "metrics.jsonl").write_text(
        '{"step": 1, "ts": 1, "metrics": {"compute/gen_tokens": 1280.0, "actor/pg_loss": 0.5}}\n'
    )
    result = train(make_run(TOKEN_BUDGET), fake_verl, ListLogger())
    assert result == {"compute/gen_tokens": 1280.0, "actor/pg_loss": 0.5}
    assert not (fake_verl / "argv.json").exists()


def test_last_logged_step(tmp_path):
    from cancelctl.tracking.runfiles import encode_metrics_line

    path = tmp_path / "metrics.jsonl"
    assert forward.last_logged_step(path) == 0
    path.write_bytes(b"".join(encode_metrics_line(s, 0, {"x": 1.0}) for s in (1, 2, 3, 2)))
    assert forward.last_logged_step(path) == 3


def test_stop_kills_the_process_group():
    """SIGTERM first (verl may exit on it); what is left of the group is SIGKILLed: a grandchild that
    ignores SIGTERM does not outlive the stop."""
    grandchild = "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(os.getpid(), flush=True); time.sleep(60)"
    code = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {grandchild!r}]); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline())  # the grandchild ignores SIGTERM from here on
    stop_group(proc, supervisor.STOP_GRACE_SECONDS, supervisor.KILL_WAIT_SECONDS)
    assert proc.returncode == -signal.SIGTERM
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead, waiting for init to reap it
    except FileNotFoundError:
        return False


def test_train_checks_the_loss_plugin_before_starting_verl(make_run, fake_verl, monkeypatch):
    def inactive():
        raise RuntimeError("verl cannot run the cancel_* losses: ...; fix: pip install -e .")

    monkeypatch.setattr(supervisor, "check_loss_plugin", inactive)
    with pytest.raises(RuntimeError, match="cannot run the cancel_.* fix"):
        train(make_run(), fake_verl, ListLogger())
    assert not (fake_verl / "argv.json").exists()  # verl never started


def test_check_loss_plugin_is_one_sentence_with_the_fix_and_imports_no_verl(monkeypatch):
    check = "from cancelctl.backends.verl import supervisor; import sys; supervisor.check_loss_plugin(); print('verl' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True).stdout.strip() == "False"
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "none")
    with pytest.raises(RuntimeError, match=r"^verl cannot run the cancel_\* losses: .*; fix: "):
        supervisor.check_loss_plugin()


def test_a_verl_failure_from_an_inactive_plugin_says_so_instead_of_the_workers_error(make_run, fake_verl, monkeypatch):
    monkeypatch.setattr(supervisor, "inactive_plugin", lambda: "verl cannot run the cancel_* losses: ...; fix: pip install -e .")
    monkeypatch.setenv("FAKE_VERL_EXIT", "3")
    with pytest.raises(RuntimeError, match=r"verl exited with status 3: verl cannot run the cancel_\* losses: .*fix"):
        train(make_run(), fake_verl, ListLogger())


@pytest.mark.verl
def test_inactive_plugin_tells_a_plugin_verl_did_not_load(monkeypatch):
    pytest.importorskip("verl")
    assert supervisor.inactive_plugin() is None  # installed and loaded
    from losses import verl_plugin

    monkeypatch.setattr(verl_plugin, "wrapper_installed", lambda: False)
    assert "ppo_loss is not wrapped" in supervisor.inactive_plugin()


def test_spec_keys_are_unprefixed_others_kept():
    assert forward.spec_key("actor/mismatch/rho_std") == "mismatch/rho_std"
    assert forward.spec_key("actor/hacking/J") == "hacking/J"
    assert forward.spec_key("actor/pg_loss") == "actor/pg_loss"
    assert forward.spec_key("critic/dfpo/x") == "critic/dfpo/x"
