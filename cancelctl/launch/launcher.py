"""`launch_sweep`: plan against the manifest and the scheduler, create MLflow runs, submit.

Order of a launch, all under the sweep's submit lock (one launcher at a time):
 1. check the SLURM parameters of every run (submitit's names, then `sbatch --test-only` once per
    resource shape): a bad setting stops the launch before anything is submitted;
 2. add new runs to the manifest and resolve intents a killed launcher left (`reconcile`);
 3. classify each run by its state: completed and active runs are skipped, failed runs only go
    again with `retry_failed`, the rest (never submitted, cancelled, interrupted) are submitted;
 4. write every run's run.json and create its MLflow run (status SCHEDULED);
 5. submit: SLURM gets one array per resource shape, chunked to MaxArraySize; local/debug runs are
    queued for the driver (see local.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cancelctl.errors import SpecError, SpecIssue
from cancelctl.jobs import RunJob, archive_error
from cancelctl.launch import local, slurm
from cancelctl.launch.layout import SweepPaths, sweep_paths
from cancelctl.launch.prepare import prepare_run, tracking_target, write_adopted_result
from cancelctl.launch.states import ACTIVE, CANCELLED, COMPLETED, FAILED, UNSUBMITTED, RunState, sweep_states
from cancelctl.manifest import ABANDONED, SUBMIT_FAILED, SUBMITTED, Manifest, RunEntry, file_lock
from cancelctl.plan import RunSpec, Sweep
from cancelctl.yamlpos import Location, load_yaml_file

log = logging.getLogger("cancelctl.launch")

EXECUTORS = ("local", "slurm", "debug")
SUBMIT_LOCK_TIMEOUT_S = 120.0

Progress = Callable[[list[RunState]], None]


@dataclass
class ArrayPlan:
    """One sbatch: the runs of its array tasks in index order and the script."""

    run_ids: list[str]
    script: str
    token: str
    job_id: str | None = None


@dataclass
class LaunchResult:
    sweep: str
    executor: str
    workdir: Path
    dry_run: bool = False
    submitted: list[str] = field(default_factory=list)  # run ids submitted now (dry run: would be)
    skipped_finished: list[str] = field(default_factory=list)
    skipped_running: list[str] = field(default_factory=list)  # queued, pending or running already
    skipped_failed: list[str] = field(default_factory=list)  # failed before; retry_failed resubmits
    failed: list[str] = field(default_factory=list)  # refused by the scheduler now, or ended failed (wait)
    job_ids: list[str] = field(default_factory=list)  # SLURM array ids / local pids created now
    arrays: list[ArrayPlan] = field(default_factory=list)
    states: list[RunState] = field(default_factory=list)  # after submission, or final when waited
    errors: dict[str, str] = field(default_factory=dict)  # run id -> why it failed
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def launch_sweep(
    sweep: Sweep,
    *,
    workdir: Path,
    executor: str | None = None,
    dry_run: bool = False,
    retry_failed: bool = False,
    wait: bool | None = None,
    progress: Progress | None = None,
) -> LaunchResult:
    """Submit what of `sweep` is not finished or running. `executor` overrides the specs'
    (local|slurm|debug); `wait` defaults to True for local/debug and False for slurm.
    Raises SpecError (bad input, nothing submitted) and slurm.SchedulerError (SLURM unusable)."""
    workdir = Path(workdir).resolve()
    paths = sweep_paths(workdir, sweep.name)
    kind = _executor_of(sweep, executor)
    wait = kind != "slurm" if wait is None else wait
    result = LaunchResult(sweep=sweep.name, executor=kind, workdir=workdir, dry_run=dry_run)
    _refuse_unsupported(sweep)
    shapes = _checked_shapes(sweep.runs, workdir) if kind == "slurm" else {}
    if dry_run:
        return _dry_run(paths, sweep, kind, shapes, retry_failed, result)
    if kind == "slurm" and not slurm.slurm_available():
        raise slurm.SchedulerError(
            "executor slurm: sbatch/sacct/squeue/scancel/scontrol not found on this machine; run it where SLURM "
            "is (a login node), see what it would submit with --dry-run, or run here with --executor local"
        )

    paths.sweep_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(paths.submit_lock, SUBMIT_LOCK_TIMEOUT_S, what=f"sweep {sweep.name} submission") as lock_fd:
        if kind == "slurm":
            _test_shapes(paths, shapes)
        _register(paths, sweep, kind)
        reconcile(paths)
        manifest = paths.store.load()
        states = {s.run_id: s for s in sweep_states(paths, manifest, driver_alive=local.driver_alive(manifest))}
        to_submit = _classify(sweep.runs, states, retry_failed, result)
        to_submit = _adopt_finished_in_store(paths, to_submit, states, result)
        for run in sweep.runs:  # one MLflow run per RunSpec, created when planned
            prepare_run(paths, run, result.warnings)
        for run in to_submit:
            archive_error(paths.run_dir(run.run_id))
        if kind == "slurm":
            _submit_arrays(paths, to_submit, shapes, lock_fd, result)
        else:
            _queue(paths, to_submit)
            result.submitted.extend(run.run_id for run in to_submit)

    if kind != "slurm" and to_submit:
        if wait and local.claim_driver(paths.store):
            local.drive(paths, kind, progress=progress, job_ids=result.job_ids)
        elif not wait and not local.driver_alive(paths.store.load()):
            result.job_ids.append(str(local.start_detached_driver(paths, kind)))
    from cancelctl.launch.control import sweep_status, wait_for_sweep

    if wait:
        result.states = wait_for_sweep(workdir, sweep.name, progress=progress, poll_s=1.0 if kind != "slurm" else 5.0)
        for state in result.states:
            if state.state == FAILED and state.run_id not in result.failed:
                result.failed.append(state.run_id)
                result.errors[state.run_id] = state.reason
    else:
        result.states = sweep_status(workdir, sweep.name)
    return result


# ---------------------------------------------------------------------------------- planning


def _executor_of(sweep: Sweep, override: str | None) -> str:
    if override is not None:
        if override not in EXECUTORS:
            raise SpecError(f"executor {override!r}: expected one of {', '.join(EXECUTORS)}", title="invalid arguments")
        return override
    kinds = sorted({run.spec.executor for run in sweep.runs})
    if len(kinds) > 1:
        raise SpecError(
            f"runs of sweep {sweep.name} name several executors ({', '.join(kinds)}); set one in base or pass --executor",
            title="invalid experiment spec",
        )
    return kinds[0] if kinds else "local"


def _refuse_unsupported(sweep: Sweep) -> None:
    """verl runs whose spec the verl backend cannot run yet are refused before anything is submitted:
    they would fail only once their job holds GPUs."""
    verl_runs = [run for run in sweep.runs if run.spec.backend == "verl"]
    if not verl_runs:
        return
    from cancelctl.backends.verl.render import unsupported_on_verl

    by_arm: dict[tuple[str, str], list[str]] = {}
    for run in verl_runs:
        for reason in unsupported_on_verl(run):
            by_arm.setdefault((run.arm, reason), []).append(run.name)
    if not by_arm:
        return
    try:
        _, positions = load_yaml_file(sweep.file)
    except (OSError, SpecError):
        positions = {}
    issues = [
        SpecIssue(
            positions.get(("arms", arm)) or Location(sweep.file, 1, 1),
            f"arms.{arm}",
            reason,
            f"{len(names)} run{'s' if len(names) > 1 else ''}: {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}",
        )
        for (arm, reason), names in by_arm.items()
    ]
    raise SpecError(issues, title="the verl backend cannot launch these runs yet; nothing submitted")


def _checked_shapes(runs: list[RunSpec], workdir: Path) -> dict[str, slurm.JobShape]:
    shapes = {run.run_id: slurm.job_shape(run.spec, workdir) for run in runs}
    seen: set[str] = set()
    for run in runs:
        shape = shapes[run.run_id]
        if shape.key not in seen:
            seen.add(shape.key)
            slurm.check_shape(shape, where=f"arm {run.arm}: cluster")
    return shapes


def _test_shapes(paths: SweepPaths, shapes: dict[str, slurm.JobShape]) -> None:
    """`sbatch --test-only` once per shape: the cluster refuses a partition/account/qos/resource
    before any array of the sweep is submitted."""
    paths.submitit_dir.mkdir(parents=True, exist_ok=True)
    issues = []
    for i, shape in enumerate({s.key: s for s in shapes.values()}.values()):
        script = slurm.render_sbatch(
            shape, folder=paths.submitit_dir, token="test-only", n_tasks=1, job_name=f"cancelctl:{paths.sweep}:test-only", comment="test"
        )
        path = paths.submitit_dir / f".test-only-{i}.sh"
        path.write_text(script, encoding="utf-8")
        refusal = slurm.sbatch_test_only(path)
        path.unlink(missing_ok=True)
        if refusal:
            issues.append(SpecIssue(None, "cluster", f"SLURM refuses {shape.parameters}: {refusal}"))
    if issues:
        raise SpecError(issues, title="SLURM refuses the cluster settings (sbatch --test-only): nothing was submitted")


def _register(paths: SweepPaths, sweep: Sweep, kind: str) -> None:
    with paths.store.update(create=Manifest(sweep=sweep.name, executor=kind)) as manifest:
        manifest.file, manifest.executor, manifest.launched_at = sweep.file, kind, time.time()
        manifest.baseline = sweep.spec.baseline
        for run in sweep.runs:
            entry = manifest.runs.get(run.run_id)
            if entry is None:
                manifest.runs[run.run_id] = RunEntry(run.name, run.arm, run.seed, run.group, steps=run.spec.budget.steps)
            else:
                entry.name, entry.arm, entry.group, entry.steps = run.name, run.arm, run.group, run.spec.budget.steps


def _adopt_finished_in_store(
    paths: SweepPaths, runs: list[RunSpec], states: dict[str, RunState], result: LaunchResult
) -> list[RunSpec]:
    """Runs never submitted from this work dir whose MLflow store already holds them FINISHED (same
    run id: same resolved spec and seed, e.g. run by a colleague against a shared tracking server) are
    adopted, not run again: their result.json is written from the store's final metrics. Returns the
    runs still to submit."""
    from cancelctl.tracking import finished_runs

    fresh: dict[tuple[str, str], set[str]] = {}
    for run in runs:
        if states[run.run_id].state == UNSUBMITTED and not states[run.run_id].attempts:
            fresh.setdefault(tracking_target(run, paths.workdir), set()).add(run.run_id)
    adopted: set[str] = set()
    for (uri, experiment), run_ids in fresh.items():
        try:
            found = finished_runs(uri, experiment, run_ids)
        except Exception as exc:  # noqa: BLE001 - an unreachable store: run them, as before
            result.warnings.append(f"could not look for finished runs in {uri} ({type(exc).__name__}: {exc})")
            continue
        for run_id, mlflow_run in found.items():
            write_adopted_result(paths.run_dir(run_id), mlflow_run, uri)
            adopted.add(run_id)
    if adopted:
        result.skipped_finished.extend(sorted(adopted))
        result.warnings.append(
            f"{len(adopted)} run(s) already FINISHED in their MLflow store (same run ids) were adopted, not rerun"
        )
    return [run for run in runs if run.run_id not in adopted]


def _classify(runs: list[RunSpec], states: dict[str, RunState], retry_failed: bool, result: LaunchResult) -> list[RunSpec]:
    to_submit = []
    for run in runs:
        state = states[run.run_id].state
        if state == COMPLETED:
            result.skipped_finished.append(run.run_id)
        elif state in ACTIVE:
            result.skipped_running.append(run.run_id)
        elif state == FAILED and not retry_failed:
            result.skipped_failed.append(run.run_id)
        else:  # unsubmitted, cancelled/interrupted, or failed with retry_failed
            to_submit.append(run)
    return to_submit


def _dry_run(paths: SweepPaths, sweep: Sweep, kind: str, shapes, retry_failed: bool, result: LaunchResult) -> LaunchResult:
    """What a launch would submit; writes nothing, submits nothing, asks the scheduler only for states."""
    states: dict[str, RunState] = {}
    if paths.store.exists():
        manifest = paths.store.load()
        states = {s.run_id: s for s in sweep_states(paths, manifest, driver_alive=local.driver_alive(manifest))}
    for run in sweep.runs:
        states.setdefault(run.run_id, RunState(run.run_id, run.name, run.arm, run.seed, "unsubmitted", steps=run.spec.budget.steps))
    to_submit = _classify(sweep.runs, states, retry_failed, result)
    result.submitted = [run.run_id for run in to_submit]
    result.states = [states[run.run_id] for run in sweep.runs]
    if kind == "slurm":
        for i, (shape, part) in enumerate(_array_chunks(to_submit, shapes)):
            token = f"dryrun{i}"
            script = slurm.render_sbatch(
                shape, folder=paths.submitit_dir, token=token, n_tasks=len(part),
                job_name=slurm.job_name(sweep.name, token), comment=slurm.job_comment(sweep.name, [r.run_id for r in part]),
            )
            result.arrays.append(ArrayPlan([r.run_id for r in part], script, token))
    return result


# ---------------------------------------------------------------------------------- submission


def _array_chunks(runs: list[RunSpec], shapes: dict[str, slurm.JobShape]):
    """One array per resource shape (in sweep order), cut to the cluster's MaxArraySize."""
    groups: dict[str, tuple[slurm.JobShape, list[RunSpec]]] = {}
    for run in runs:
        shape = shapes[run.run_id]
        groups.setdefault(shape.key, (shape, []))[1].append(run)
    size = max(1, slurm.max_array_size())
    for shape, members in groups.values():
        for start in range(0, len(members), size):
            yield shape, members[start : start + size]


def _submit_arrays(paths: SweepPaths, runs: list[RunSpec], shapes, lock_fd: int, result: LaunchResult) -> None:
    store = paths.store
    for shape, part in _array_chunks(runs, shapes):
        run_ids = [run.run_id for run in part]
        with store.update() as manifest:  # the intent, before sbatch
            sub = manifest.add_submission("slurm", run_ids, resources=_json_safe(shape.parameters))
            sub.job_name = slurm.job_name(paths.sweep, sub.token)
        script = slurm.render_sbatch(
            shape, folder=paths.submitit_dir, token=sub.token, n_tasks=len(part),
            job_name=sub.job_name, comment=slurm.job_comment(paths.sweep, run_ids),
        )
        threads = shape.parameters.get("cpus_per_task")
        jobs = [RunJob(paths.run_dir(run_id), sub.token, threads) for run_id in run_ids]
        plan = ArrayPlan(run_ids, script, sub.token)
        result.arrays.append(plan)
        try:
            path = slurm.write_array_files(paths.submitit_dir, sub.token, jobs, shape, script)
            job_id = slurm.sbatch(path, lock_fd=lock_fd)
        except (slurm.SchedulerError, OSError) as exc:
            with store.update() as manifest:
                manifest.submissions[sub.token].state = SUBMIT_FAILED
                manifest.submissions[sub.token].error = str(exc)
            result.failed.extend(run_ids)
            result.errors.update({run_id: str(exc) for run_id in run_ids})
            log.error("sweep %s: %s", paths.sweep, exc)
            continue
        with store.update() as manifest:
            recorded = manifest.submissions[sub.token]
            recorded.state, recorded.job_id, recorded.submitted_at = SUBMITTED, job_id, time.time()
        plan.job_id = job_id
        result.job_ids.append(job_id)
        result.submitted.extend(run_ids)


def _queue(paths: SweepPaths, runs: list[RunSpec]) -> None:
    now = time.time()
    with paths.store.update() as manifest:
        for i, run in enumerate(runs):
            entry = manifest.runs[run.run_id]
            entry.queued_at, entry.cancelled_at = now + i * 1e-6, None  # keeps sweep order


def reconcile(paths: SweepPaths, *, wait_local: bool = True) -> None:
    """Resolve submissions recorded as intent by a launcher that died before recording the job id.
    SLURM: the job name carries the intent's token; found means adopt the id, not found means sbatch
    never ran (the caller holds the submit lock that every sbatch inherits, so none is in flight)."""
    manifest = paths.store.load()
    intents = [s for s in manifest.intents() if s.executor == "slurm" and s.job_name]
    if intents:
        found = slurm.find_by_name([s.job_name for s in intents], since=min(s.created_at for s in intents))
        with paths.store.update() as manifest:
            for sub in intents:
                current = manifest.submissions[sub.token]
                job_id = found.get(sub.job_name)
                if job_id:
                    current.state, current.job_id, current.submitted_at = SUBMITTED, job_id, current.created_at
                    log.info("sweep %s: adopted job %s of an interrupted submission", paths.sweep, job_id)
                else:
                    current.state = ABANDONED
    local.reconcile_local_intents(paths, wait=wait_local)


def _json_safe(params: dict) -> dict:
    import json

    return json.loads(json.dumps(params, default=str))


__all__ = ["ArrayPlan", "LaunchResult", "launch_sweep", "reconcile", "CANCELLED"]
