"""In-job entry of a verl run: `train(run, run_dir, logger, cache_dir)`, called by cancelctl.jobs.

Runs the rendered `python -m verl.trainer.main_ppo ...` as a child process with three job-local
changes (see `job_overrides`):
- checkpoints go to `<run_dir>/checkpoints` and Hydra's output to `<run_dir>/hydra`, so a requeued
  job resumes (verl's `trainer.resume_mode` is `auto`) and nothing lands in the launch directory;
- verl logs to its `file` backend instead of MLflow, and this process forwards each step's
  metrics to cancelctl's RunLogger (metrics.jsonl record + buffered MLflow, `cancelctl sync` for
  gaps). The metric keys are verl's own, sanitised as verl's MLflow logger does (`@` → `_at_`).
  `render_command` (the spec's settings alone) has `trainer.logger=[console,mlflow]`: the same
  metrics, logged by verl; `cancelctl render` of a SLURM run shows this job command.

The SPEC compute keys (generated tokens, update steps, GPU-hours) are derived from verl's own metrics
on the way (`compute.ComputeAccount`), so `cancelctl report` has its compute axes for verl runs.

The SPEC mechanism keys (mismatch/*, hacking/J, dfpo/*, cancel/*) are computed inside verl's actor
update by the `cancel_*` losses (losses/verl_plugin.py) and come out of verl as `actor/<key>` (verl
prefixes every actor metric); the forwarder logs them under the SPEC keys, as the lab does.

The spec's monitor rules (`cancelctl.jobs.monitor.RunMonitor`) see every forwarded step, as in the lab:
alerts go to alerts.jsonl, and a `stop` rule ends verl (its checkpoints under `checkpoints/` kept)
and returns normally, so the job records the run as stopped.

A generated-token budget (`budget.gen_tokens`) ends the same way, at the first step whose
`compute/gen_tokens_cum` reaches it (`TokenBudget`; verl's own step cap, render.step_cap, is one it
never reaches first): later steps verl logged are not forwarded, and the run is completed, not
stopped. verl validates at `trainer.test_freq` steps only, so its last evaluation is the last one at
or before that step (an update-step budget is a known step count: verl ends there itself, with its
final validation and checkpoint).

Before verl starts, `check_loss_plugin` checks in this process (same environment as verl's driver and
workers) that verl will load the loss plugin (its entry point, VERL_USE_EXTERNAL_PLUGINS), without
importing verl. If verl then fails, `inactive_plugin` imports verl here to tell whether the plugin
itself failed to load — verl logs that only at DEBUG, and the run fails (or would train without
group ids) deep inside a worker — and says so instead of the worker's error.

Multi-node runs (`cluster.nodes > 1`): `cancelctl.jobs` has already formed the allocation's Ray cluster
(`cancelctl.jobs.raycluster`: head on rank 0, every node joined, RAY_ADDRESS exported) before this runs on
rank 0; verl's `main_ppo` calls `ray.init` only when Ray is not initialised, so with RAY_ADDRESS set it
joins that cluster, and `trainer.nnodes` (render.py) sizes its resource pool. With one node verl's
own `ray.init` starts a local cluster.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from cancelctl.backends.verl import render
from cancelctl.backends.verl.compute import GEN_TOKENS_CUM, ComputeAccount
from cancelctl.backends.verl.data_files import absolute
from cancelctl.backends.verl.render import config_name, launch_blockers, render_override_set
from cancelctl.jobs import preemption
from cancelctl.jobs.monitor import RunMonitor
from cancelctl.spec.run import RunSpec
from cancelctl.tracking.runfiles import iter_metrics_lines
from cancelctl.workdir import METRICS_JSONL, RUN_JSON

VERL_METRICS = "verl_metrics.jsonl"
ROLLOUT_WEIGHTS = "rollout_weights.jsonl"  # cluster.device cpu: the hf_cpu rollout's weight syncs
POLL_SECONDS = 1.0  # how soon a `stop` rule or a signal reaches verl; a pump reads only new lines
STOP_GRACE_SECONDS = 30.0
SIGNAL_GRACE_SECONDS = 1.0  # how long a failed verl waits for the job's own signal to arrive
_ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"
# verl's MLflow key sanitising (utils/tracking.py), so keys match what verl itself would log.
_INVALID_KEY_CHARS = re.compile(r"[^/\w.\- :]")
_SLASHES = re.compile(r"/+")
# SPEC mechanism keys the loss plugin logs; verl's _update_actor prefixes them with "actor/".
MECHANISM_PREFIXES = ("mismatch/", "hacking/", "dfpo/", "cancel/")


def job_overrides(run: RunSpec, run_dir: Path, launch_dir: Path | None = None) -> list[str]:
    """verl's overrides in the job. verl runs in the run folder, so relative data and reward paths
    are made absolute against `launch_dir` (where `cancelctl sweep` ran; run.json keeps it), and so
    is a model path that names a folder there (`model prepare`'s models/NAME; a Hub id stays)."""
    overrides = render_override_set(run)
    if launch_dir is not None:  # the renderer's own values, made absolute (pkg:// paths stay as they are)
        for key in ("data.train_files", "data.val_files"):
            overrides.set(key, [absolute(f, launch_dir) for f in overrides.settings[key].value])
        model = overrides.settings["actor_rollout_ref.model.path"]
        model_dir = absolute(model.value, launch_dir)
        if Path(model_dir).is_dir():
            overrides.set(model.key, model_dir)
        reward = overrides.settings.get("reward.custom_reward_function.path")
        if reward is not None:
            overrides.set(reward.key, absolute(reward.value, launch_dir))
    overrides.set("trainer.logger", ["console", "file"])
    overrides.set("trainer.default_local_dir", str(run_dir / "checkpoints"))
    overrides.set("hydra.run.dir", str(run_dir / "hydra"))
    # The file logger lives in verl's TaskRunner and the CPU runtime in every worker (Ray actors, any
    # node): the job's env goes through Ray's runtime_env as well as our own environment.
    for name, value in {**render.job_env(run), **run_files_env(run, run_dir)}.items():
        overrides.set(f"{_ENV_VARS}.{name}", value, add=True)
    return overrides.lines()


def run_files_env(run: RunSpec, run_dir: Path) -> dict[str, str]:
    """Where verl's processes write into the run folder: the metrics file logger, and on CPU the
    rollout's weight-sync record (one line per update: version = step + 1 when weights follow)."""
    env = {"VERL_FILE_LOGGER_PATH": str(run_dir / VERL_METRICS)}
    if run.spec.cluster.device == "cpu":
        from cancelctl.backends.verl.cpu import WEIGHT_LOG_ENV

        env[WEIGHT_LOG_ENV] = str(run_dir / ROLLOUT_WEIGHTS)
    return env


def job_command(run: RunSpec, run_dir: Path, python: str | None = None, launch_dir: Path | None = None) -> list[str]:
    """verl's command in the job; `python`: the job's own interpreter (the one with cancelctl and verl
    installed; a bare `python3` on a node's PATH may be another), shown as `python3` by `render`."""
    entry = [python, *render.VERL_ENTRY[1:]] if python else render.VERL_ENTRY
    return [*entry, "--config-name", config_name(run), *job_overrides(run, run_dir, launch_dir)]


def launch_dir_of(run_dir: Path) -> Path:
    """Where `cancelctl sweep` ran for this run (run.json), else the job's own working directory."""
    try:
        recorded = json.loads((Path(run_dir) / RUN_JSON).read_text(encoding="utf-8")).get("launch_dir")
    except (OSError, ValueError):
        recorded = None
    return Path(recorded) if recorded else Path.cwd()


def train(run: RunSpec, run_dir: Path, logger: Any, cache_dir: Path | None = None) -> dict[str, float]:
    """Run verl to the end; returns the last logged step's metrics. Raises if verl fails."""
    blockers = launch_blockers(run)
    if blockers:
        raise RuntimeError(f"verl run {run.name} cannot start: " + "; ".join(blockers))
    check_loss_plugin()
    run_dir = Path(run_dir)
    # A requeued attempt: the previous one forwarded its lines already (its last pump runs on exit).
    (run_dir / VERL_METRICS).unlink(missing_ok=True)
    env = dict(os.environ, **render.job_env(run), **run_files_env(run, run_dir))
    if run.spec.cluster.device == "cpu":  # submitit's local executor sets "" (no GPU): Ray then refuses the
        env.pop("CUDA_VISIBLE_DEVICES", None)  # CPU runtime's one logical GPU, a placeholder bound to no device
    compute = ComputeAccount.from_run_dir(run, run_dir / METRICS_JSONL)  # earlier attempts' steps
    # verl resumes from a checkpoint at step k <= the last step logged (resume_overrides), and logs
    # k+1… again: the rules' windows are refilled from the steps logged, and the replayed steps are not forwarded
    # (MLflow holds each step once)
    logged = last_logged_step(run_dir / METRICS_JSONL)
    budget = TokenBudget(run)
    if budget.reached_before(compute, logged):  # an earlier attempt ended at the budget, then lost its result
        return last_logged_metrics(run_dir / METRICS_JSONL)
    mon = RunMonitor(run.spec.monitor, run_dir, resume_step=logged)
    # a first attempt skips nothing: verl's step-0 line is the evaluation before training
    # (trainer.val_before_train), the baseline of every held-out gain
    replayed = logged if any(True for _ in iter_metrics_lines(run_dir / METRICS_JSONL)) else -1
    forwarder = MetricsForwarder(run_dir / VERL_METRICS, logger, monitored(compute.add, mon, budget), skip_through=replayed)
    # Own session: on cancel/requeue the whole tree (verl driver, Ray started by it) is stopped.
    command = [*job_command(run, run_dir, sys.executable, launch_dir_of(run_dir)), *resume_overrides(run_dir / "checkpoints", logged)]
    proc = subprocess.Popen(command, cwd=run_dir, env=env, start_new_session=True, stderr=subprocess.PIPE)
    stderr = StderrTail(proc.stderr)  # still the job's stderr; its tail names a failed worker's exception
    try:
        while proc.poll() is None:
            forwarder.pump()
            if mon.stopped is not None or budget.reached_at is not None:  # a `stop` rule fired (the run is
                _stop(proc)  # stopped, not failed), or the token budget is spent (the run is completed)
                break
            # USR2 → submitit requeues; SIGTERM → Terminated; either way `finally` stops verl, which
            # resumes from its own checkpoints (trainer.save_freq), so there is nothing to save here.
            preemption.at_step_boundary(lambda: None)
            time.sleep(POLL_SECONDS)
    finally:
        # forward what verl wrote before stopping it: a requeue may SIGKILL this job seconds later;
        # verl is stopped even when forwarding cannot go on (a stale attempt, fencing.StaleAttempt)
        try:
            forwarder.pump()
        finally:
            if proc.poll() is None:
                _stop(proc)
            stderr.join()
        forwarder.pump()
    if mon.stopped is not None or budget.reached_at is not None:
        return forwarder.last
    if proc.returncode != 0:
        # SLURM signals every process of the job at once (requeue, scancel, time limit): verl dying of
        # that signal is the job being stopped, which preemption turns into a requeue or Terminated
        deadline = time.monotonic() + SIGNAL_GRACE_SECONDS
        while not preemption.pending() and time.monotonic() < deadline:
            time.sleep(0.05)
        preemption.at_step_boundary(lambda: None)
        cause = inactive_plugin() or root_exception(stderr.lines)
        raise RuntimeError(
            f"verl exited with status {proc.returncode}" + (f": {cause}" if cause else "")
            + f" (run {run.name}; log: job stderr)"
        )
    return forwarder.last


class StderrTail:
    """Copies a child's stderr to this process's, line by line, keeping the last `keep` lines."""

    def __init__(self, stream: Any, keep: int = 3000):
        self.lines: deque[str] = deque(maxlen=keep)
        self._thread = threading.Thread(target=self._copy, args=(stream,), daemon=True)
        self._thread.start()

    def _copy(self, stream: Any) -> None:
        out = getattr(sys.stderr, "buffer", None)
        for raw in iter(stream.readline, b""):
            if out is not None:
                out.write(raw)
                out.flush()
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
        stream.close()

    def join(self, timeout: float = 10.0) -> None:
        self._thread.join(timeout)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RAY_PREFIX = re.compile(r"^\((?:\w+ )?pid=\d+(?:, ip=[^)]*)?\)\s*")  # "(RewardLoopWorker pid=12)" on worker lines
# bare `Exception: ...` too: Ray raises one when its node times out at start-up on a loaded machine
_EXCEPTION_LINE = re.compile(r"^(?P<name>(?:[A-Za-z_][\w.]*)?(?:Error|Exception|Exit|Interrupt))(?:\((?P<inner>\w+)\))?: (?P<msg>.+)")
_WRAPPERS = ("ray.exceptions.", "RayTaskError", "RayActorError", "ActorDiedError")
# Ray's own root causes under its wrapper prefix: its memory monitor killing workers names the node's
# memory ("3 worker(s) were killed ... 22.36GB used / 23.54GB limit"); the wrappers then say only OOM
_RAY_CAUSES = ("ray.exceptions.OutOfMemoryError",)


def root_exception(lines: Iterable[str]) -> str | None:
    """The first exception line in verl's stderr that is not one of Ray's wrappers: the exception a
    worker (reward, rollout, actor) raised, which the driver then re-raises inside RayTaskError and
    verl's own generic errors. None when there is none."""
    for line in lines:
        text = _RAY_PREFIX.sub("", _ANSI.sub("", line)).strip()
        match = _EXCEPTION_LINE.match(text)
        if match and (match.group("name") in _RAY_CAUSES or not match.group("name").startswith(_WRAPPERS)):
            return f"{match.group('name')}: {match.group('msg')}"
    return None


def monitored(
    derive: Callable[[int, dict[str, float]], dict[str, float]], mon: RunMonitor, budget: TokenBudget | None = None
) -> Callable[[int, dict[str, float]], dict[str, float] | None]:
    """The forwarder's `derive`: add the compute keys, then let the monitor rules see the step; None
    (not forwarded) for a step after the one that spent the token budget or fired a `stop` rule: verl
    trains on until the job's SIGTERM reaches it (on CPU a few steps), and the run ends at the rule's step."""

    def step(s: int, m: dict[str, float]) -> dict[str, float] | None:
        if budget is not None and budget.reached_at is not None and s > budget.reached_at:
            return None
        if mon.stopped is not None and s > mon.stopped.step:
            return None
        m = derive(s, m)
        mon.observe(s, m)  # alerts.jsonl; a stop writes stopped.json and sets mon.stopped
        if budget is not None:
            budget.observe(s, m)
        return m

    return step


class TokenBudget:
    """`budget.gen_tokens` in the job: the first step whose `compute/gen_tokens_cum` reaches it (every
    rollout of that step counts, so the run overshoots by less than that step's tokens)."""

    def __init__(self, run: RunSpec) -> None:
        self.amount = run.spec.budget.gen_tokens  # None: no token budget, nothing to watch
        self.reached_at: int | None = None

    def observe(self, step: int, metrics: dict[str, float]) -> None:
        if self.amount is not None and self.reached_at is None and metrics.get(GEN_TOKENS_CUM, 0.0) >= self.amount:
            self.reached_at = step

    def reached_before(self, compute: ComputeAccount, logged: int) -> bool:
        """Whether the steps an earlier attempt logged already spent the budget."""
        return self.amount is not None and logged > 0 and compute.gen_tokens_through(logged) >= self.amount


def last_logged_metrics(metrics_jsonl: Path) -> dict[str, float]:
    """The metrics of the last step an earlier attempt logged (its last line for that step)."""
    last: dict[int, dict[str, float]] = {}
    for line in iter_metrics_lines(metrics_jsonl):
        last[line.step] = {**last.get(line.step, {}), **line.metrics}
    return last[max(last)] if last else {}


def last_logged_step(metrics_jsonl: Path) -> int:
    """The last step an earlier attempt logged (0 when none): where the monitor's replay ends."""
    return max((line.step for line in iter_metrics_lines(metrics_jsonl)), default=0)


def resume_overrides(checkpoints: Path, logged: int) -> list[str]:
    """Where a resumed verl starts: its newest checkpoint whose step the run has logged.

    verl saves a step's checkpoint before it logs the step, so a job killed in between leaves a
    checkpoint ahead of the metrics, and verl's `auto` resume would skip that step's metrics for good.
    An older checkpoint replays the step instead (the forwarder skips the steps already logged); with
    none at or below `logged`, verl starts over. [] when `auto` already picks a logged step."""
    marker = checkpoints / "latest_checkpointed_iteration.txt"  # verl writes it once a save is whole
    try:
        latest = int(marker.read_text().strip())
    except (OSError, ValueError):
        return []
    if latest <= logged:
        return []
    steps = (p.name.removeprefix("global_step_") for p in checkpoints.glob("global_step_*"))
    usable = [int(step) for step in steps if step.isdigit() and int(step) <= logged]  # older than `latest`, so whole
    if not usable:
        return ["trainer.resume_mode=disable"]
    return ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={checkpoints / f'global_step_{max(usable)}'}"]


def check_loss_plugin() -> None:
    """Fail before verl starts, in one sentence with the fix, if verl would not load our losses (its
    entry point missing, or VERL_USE_EXTERNAL_PLUGINS excluding it). Checked without importing verl:
    that costs ~11 CPU-s, once more per run than verl's own processes pay."""
    from losses.verl_entry_point import PluginNotActive, assert_declared

    try:
        assert_declared()
    except PluginNotActive as exc:
        raise RuntimeError(f"verl cannot run the cancel_* losses: {exc}") from None


def inactive_plugin() -> str | None:
    """After verl failed: whether the plugin failed to load in verl (verl logs that only at DEBUG, and
    then fails on an unknown cancel_* loss or trains dfpo without group ids), as the sentence to show."""
    try:
        import verl  # noqa: F401  (~11 s: only on this path)
    except ImportError:
        return None  # verl itself is missing: its own error says so
    try:
        from losses.verl_plugin import PluginNotActive, assert_active
    except Exception as exc:  # noqa: BLE001 — what verl's plugin loader met and logged at DEBUG
        return f"verl cannot run the cancel_* losses: importing losses.verl_plugin fails ({type(exc).__name__}: {exc})"
    try:
        assert_active()
    except PluginNotActive as exc:
        return f"verl cannot run the cancel_* losses: {exc}"
    return None


def spec_key(key: str) -> str:
    """verl's `actor/dfpo/asym` → the SPEC's `dfpo/asym`; other keys unchanged."""
    inner = key[len("actor/") :] if key.startswith("actor/") else None
    return inner if inner is not None and inner.startswith(MECHANISM_PREFIXES) else key


class MetricsForwarder:
    """Tails verl's file-logger JSONL ({"step": n, "data": {...}} per line) into a RunLogger."""

    def __init__(
        self,
        path: Path,
        logger: Any,
        derive: Callable[[int, dict[str, float]], dict[str, float] | None] | None = None,
        skip_through: int = -1,
    ):
        self.path = Path(path)
        self.logger = logger
        self.derive = derive  # adds derived keys (the SPEC compute keys) to a step's metrics
        self.skip_through = skip_through  # steps an earlier attempt logged: a resumed verl replays them
        self.replayed: set[int] = set()
        self.offset = 0
        self.last: dict[str, float] = {}
        self.skipped_keys: set[str] = set()

    def pump(self) -> int:
        """Forward the complete lines written since the last call; returns how many steps."""
        if not self.path.exists():
            return 0
        if self.path.stat().st_size < self.offset:  # rewritten from scratch: start over
            self.offset = 0
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a half-written last line waits for the next pump
        self.offset += len(complete)
        steps = 0
        for raw in complete.splitlines():
            if not raw.strip():
                continue
            record = json.loads(raw)
            metrics = self._numeric(record.get("data") or {})
            step = int(record["step"])
            if metrics and step <= self.skip_through:
                self.replayed.add(step)
            elif metrics:
                if self.derive is not None:
                    metrics = self.derive(step, metrics)
                    if metrics is None:  # past the step the run ended at
                        continue
                self.logger.log(step, metrics)
                self.last = metrics
                steps += 1
        return steps

    def _numeric(self, data: dict) -> dict[str, float]:
        out = {}
        for key, value in data.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue  # tables / strings: MLflow metrics are numbers
            name = spec_key(sanitize_key(str(key)))
            if not name or name.startswith("/") or name.endswith("/") or os.path.normpath(name) != name:
                self.skipped_keys.add(str(key))
                continue
            out[name] = float(value)
        return out


def sanitize_key(key: str) -> str:
    return _INVALID_KEY_CHARS.sub("_", _SLASHES.sub("/", key.replace("@", "_at_")))[:250]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the child's process group, SIGKILL it after a grace period."""
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_SECONDS), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
