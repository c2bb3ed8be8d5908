"""In-job entry of a verl run: `train(run, run_dir, logger, cache_dir)`, called by cancelctl.jobs.

Runs verl's job command (command.py: the rendered `python -m verl.trainer.main_ppo ...` with the
job's checkpoints, Hydra output and file logger in the run folder, resumed from a checkpoint whose
step the run has logged) as a child process in its own session, and supervises it: while it runs,
its metrics are forwarded to cancelctl's RunLogger (forward.py: the keys of docs/metrics.md, the compute keys, the
spec's monitor rules and the token budget see every step), and its stderr is copied to the job's and
its tail kept (`StderrTail`), so that a failed verl is reported with the exception a worker raised
(`root_exception`), not only Ray's wrappers.

The child is stopped (SIGTERM to its process group, SIGKILL after a grace: cancelctl.jobs.children,
which the Ray cluster of a multi-node job uses too) when a monitor `stop` rule fires — its checkpoints
under `checkpoints/` kept, `train` returns normally and the job records the run as stopped — when the
generated-token budget is spent (the run is completed, not stopped; verl's own step cap,
render.step_cap, is one it never reaches first; verl validates at `trainer.test_freq` steps only, so
its last evaluation is the last one at or before that step; an update-step budget is a known step
count: verl ends there itself, with its final validation and checkpoint), and when the job is
signalled (USR2 → submitit requeues, SIGTERM → Terminated; verl resumes from its own checkpoints).

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

import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cancelctl.backends.verl.cpu.render import job_env
from cancelctl.backends.verl.command import ROLLOUT_WEIGHTS, VERL_METRICS, job_command, launch_dir_of, resume_overrides, run_files_env
from cancelctl.backends.verl.compute import ComputeAccount
from cancelctl.backends.verl.forward import (
    MetricsForwarder,
    TokenBudget,
    last_logged_metrics,
    last_logged_step,
    monitored,
)
from cancelctl.backends.verl.render import launch_blockers
from cancelctl.installed import installed
from cancelctl.jobs import preemption
from cancelctl.jobs.children import stop_group
from cancelctl.jobs.heartbeat import beat
from cancelctl.jobs.monitor import RunMonitor
from cancelctl.spec.run import RunSpec
from cancelctl.tracking.runfiles import iter_metrics_lines
from cancelctl.workdir import METRICS_JSONL

if TYPE_CHECKING:
    from cancelctl.tracking.logger import MetricLogger

POLL_SECONDS = 1.0  # how soon a `stop` rule or a signal reaches verl; a pump reads only new lines
STOP_GRACE_SECONDS = 30.0  # verl's SIGTERM, then SIGKILL to what is left of its process group
KILL_WAIT_SECONDS = 10.0
SIGNAL_GRACE_SECONDS = 1.0  # how long a failed verl waits for the job's own signal to arrive


def train(run: RunSpec, run_dir: Path, logger: MetricLogger, cache_dir: Path | None = None) -> dict[str, float]:
    """Run verl to the end; returns the last logged step's metrics. Raises if verl fails."""
    blockers = launch_blockers(run)
    if blockers:
        raise RuntimeError(f"verl run {run.name} cannot start: " + "; ".join(blockers))
    check_loss_plugin()
    run_dir = Path(run_dir)
    # A requeued attempt: the previous one forwarded its lines already (its last pump runs on exit).
    (run_dir / VERL_METRICS).unlink(missing_ok=True)
    env = dict(os.environ, **job_env(run), **run_files_env(run, run_dir))
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
    written = (0, _size(run_dir / ROLLOUT_WEIGHTS))  # an earlier attempt's syncs are no progress of this one
    try:
        while proc.poll() is None:
            forwarder.pump()
            written = _beat_on_steps(run_dir, written)
            # a `stop` rule fired (the run is stopped, not failed), or the token budget is spent (completed)
            if mon.stopped is not None or budget.reached_at is not None:
                stop_group(proc, STOP_GRACE_SECONDS, KILL_WAIT_SECONDS)
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
                stop_group(proc, STOP_GRACE_SECONDS, KILL_WAIT_SECONDS)
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


def _beat_on_steps(run_dir: Path, written: tuple[int, int]) -> tuple[int, int]:
    """A step verl wrote, forwarded or not (a requeued attempt's replayed steps are not), is progress
    for the stall watchdog (`cancelctl.jobs.heartbeat`), and so is a weight sync the CPU rollout
    recorded (a phase: the update ended); returns the sizes of both files now. Phases inside a step come
    from cancelctl's trainer (trainer.py) where the run uses it."""
    steps, syncs = (_size(run_dir / VERL_METRICS), _size(run_dir / ROLLOUT_WEIGHTS))
    if steps > written[0]:
        beat(run_dir)  # a step (verl's own file holds nothing else)
    elif syncs > written[1]:
        beat(run_dir, phase="weight sync")
    return steps, syncs


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


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


def check_loss_plugin() -> None:
    """Fail before verl starts, in one sentence with the fix, if verl would not load our losses (its
    entry point missing, or VERL_USE_EXTERNAL_PLUGINS excluding it). Checked without importing verl:
    that costs seconds of CPU, once more per run than verl's own processes pay."""
    from losses.verl_entry_point import PluginNotActive, assert_declared

    try:
        assert_declared()
    except PluginNotActive as exc:
        raise RuntimeError(f"{_cannot_run_our_losses()}: {exc}") from None


def inactive_plugin() -> str | None:
    """After verl failed: whether the plugin failed to load in verl (verl logs that only at DEBUG, and
    then fails on an unknown cancel_* loss or trains dfpo without group ids), as the sentence to show."""
    if not installed("verl"):
        return None  # verl itself is missing: its own error says so
    import verl  # noqa: F401 — loads the plugins as verl's processes do (seconds: only on this failure path)

    try:
        from losses.verl_plugin import PluginNotActive, assert_active
    except Exception as exc:  # noqa: BLE001 — what verl's plugin loader met and logged at DEBUG
        return f"{_cannot_run_our_losses()}: importing losses.verl_plugin fails ({type(exc).__name__}: {exc})"
    try:
        assert_active()
    except PluginNotActive as exc:
        return f"{_cannot_run_our_losses()}: {exc}"
    return None


def _cannot_run_our_losses() -> str:
    from losses.catalog import VERL_LOSS_PREFIX  # on failure paths only: `losses` imports torch

    return f"verl cannot run the {VERL_LOSS_PREFIX}* losses"
