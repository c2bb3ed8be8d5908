"""The SLURM executor: one sbatch job array per resource shape, states from one sacct call.

Order of a submission (under the sweep's submit lock, which every sbatch inherits): each run's
submitit parameters are checked when planned, `sbatch --test-only` once per shape, then per array
the intent (token in the job name) is recorded before sbatch and the job id after. The commands
themselves (rendering, sbatch, scancel) are in `slurm_commands`, the sacct/squeue queries in
`slurm_states`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from cancelctl.errors import SpecError, SpecIssue
from cancelctl.executors import slurm_commands as slurm
from cancelctl.executors import slurm_states
from cancelctl.errors import SchedulerError
from cancelctl.executors.base import DECIDE, ArrayPlan, Executor, Freshness, Submitted
from cancelctl.executors.handle import JobHandle
from cancelctl.executors.slurm_view import shared_task_states
from cancelctl.fileio import read_json
from cancelctl.jobs.outcome import read_error, result_finished_at
from cancelctl.jobs.runjob import RunJob
from cancelctl.jobs.time_limit import time_limit_plan
from cancelctl.manifest import (
    ABANDONED,
    INTENT,
    SUBMIT_FAILED,
    SUBMITTED,
    UNCONFIRMED,
    RunEntry,
    Submission,
)
from cancelctl.runstate import CANCELLED, COMPLETED, FAILED, PENDING, RUNNING, RunState
from cancelctl.workdir import RunFolder, SweepPaths

if TYPE_CHECKING:
    from cancelctl.spec.run import RunSpec

log = logging.getLogger("cancelctl.launch")

# SLURM state words (sacct/squeue) by cancelctl state; anything else that ended is FAILED.
SLURM_PENDING = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED", "CONFIGURING",
                 "SPECIAL_EXIT", "RESV_DEL_HOLD", "STOPPED"}
SLURM_RUNNING = {"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"}
# Accounting writes lag sbatch by ~1 s; a job it does not show yet is pending for this long.
ACCOUNTING_GRACE_S = 120.0
# A lost sbatch answer whose job SLURM does not show is "not queued" only after this long: slurmctld
# may still have been taking the request when sbatch was killed.
LOST_ANSWER_GRACE_S = 30.0

Shapes = dict[str, slurm.JobShape]  # run id -> its array's shape
TaskStates = slurm_states.TaskStates  # (array id, index) -> what sacct/squeue said of that task


class SlurmJob(JobHandle[TaskStates]):
    """One task of a SLURM job array: `tasks` is the sweep's one sacct/squeue answer."""

    @property
    def job_id(self) -> str | None:
        return None if self.sub.job_id is None else f"{self.sub.job_id}_{self.index}"

    @property
    def task(self) -> slurm_states.TaskState | None:
        """What sacct/squeue said of this task (None: neither showed it, or they were not asked)."""
        return self.tasks.get((self.sub.job_id, self.index))

    @property
    def state(self) -> str | None:
        task = self.task
        return None if task is None else task.state

    @property
    def log_path(self) -> Path | None:
        return None if self.sub.job_id is None else self.paths.submitit_dir / f"{self.job_id}_0_log.err"

    @property
    def answered(self) -> bool:
        return not self.tasks.no_answer_for(self.sub.job_id)

    def requeued(self) -> bool:
        """A task that wrote result.json and was then requeued (`scontrol requeue`, preemption) runs
        again: until it ends, the scheduler's state is the truth, not the earlier result. The newer
        of the two positive answers wins: a state SLURM gave before the result was written (one
        remembered through an outage, or a shared view not yet renewed) does not outrank it, and a
        result an attempt started since has replaced is no result."""
        if self.state not in SLURM_PENDING | SLURM_RUNNING:
            return False
        finished = result_finished_at(self.run_dir)
        return finished is None or self.tasks.as_of.get(self.sub.job_id, 0.0) > finished

    def classify(self, state: RunState, entry: RunEntry, now: float) -> RunState:
        sub, task = self.sub, self.task
        error = read_error(state.run_dir)
        if task is None:
            if error is not None:
                return replace(state, state=FAILED, reason=error[1])
            if now - (sub.submitted_at or sub.created_at) < ACCOUNTING_GRACE_S:
                return replace(state, state=PENDING, reason="submitted; not in accounting yet")
            if sub.job_id in self.tasks.unanswered:  # silence is not "gone"
                return replace(state, state=PENDING, reason="SLURM unreachable; no state known for this job yet")
            if sub.job_id in self.tasks.unasked:  # a watcher's first look: SLURM is being asked
                return replace(state, state=PENDING, reason="submitted; no state from SLURM yet")
            return replace(state, state=FAILED, reason=f"job {state.job_id} is unknown to SLURM (sacct/squeue)")
        word = task.state
        if word in SLURM_PENDING and self._started_since_view(state):
            return replace(state, state=RUNNING)
        if word in SLURM_PENDING:
            return replace(state, state=PENDING, reason=task.detail or word.lower())
        if word in SLURM_RUNNING:
            return replace(state, state=RUNNING)
        if word == "COMPLETED":
            return replace(state, state=COMPLETED)  # the job wrapper exits non-zero whenever the run raised
        if word == "CANCELLED" and self.cancelled_by_us(entry):
            return replace(state, state=CANCELLED, reason="cancelled by cancelctl", cancel_requested=True)
        # FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, CANCELLED from outside ...
        outside = " (killed outside cancelctl)" if word == "CANCELLED" else ""
        detail = f"{task.detail or word}{outside}"
        return replace(state, state=FAILED, reason=f"{detail}; {error[1]}" if error is not None else detail,
                       cancel_requested=word == "CANCELLED")

    def _started_since_view(self, state: RunState) -> bool:
        """The run folder shows this very task started after SLURM last called it pending: the view is
        older than the run's own record (a shared view not yet renewed, or an outage)."""
        job = read_json(RunFolder(state.run_dir).job) if state.run_dir is not None else None
        return (isinstance(job, dict) and job.get("job_id") == f"{self.sub.job_id}_{self.index}"
                and isinstance(job.get("started_at"), (int, float))
                and job["started_at"] > self.tasks.as_of.get(self.sub.job_id, 0.0))


class SlurmExecutor(Executor[Shapes, TaskStates]):
    name = "slurm"
    waits_by_default = False  # a sweep on a cluster outlives the login shell
    has_time_limit = True
    poll_s = 5.0
    reconcile_on_status = True  # a lost job id is found by job name, without waiting
    job_class = SlurmJob

    def check_available(self) -> None:
        if not slurm.slurm_available():
            raise SchedulerError(
                "executor slurm: sbatch/sacct/squeue/scancel/scontrol not found on this machine; run it where SLURM "
                "is (a login node), see what it would submit with --dry-run, or run here with --executor local"
            )

    def plan(self, runs: Sequence[RunSpec], workdir: Path) -> Shapes:
        shapes = {run.run_id: slurm.job_shape(run.spec, workdir, time_limit_plan(run)) for run in runs}
        seen: set[str] = set()
        for run in runs:
            shape = shapes[run.run_id]
            if shape.key not in seen:
                seen.add(shape.key)
                slurm.check_shape(shape, where=f"arm {run.arm}: cluster", folder=workdir)
        return shapes

    def test_submission(self, paths: SweepPaths, plan: Shapes) -> None:
        """`sbatch --test-only` once per shape: the cluster refuses a partition/account/qos/resource
        before any array of the sweep is submitted."""
        paths.submitit_dir.mkdir(parents=True, exist_ok=True)
        issues = []
        for i, shape in enumerate({s.key: s for s in plan.values()}.values()):
            script = slurm.render_sbatch(
                shape, folder=paths.submitit_dir, token="test-only", n_tasks=1,
                job_name=f"cancelctl:{paths.sweep}:test-only", comment="test",
            )
            path = paths.submitit_dir / f".test-only-{i}.sh"
            path.write_text(script, encoding="utf-8")
            try:
                refusal = slurm.sbatch_test_only(path)
            finally:
                path.unlink(missing_ok=True)
            if refusal:
                issues.append(SpecIssue(None, "cluster", f"SLURM refuses {shape.parameters}: {refusal}"))
        if issues:
            raise SpecError(issues, title="SLURM refuses the cluster settings (sbatch --test-only): nothing was submitted")

    def dry_run(self, paths: SweepPaths, runs: Sequence[RunSpec], plan: Shapes) -> list[ArrayPlan]:
        arrays = []
        for i, (shape, part) in enumerate(_array_chunks(runs, plan)):
            token = f"dryrun{i}"
            script = slurm.render_sbatch(
                shape, folder=paths.submitit_dir, token=token, n_tasks=len(part),
                job_name=slurm.job_name(paths.sweep, token), comment=slurm.job_comment(paths.sweep, [r.run_id for r in part]),
            )
            arrays.append(ArrayPlan([r.run_id for r in part], script, token))
        return arrays

    def render_job(self, run: RunSpec, workdir: Path, workload: Callable[[Path], list[str]]) -> str:
        """The run's sbatch script and in-task commands, Ray start-up included (`slurm_render`)."""
        from cancelctl.executors.slurm_render import render_run

        return render_run(run, workdir, workload)

    def submit(self, paths: SweepPaths, runs: Sequence[RunSpec], plan: Shapes, lock_fd: int) -> Submitted:
        store, out = paths.store, Submitted()
        for shape, part in _array_chunks(runs, plan):
            run_ids = [run.run_id for run in part]
            with store.update() as manifest:  # the intent, before sbatch
                sub = manifest.add_submission(self.name, run_ids, resources=_json_safe(shape.parameters))
                sub.job_name = slurm.job_name(paths.sweep, sub.token)
            script = slurm.render_sbatch(
                shape, folder=paths.submitit_dir, token=sub.token, n_tasks=len(part),
                job_name=sub.job_name, comment=slurm.job_comment(paths.sweep, run_ids),
            )
            threads = shape.parameters.get("cpus_per_task")
            jobs = [RunJob(paths.run_dir(run.run_id, run.name), sub.token, threads) for run in part]
            array = ArrayPlan(run_ids, script, sub.token)
            out.arrays.append(array)
            try:
                path = slurm.write_array_files(paths.submitit_dir, sub.token, jobs, shape, script)
                job_id = slurm.sbatch(path, lock_fd=lock_fd)
            except slurm.AnswerLost as exc:  # maybe queued: never FAILED, never submitted again unseen
                found = self._answer_lost(paths, sub, str(exc))
                if found.state == SUBMIT_FAILED:  # both answered, no such job: it was not queued
                    out.errors.update({run_id: found.error or str(exc) for run_id in run_ids})
                    continue
                if found.state != SUBMITTED:
                    out.unconfirmed.update({run_id: str(exc) for run_id in run_ids})
                    continue
                job_id = found.job_id
            except (SchedulerError, OSError) as exc:
                with store.update() as manifest:
                    manifest.submissions[sub.token].state = SUBMIT_FAILED
                    manifest.submissions[sub.token].error = str(exc)
                out.errors.update({run_id: str(exc) for run_id in run_ids})
                log.error("sweep %s: %s", paths.sweep, exc)
                continue
            with store.update() as manifest:
                recorded = manifest.submissions[sub.token]
                recorded.state, recorded.job_id, recorded.submitted_at = SUBMITTED, job_id, time.time()
            array.job_id = job_id
            out.job_ids.append(job_id)
            out.submitted.extend(run_ids)
        return out

    def _answer_lost(self, paths: SweepPaths, sub: Submission, why: str) -> Submission:
        """sbatch's answer was lost: the submission is unconfirmed, then looked up by name at once.
        Returns it as recorded after the look: submitted (the job found), submit_failed (SLURM has
        none of that name, past the grace) or still unconfirmed (for the next verb to look again)."""
        with paths.store.update() as manifest:
            recorded = manifest.submissions[sub.token]
            recorded.state, recorded.error, recorded.submitted_at = UNCONFIRMED, why, time.time()
        log.warning("sweep %s: %s; looking for job %s by name", paths.sweep, why, sub.job_name)
        self.reconcile(paths, [paths.store.load().submissions[sub.token]], wait=False)
        return paths.store.load().submissions[sub.token]

    def reconcile(self, paths: SweepPaths, intents: Sequence[Submission], *, wait: bool) -> None:
        """The job name carries the submission's token: found means adopt the id. Not found, when
        squeue and sacct both answered, means sbatch never queued it: an intent is abandoned at once
        (the caller holds the submit lock that every sbatch inherits, so none is in flight); a lost
        answer only after LOST_ANSWER_GRACE_S, in case slurmctld was still taking the request. A
        lookup SLURM does not answer leaves them as they are: `status` says why, nothing is resubmitted."""
        intents = [s for s in intents if s.job_name]
        if not intents:
            return
        try:
            found = slurm_states.find_by_name([s.job_name for s in intents], since=min(s.created_at for s in intents))
        except SchedulerError as exc:
            with paths.store.update() as manifest:
                for sub in intents:
                    manifest.submissions[sub.token].lookup_error = str(exc)
            log.warning("sweep %s: %s", paths.sweep, exc)
            return
        now = time.time()
        with paths.store.update() as manifest:
            for sub in intents:
                current = manifest.submissions[sub.token]
                current.lookup_error = None
                job_id = found.get(sub.job_name)
                if job_id:
                    lost = current.state == UNCONFIRMED
                    current.state, current.job_id = SUBMITTED, job_id
                    current.submitted_at = current.submitted_at or current.created_at
                    log.info("sweep %s: adopted job %s of %s", paths.sweep, job_id,
                             "a submission whose answer was lost" if lost else "an interrupted submission")
                elif current.state == INTENT:
                    current.state = ABANDONED
                elif now - (current.submitted_at or current.created_at) >= LOST_ANSWER_GRACE_S:
                    current.state = SUBMIT_FAILED
                    current.error = f"{current.error}; SLURM holds no job named {current.job_name}: it was not queued"

    # -- status --------------------------------------------------------------------------------

    def task_states(self, paths: SweepPaths, submissions: Sequence[Submission],
                    freshness: Freshness = DECIDE) -> TaskStates:
        """One sacct and one squeue call for all the sweep's arrays, shared by every verb of the work
        dir while `freshness` allows (`slurm_view`); arrays SLURM did not answer for keep the states
        it last gave, and `unreachable_note()` says so."""
        sizes = {s.job_id: len(s.run_ids) for s in submissions if s.job_id}
        if not sizes:
            return slurm_states.TaskStates()
        names = [s.job_name for s in submissions if s.job_id and s.job_name]
        return shared_task_states(paths.sweep_dir, sizes, names if len(names) == len(sizes) else [], freshness)

    def unreachable(self, tasks: TaskStates) -> str | None:
        return tasks.unreachable_note()

    # -- cancel --------------------------------------------------------------------------------

    def cancel(self, paths: SweepPaths, active: Sequence[RunState], signalled: dict[str, float]) -> list[str]:
        arrays = sorted({s.job_id.split("_")[0] for s in active if s.job_id})
        new = [a for a in arrays if a not in signalled]
        if new:
            slurm.scancel(new)
            signalled.update({a: time.monotonic() for a in new})
        return new

    def wait_stopped(self, job_ids: Sequence[str], deadline: float) -> None:
        """scancel'd tasks linger as COMPLETING for KillWait: return once slurmctld holds none."""
        arrays = sorted(set(job_ids))
        while arrays:
            live = slurm_states.live_tasks(arrays)  # SchedulerError when slurmctld does not answer
            if not live:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"SLURM still runs {', '.join(live)} after cancel")
            time.sleep(0.5)


def _array_chunks(runs: Sequence[RunSpec], shapes: Shapes) -> Iterator[tuple[slurm.JobShape, list[RunSpec]]]:
    """One array per resource shape (in sweep order), cut to the cluster's MaxArraySize."""
    groups: dict[str, tuple[slurm.JobShape, list[RunSpec]]] = {}
    for run in runs:
        shape = shapes[run.run_id]
        groups.setdefault(shape.key, (shape, []))[1].append(run)
    size = max(1, slurm.max_array_size())
    for shape, members in groups.values():
        for start in range(0, len(members), size):
            yield shape, members[start : start + size]


def _json_safe(params: dict) -> dict:
    return json.loads(json.dumps(params, default=str))


__all__ = ["SlurmExecutor", "SlurmJob"]
