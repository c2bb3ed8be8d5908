"""What the stall watchdog (`cancelctl.jobs.watchdog`) does with a stalled attempt once its stacks are
saved: requeue it the way its job environment does, or, with its retries used up, have its MLflow run
closed. Stdlib only at import, like the watchdog.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLOSE_TIMEOUT_S = 60.0  # the MLflow end of a run failed of its stall
CLOSE_LOG = "stalls/mlflow-close.log"  # in the run folder: why the close did not reach MLflow, if it did not


def requeue_slurm(job_id: str) -> str | None:
    """`scontrol requeue JOB`; None, or why it failed."""
    try:
        done = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scontrol requeue {job_id}: {exc}"
    return None if done.returncode == 0 else f"scontrol requeue {job_id}: {done.stderr.strip() or done.returncode}"


def requeue_local(run_dir: Path, token: str) -> str | None:
    """Queue the run again in its sweep's manifest (the local driver starts it once this attempt's
    process is gone); None, or why not (cancelled, resubmitted meanwhile, no sweep)."""
    from cancelctl.fileio import read_json
    from cancelctl.manifest import ManifestStore
    from cancelctl.workdir import RunFolder

    folder = RunFolder(run_dir)
    run_id = ((read_json(folder.run_json) or {}).get("run") or {}).get("run_id")
    store = ManifestStore(folder.sweep_manifest)
    if run_id is None or not store.exists():
        return "not a run of a sweep: nothing to requeue it"
    with store.update() as manifest:
        latest = manifest.latest_submission(run_id)
        entry = manifest.runs.get(run_id)
        if entry is None or latest is None or latest[0].token != token:
            return "the run was submitted again meanwhile"
        if entry.cancelled_at is not None and entry.cancelled_at >= latest[0].created_at:
            return "the run was cancelled"
        entry.queued_at = time.time()
    return None


@dataclass(frozen=True)
class JobRequeue:
    """How a stalled attempt goes back to the queue in one submitit job environment."""

    requeue: Any  # (run_dir, job_id, token) -> None, or why it could not
    job_end_takes_watchdog: bool  # the job's end kills this process too: requeue before the kill, close nothing after


# per submitit job environment (SUBMITIT_EXECUTOR, set in the job): SLURM requeues the job itself; the local
# executor's driver starts again what the sweep's manifest queues. An environment not here (debug: in the
# CLI's own process) gets no watchdog.
JOB_REQUEUES: dict[str, JobRequeue] = {
    "slurm": JobRequeue(lambda run_dir, job_id, token: requeue_slurm(job_id), job_end_takes_watchdog=True),
    "local": JobRequeue(lambda run_dir, job_id, token: requeue_local(run_dir, token), job_end_takes_watchdog=False),
}


def close_failed_run(run_dir: Path) -> None:
    """The MLflow run of a run failed of its stall: tagged and closed FAILED (`cancelctl.jobs.stall_close`,
    another process: it imports MLflow), once the frozen process is dead (it may have frozen holding the
    run folder's tracking lock). On SLURM the job's end takes this process with it: there the next
    `status`, `watch` or `sync` settles the MLflow run from the run folder (`launch.control.settle_tracking`,
    stalls tagged too). Bounded: a busy store must not keep this process alive."""
    try:
        with open(run_dir / CLOSE_LOG, "ab") as log:
            subprocess.run([sys.executable, "-m", "cancelctl.jobs.stall_close", str(run_dir)], stdin=subprocess.DEVNULL,
                           stdout=log, stderr=log, timeout=CLOSE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass
