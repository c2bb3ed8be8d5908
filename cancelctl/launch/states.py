"""Per-run state of a sweep, from the manifest, the executors and the run folders.

The state words and `RunState` live in `cancelctl.runstate`; what a scheduler says about a
run's job is read through the handle its executor hands out (`cancelctl.executors.handle.JobHandle`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cancelctl.executors import get_executor
from cancelctl.executors.base import DECIDE, Freshness
from cancelctl.executors.handle import JobHandle
from cancelctl.fileio import read_json
from cancelctl.jobs.outcome import read_attempts, stalls
from cancelctl.jobs.watchdog import stall_sentence
from cancelctl.manifest import (
    ABANDONED,
    INTENT,
    SUBMIT_FAILED,
    SUBMITTED,
    UNCONFIRMED,
    Manifest,
    RunEntry,
    Submission,
)
from cancelctl.runstate import (
    ACTIVE,
    CANCELLED,
    COMPLETED,
    FAILED,
    PENDING,
    QUEUED,
    RUNNING,
    STOPPED,
    TERMINAL,
    UNSUBMITTED,
    RunState,
    SweepStates,
)
from cancelctl.workdir import RunFolder, SweepPaths


def sweep_states(paths: SweepPaths, manifest: Manifest, *, driver_alive: bool,
                 freshness: Freshness = DECIDE) -> SweepStates:
    """States of every run in the manifest: one scheduler query per executor for the whole sweep
    (none while a shared view `freshness` allows is at hand). A scheduler that did not answer
    leaves its runs in their last known state and says so in `SweepStates.unreachable`."""
    latest = {run_id: manifest.latest_submission(run_id) for run_id in manifest.runs}
    executors = {sub.executor: get_executor(sub.executor) for sub, _ in filter(None, latest.values())}
    submitted: dict[str, dict[str, Submission]] = {name: {} for name in executors}
    for pair in latest.values():
        if pair is not None and pair[0].state == SUBMITTED:
            submitted[pair[0].executor][pair[0].token] = pair[0]
    # each executor's answer, one query at most (none asked for an executor with nothing submitted)
    tasks = {name: executors[name].task_states(paths, list(subs.values()), freshness)
             for name, subs in sorted(submitted.items())}
    jobs: dict[str, JobHandle[Any]] = {}  # run id -> its latest submission's job, bound to its executor's answer
    for run_id, pair in latest.items():
        if pair is not None:
            sub, index = pair
            run_dir = paths.run_dir(run_id, manifest.runs[run_id].name)
            jobs[run_id] = executors[sub.executor].handle(paths, sub, index, tasks[sub.executor], run_dir)
    now = time.time()
    states = SweepStates(
        run_state(paths, manifest, run_id, jobs.get(run_id), driver_alive, now) for run_id in manifest.runs
    )
    for state in states:
        state.stale = not manifest.is_current(state.run_id)
    notes = [executors[name].unreachable(view) for name, view in tasks.items()]
    lost = {sub.token: sub for sub, _ in filter(None, latest.values()) if sub.state == UNCONFIRMED}
    if lost:  # never resubmitted, never called failed, until SLURM says whether it queued them
        runs = sum(len(sub.run_ids) for sub in lost.values())
        notes.append(f"{runs} run(s) of {len(lost)} submission(s) whose sbatch answer was lost are not found yet "
                     f"({'; '.join(unconfirmed_reason(sub) for sub in lost.values())})")
    if any(notes):  # what ended meanwhile is known from the runs' own records: said, and counted as ended
        own = [s for s in states if s.state in (COMPLETED, STOPPED) and _unanswered(jobs.get(s.run_id))]
        if own:
            notes.append(f"{len(own)} finished by their own record (result.json) while SLURM did not answer")
    states.unreachable = "; ".join(filter(None, notes)) or None
    return states


def _unanswered(job: JobHandle[Any] | None) -> bool:
    return job is not None and job.sub.state == SUBMITTED and not job.answered


def run_state(paths: SweepPaths, manifest: Manifest, run_id: str, job: JobHandle[Any] | None, driver_alive: bool,
              now: float) -> RunState:
    """Run `run_id`'s state; `job`: its latest submission's handle (None: never submitted)."""
    return with_stalls(_run_state(paths, manifest, run_id, job, driver_alive, now))


def with_stalls(state: RunState) -> RunState:
    """The attempts the stall watchdog ended, counted and the latest said in the reason (`status`,
    `watch`): a run requeued after a stall is pending or running again, and says why."""
    ended = stalls(state.run_dir) if state.run_dir is not None else []
    state.stalls = len(ended)
    if ended and "stalled" not in state.reason:
        note = f"{len(ended)} stall(s), the latest {stall_sentence(ended[-1])}"
        state.reason = f"{state.reason}; {note}" if state.reason else note
    return state


def _run_state(paths: SweepPaths, manifest: Manifest, run_id: str, job: JobHandle[Any] | None, driver_alive: bool,
               now: float) -> RunState:
    entry = manifest.runs[run_id]
    run_dir = job.run_dir if job is not None else paths.run_dir(run_id, entry.name)
    folder = RunFolder(run_dir)
    state = RunState(run_id, entry.name, entry.arm, entry.seed, UNSUBMITTED, steps=entry.steps, run_dir=run_dir)
    state.attempts = sum(1 for a in read_attempts(run_dir) if a.get("event") == "start")
    record = read_json(folder.job)  # the latest attempt's job.json
    if isinstance(record, dict) and isinstance(record.get("hardware"), dict):
        state.hardware = record["hardware"]
    result = read_json(folder.result)
    if result is not None:
        state.state, state.final = COMPLETED, dict(result.get("metrics") or {})
        if result.get("adopted_from"):  # run elsewhere, found FINISHED in the shared tracking store
            state.reason = f"adopted: FINISHED in {result['adopted_from']}"
        stop = read_json(folder.stopped)
        if isinstance(stop, dict):  # a monitor rule ended it (cancelctl.jobs.monitor.RunMonitor)
            state.state, state.reason = STOPPED, stop_reason(stop)
    if job is not None:
        state.executor, state.job_id, state.log = job.sub.executor, job.job_id, job.log_path
    requeued = job is not None and job.sub.state == SUBMITTED and job.requeued()
    if state.state in (COMPLETED, STOPPED) and not requeued:
        state.step = last_step(run_dir)
        damage = folder.metrics_damage()
        if damage:
            state.reason = "; ".join(filter(None, [state.reason, damage]))
        return state
    state.state = UNSUBMITTED
    if entry.queued_at is not None:
        state.state, state.reason = (QUEUED, "waiting for a free core") if driver_alive else (UNSUBMITTED, "queued, but no launcher is running")
        return state
    if cancelled_before_start(entry, job.sub if job is not None else None):
        state.state, state.reason = CANCELLED, not_started_reason(manifest, entry)
        return state
    if job is None:
        return state
    sub = job.sub
    if not run_dir.is_dir() and sub.state in (SUBMITTED, ABANDONED, SUBMIT_FAILED):  # never "ended before it started"
        state.reason = f"its run folder {run_dir} is gone (deleted or moved): a rerun runs it again from the start"
        return state
    if sub.state == ABANDONED:
        state.reason = "its submission never reached the scheduler (launcher killed before sbatch)"
    elif sub.state == SUBMIT_FAILED:
        state.reason = f"submission failed: {sub.error}"
    elif sub.state == INTENT:
        state.state, state.reason = QUEUED, "being submitted"
    elif sub.state == UNCONFIRMED:  # maybe queued: pending until SLURM shows the job or says it has none
        state.state, state.reason = PENDING, unconfirmed_reason(sub)
    else:
        state = job.classify(state, entry, now)
    if state.state != UNSUBMITTED or job is not None:  # where it is, or where it stopped
        state.step = last_step(run_dir)
    return state


def unconfirmed_reason(sub: Submission) -> str:
    """Why a run of a submission whose sbatch answer was lost is pending, and what it waits for."""
    looked = (f"the lookup got no answer ({sub.lookup_error})" if sub.lookup_error
              else "SLURM does not show it yet")
    return (f"sbatch's answer was lost ({sub.error}); job {sub.job_name}: {looked}; nothing is resubmitted "
            f"until SLURM says whether it was queued")


def cancelled_before_start(entry: RunEntry, latest: Submission | None) -> bool:
    """`cancel` took the run off the queue (or out of a launch) before any job of it was started:
    queueing it again clears `cancelled_at`, so one set means no launch has queued it since; a job
    started before the cancel is classified by its job handle instead."""
    if entry.cancelled_at is None:
        return False
    return latest is None or latest.state in (ABANDONED, SUBMIT_FAILED)


def not_started_reason(manifest: Manifest, entry: RunEntry) -> str:
    """Who stopped a run before it started: a `cancel` (it marks the sweep with its runs, and a later
    one marks the sweep again), or a signal to the launch that was starting it (the runs alone)."""
    if manifest.cancelled_at is not None and entry.cancelled_at is not None and entry.cancelled_at <= manifest.cancelled_at:
        return "cancelled before it started (cancelctl cancel)"
    return "interrupted before it started (its launch got Ctrl-C, SIGTERM or SIGHUP)"


def stop_reason(stop: dict) -> str:
    """stopped.json → "<rule> at step N"."""
    return f"{stop.get('rule', '?')} at step {stop.get('step', '?')}"


def last_step(run_dir: Path) -> int | None:
    """The step of the last complete line of metrics.jsonl (reads only the file's tail)."""
    return RunFolder(run_dir).last_step()


__all__ = ["ACTIVE", "CANCELLED", "COMPLETED", "FAILED", "PENDING", "QUEUED", "RUNNING", "STOPPED", "TERMINAL",
           "UNSUBMITTED", "RunState", "last_step", "run_state", "stop_reason", "sweep_states"]
