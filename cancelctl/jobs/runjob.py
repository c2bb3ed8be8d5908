"""What runs inside a job: one RunSpec, from its run folder, through its backend, into tracking.

`RunJob(run_dir, token)` is the picklable callable the executors hand to submitit (SLURM array task,
local process) or call in-process (debug). It reads `run.json` (written at launch), opens a
`RunLogger`, calls its backend's `train(run, run_dir, logger, cache_dir)` (`cancelctl.backends.protocol`) and closes
the logger with the outcome (the files it leaves: `cancelctl.jobs.outcome`). It is a submitit
`Checkpointable`: on preemption or timeout (USR2) submitit requeues the same call and the backend
resumes from `run_dir/checkpoint.pt`; a plain `scontrol requeue` restarts the job the same way.
Those signals are deferred to the backend's next step boundary, where it checkpoints first
(`cancelctl.jobs.preemption`), so a requeue loses at most the step in flight. On a multi-node
allocation rank 0 runs the workload inside the allocation's Ray cluster (`cancelctl.jobs.raycluster`)
and the other ranks serve it.

Failures are never swallowed: the exception is written to error.txt, the MLflow run is closed
FAILED, and the exception propagates so the scheduler marks the job failed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from submitit.helpers import Checkpointable, DelayedSubmission

from cancelctl import fencing
from cancelctl.fileio import file_lock_if_free, unreadable_cause
from cancelctl.jobs.outcome import (
    current_job_id,
    ERROR_RESERVE,
    archive_error,
    archive_stop,
    end_attempt,
    reserve_error_space,
    start_attempt,
    write_error,
    write_result,
)
from cancelctl.workdir import RunFolder

if TYPE_CHECKING:
    from cancelctl.tracking import RunLogger

log = logging.getLogger("cancelctl.jobs")

ATTEMPT_LOCK_WAIT_S = 60.0  # an earlier attempt still closing its run (the scheduler's kill wait is ~30 s)


class RunJob(Checkpointable):
    """Run the RunSpec stored in `run_dir/run.json`. `threads` caps torch's intra-op threads
    (set from the cores the job owns, so parallel local runs do not oversubscribe the CPU)."""

    def __init__(self, run_dir: str | Path, token: str, threads: int | None = None) -> None:
        self.run_dir = str(run_dir)
        self.token = token
        self.threads = threads

    def __call__(self) -> dict[str, float]:
        from cancelctl.jobs.allocation import Allocation
        from cancelctl.jobs.raycluster import serve_worker

        allocation = Allocation.from_env()  # None unless this is one task of a multi-node job
        if allocation is not None:
            allocation = allocation.for_device(run_device(Path(self.run_dir)))
        if allocation is not None and not allocation.is_head:
            # a worker node of the run's Ray cluster: the run folder, MLflow and requeue are rank 0's
            serve_worker(allocation, Path(self.run_dir))
            return {}
        return run_in_folder(Path(self.run_dir), token=self.token, threads=self.threads, allocation=allocation)

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission:
        # Called at a step boundary (cancelctl.jobs.preemption) just after the backend saved its
        # checkpoint; the requeued call reads it. metrics.jsonl is flushed line by line.
        return DelayedSubmission(RunJob(self.run_dir, self.token, self.threads))

    def __repr__(self) -> str:
        return f"RunJob({self.run_dir!r}, token={self.token!r})"


def read_run_json(run_dir: Path) -> dict[str, Any]:
    """The run's record (written at launch); a damaged one is one line naming the file."""
    path = RunFolder(run_dir).run_json
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path}: unreadable run record ({unreadable_cause(exc)}); "
                         f"`cancelctl sweep FILE` writes it again") from None


def run_device(run_dir: Path) -> str:
    """The run's `cluster.device` (every rank reads it: each node's Ray offers what the run needs)."""
    from cancelctl.spec.run import RunSpec

    record = read_run_json(run_dir)
    return RunSpec.from_json(record["run"]).spec.cluster.device


def run_in_folder(run_dir: Path, *, token: str = "", threads: int | None = None, allocation: Any = None) -> dict[str, float]:
    """`allocation` (a multi-node job's rank 0, `raycluster.Allocation`): the run's workload runs
    inside a Ray cluster over all its nodes (`raycluster.run_cluster`)."""
    record = read_run_json(run_dir)
    _refuse_stale(run_dir, record["run"]["run_id"], token)  # before the fence: a stale job claims nothing
    # The fence first: an earlier attempt still alive (a requeue that raced a resubmit, a job the
    # scheduler lost track of) stops at its next write, without writing (`cancelctl.fencing`).
    fence = fencing.claim(run_dir, current_job_id())
    # The attempt lock, held while this process may still write the run's outcome: settle_tracking
    # leaves the run alone while it is held (a scancelled run closing itself KILLED at its next
    # step) and settles it once released, which a SIGKILL does too. A holder that lingers (an
    # earlier attempt still closing) delays a requeued attempt, never stops it.
    lock = RunFolder(run_dir).attempt_lock
    with file_lock_if_free(lock, ATTEMPT_LOCK_WAIT_S, what="run attempt") as held, fencing.hold(fence):
        if not held:
            log.warning("%s held by another process for over %.0f s; starting anyway", lock, ATTEMPT_LOCK_WAIT_S)
        try:
            return _run_attempt(run_dir, token=token, threads=threads, allocation=allocation, fence=fence.number)
        except fencing.StaleAttempt as exc:
            log.error("%s", exc)  # the job's log says why it ended; the run folder is the newer attempt's
            raise


def _run_attempt(run_dir: Path, *, token: str, threads: int | None, allocation: Any, fence: int = 0) -> dict[str, float]:
    from cancelctl.jobs import preemption
    from cancelctl.jobs.stall_close import tag_stalls
    from cancelctl.jobs.watchdog import watching
    from cancelctl.jobs.deadline import for_this_job
    from cancelctl.spec.run import RunSpec
    from cancelctl.tracking import RunLogger
    from cancelctl.jobs.hardware import describe_hardware
    from cancelctl.tracking.runfiles import run_store_uri
    from cancelctl.tracking.tags import hardware_tags

    record = read_run_json(run_dir)
    run = RunSpec.from_json(record["run"])
    folder = RunFolder(run_dir)  # paths pinned at launch follow a moved or copied work dir
    cache_dir = folder.relocated(record["cache_dir"], record.get("workdir"))
    if threads:
        _limit_threads(threads)
    hardware = describe_hardware(threads)
    start_attempt(run_dir, token, hardware)
    # the stall watchdog, another process that ends and requeues this attempt if it stops making progress:
    # from the attempt's first record on, so a hang before training (a store that never answers) is one too
    with watching(run_dir, run.spec.monitor.stall, fence=fence, token=token, job_id=current_job_id(),
                  executor=os.environ.get("SUBMITIT_EXECUTOR")):
        RunFolder(run_dir).result.unlink(missing_ok=True)
        archive_error(run_dir)  # how an earlier attempt ended (e.g. SIGTERM before a requeue) is history now
        reserve_error_space(run_dir)
        archive_stop(run_dir)  # so is an earlier attempt's monitor stop (a run resumed with --retry-stopped)
        logger: RunLogger | None = None
        try:  # from the store's connection on: SLURM's USR2 can come while it waits for a busy store
            logger = RunLogger(run_dir, run_store_uri(record, run_dir), record.get("mlflow_run_id"))
            logger.set_tags(hardware_tags(hardware))  # the latest attempt's; attempts.jsonl keeps each one's
            tag_stalls(logger, run_dir)
            train = backend_train(run.spec.backend)
            if allocation is not None:
                from cancelctl.jobs.raycluster import run_cluster

                cluster = run_cluster(allocation, run_dir, logger)
            else:
                cluster = contextlib.nullcontext()
            # USR2/SIGTERM wait for the backend's step boundary, as does leaving before the time limit
            # (jobs.deadline); a closed terminal interrupts like Ctrl-C
            deadline = for_this_job(run_dir)
            with cluster, preemption.deferred_signals(deadline=deadline), _hangup_interrupts():
                result = train(run, run_dir, logger, cache_dir)
        except fencing.StaleAttempt:  # a newer attempt owns the run folder: nothing more is written
            raise
        except KeyboardInterrupt:  # local cancel / Ctrl-C: resumable, not a failure of the run
            write_error(run_dir, "INTERRUPTED")
            _close(logger, "KILLED")
            end_attempt(run_dir, token, "interrupted")
            raise
        except preemption.Terminated:  # SIGTERM (requeue, preemption, kill): checkpointed, resumable
            write_error(run_dir, "INTERRUPTED")
            _close(logger, "KILLED")  # a requeued attempt marks it RUNNING again
            end_attempt(run_dir, token, "terminated")
            raise
        except SystemExit:  # submitit's USR2 handler requeued the job (after our checkpoint) and exits
            # the record first: SLURM kills the requeued step after its KillWait, and flushing to a busy
            # store can take longer than that (its points stay in metrics.jsonl for the next attempt)
            end_attempt(run_dir, token, "requeued")
            if logger is not None:
                logger.flush()
            raise
        except BaseException:
            write_error(run_dir, "FAILED")
            with contextlib.suppress(OSError):  # a full disk must not hide the run's own error behind its own
                _close(logger, "FAILED")
            with contextlib.suppress(OSError):
                end_attempt(run_dir, token, "failed")
            raise
        result = {str(k): float(v) for k, v in (result or {}).items()}
        stop = read_stop(run_dir)
        if stop is not None:  # a monitor rule ended the run at a step boundary, its checkpoint kept
            _tag_stopped(logger, run_dir, stop)
        logger.close("FINISHED")
        (run_dir / ERROR_RESERVE).unlink(missing_ok=True)
        write_result(run_dir, result, token=token, **({"stopped": stop.to_json()} if stop is not None else {}))
        end_attempt(run_dir, token, "stopped" if stop is not None else "finished")
        return result


def _close(logger: RunLogger | None, status: str) -> None:
    if logger is not None:  # None: the attempt ended before its store connection was made
        logger.close(status)


@contextlib.contextmanager
def _hangup_interrupts():
    """A closed terminal (SIGHUP to the launcher's process group) interrupts a run like Ctrl-C: it
    records INTERRUPTED (resumable) instead of dying without a word. Only where nothing else
    handles SIGHUP (a job process, not the CLI running a debug run in process)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGHUP) is not signal.SIG_DFL:
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt("SIGHUP")

    signal.signal(signal.SIGHUP, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def read_stop(run_dir: Path):
    """The monitor alert that stopped this run (stopped.json), or None (cancelctl.jobs.monitor.read_stop)."""
    from cancelctl.jobs.monitor import read_stop as read

    return read(run_dir)


def _tag_stopped(logger: Any, run_dir: Path, stop: Any) -> None:
    """Tag the MLflow run with the rule and step that stopped it; alerts.jsonl as an artifact."""
    from cancelctl.tracking.tags import stopped_tags

    logger.set_tags(stopped_tags(stop.rule, stop.step))
    logger.log_artifact(RunFolder(run_dir).alerts)


class StaleSubmission(RuntimeError):
    """This job's submission is no longer the run's current one (cancelled, or submitted again)."""


def _refuse_stale(run_dir: Path, run_id: str, token: str) -> None:
    """A job starting after its run was cancelled or resubmitted must not run it (twice): e.g. a
    local process still starting when `cancel` stopped its controller. Checked before anything is
    written to the run folder, so the current submission's files stay as they are."""
    from cancelctl.manifest import ManifestStore

    store = ManifestStore(RunFolder(run_dir).sweep_manifest)
    if not token or not store.exists():
        return  # a run folder used outside a sweep
    manifest = store.load()
    latest = manifest.latest_submission(run_id)
    if latest is None or latest[0].token != token:
        current = latest[0].token if latest else None
        raise StaleSubmission(f"run {run_id}: submission {token} was superseded by {current}; not running it")
    entry, sub = manifest.runs[run_id], latest[0]
    if entry.cancelled_at is not None and entry.cancelled_at >= sub.created_at:
        raise StaleSubmission(f"run {run_id}: cancelled before submission {token} started; not running it")


def backend_train(name: str):
    """The `train` of the backend registered as `name` (`cancelctl.backends.protocol.Backend`, found
    through the spec's catalog: the job side never imports a backend by name); its module imports
    torch or verl only when called."""
    from cancelctl.spec.backends import resolve_backend

    return resolve_backend(name).train


def _limit_threads(threads: int) -> None:
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(max(1, int(threads)))
