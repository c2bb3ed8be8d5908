"""`cancelctl sync`: upload what run folders hold beyond their watermark; idempotent."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from cancelctl.tracking.runfiles import (
    TERMINAL_STATUSES,
    RunRecord,
    SyncState,
    find_run_dirs,
    run_dir_lock,
)
from cancelctl.tracking.runs import client_for
from cancelctl.tracking.upload import ensure_mlflow_run, set_status, upload_jsonl_backlog
from cancelctl.tracking.uri import (
    TrackingUnavailable,
    credentials_problem,
    default_tracking_uri,
    normalize_tracking_uri,
    probe_store,
)

log = logging.getLogger("cancelctl.tracking")


@dataclass
class RunSyncResult:
    run_id: str
    run_dir: Path
    uri: str
    mlflow_run_id: str | None = None
    uploaded: int = 0  # points sent now
    created: bool = False  # the MLflow run did not exist before this sync
    status: str | None = None  # final status set now, if any
    error: str | None = None
    store_down: bool = False  # the error is the store's (the same for every run of it), not the run's


@dataclass
class SyncResult:
    runs: dict[str, RunSyncResult] = field(default_factory=dict)  # by cancelctl run_id (or folder)

    @property
    def uploaded(self) -> int:
        return sum(run.uploaded for run in self.runs.values())

    @property
    def failed(self) -> list[RunSyncResult]:
        return [run for run in self.runs.values() if run.error]


def sync(workdir: Path, uri: str | None = None) -> SyncResult:
    """For every run folder under `workdir` (a folder with run.json): create the MLflow run if
    missing, upload metrics.jsonl beyond the store's watermark, set the final status if one is
    known (sync_state.final_status, else run.json's status). Target store: `uri`, else the run's
    run.json tracking_uri, else the work dir's sqlite store. A second call uploads 0."""
    workdir = Path(workdir)
    result = SyncResult()
    unreachable: dict[str, str | None] = {}  # probe each store once
    for run_dir in find_run_dirs(workdir):
        outcome = _sync_run_dir(run_dir, uri, workdir, unreachable)
        result.runs[outcome.run_id] = outcome
        if outcome.error:  # in the result: the caller says it, a store's once (not once per run of it)
            log.debug("sync %s: %s", run_dir, outcome.error)
    return result


def _sync_run_dir(run_dir: Path, uri: str | None, workdir: Path, unreachable: dict[str, str | None]) -> RunSyncResult:
    try:
        record = RunRecord.load(run_dir)
        target = normalize_tracking_uri(uri or record.store_uri(run_dir) or default_tracking_uri(workdir))
    except (OSError, ValueError) as exc:
        return RunSyncResult(run_id=run_dir.name, run_dir=run_dir, uri=str(uri), error=str(exc))
    outcome = RunSyncResult(run_id=record.run_id, run_dir=run_dir, uri=target)
    if target not in unreachable:
        unreachable[target] = probe_store(target) or credentials_problem(target)
    if unreachable[target]:
        outcome.error, outcome.store_down = f"tracking store {target} unusable: {unreachable[target]}", True
        return outcome
    try:
        with run_dir_lock(run_dir):
            _upload_run(run_dir, record, target, outcome)
    except TrackingUnavailable as exc:
        outcome.error, outcome.store_down = str(exc), True
    except Exception as exc:  # report per run; other runs still sync
        outcome.error = f"{type(exc).__name__}: {exc}"
    return outcome


def _upload_run(run_dir: Path, record: RunRecord, uri: str, outcome: RunSyncResult) -> None:
    client = client_for(uri)  # first: opening may rebuild the store, which voids the marks below
    state = SyncState.load(run_dir)
    progress = state.progress(uri)
    try:
        outcome.created = ensure_mlflow_run(uri, run_dir, progress)
        outcome.mlflow_run_id = progress.mlflow_run_id
        outcome.uploaded = upload_jsonl_backlog(client, run_dir, progress, checkpoint=lambda: state.save(run_dir))
        hint = (record.status or "").upper()
        final = state.final_status or (hint if hint in TERMINAL_STATUSES else None)
        if final and progress.status != final:
            set_status(client, progress.mlflow_run_id, final)
            progress.status = outcome.status = final
    finally:
        state.save(run_dir)
