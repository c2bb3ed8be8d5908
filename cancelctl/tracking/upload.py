"""Moving metric points from a run folder into MLflow with log_batch (shared by RunLogger and sync)."""

from __future__ import annotations

import math
import posixpath
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cancelctl.tracking.runfiles import METRICS_JSONL, RunRecord, StoreProgress, iter_metrics_lines
from cancelctl.tracking.runs import get_or_create_run
from cancelctl.tracking.storelock import store_write_lock
from cancelctl.tracking.uri import fast_fail_http

if TYPE_CHECKING:
    from mlflow import MlflowClient

MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limit
GROUPS_PER_CHECKPOINT = 20  # log_batch groups (~1000 points each) between watermark saves
MAX_DOUBLE = sys.float_info.max
_METRIC_KEY = re.compile(r"^[/\w.\- :]{1,250}$")


def check_metric_key(key: str) -> None:
    """Refuse keys MLflow would reject, at log time, so one bad key cannot disable tracking."""
    valid = isinstance(key, str) and _METRIC_KEY.match(key) and posixpath.normpath(key) == key
    if not valid or key == "." or key.startswith(("..", "/")):
        raise ValueError(
            f"metric key {key!r}: use ≤250 letters, digits, '_', '-', '.', ' ', ':', '/' forming a "
            "normalized relative path (no '//', './', '..', leading or trailing '/')"
        )


def mlflow_value(value: float) -> float:
    """NaN stays NaN (stores keep it); ±inf becomes ±max double, as the SQL store stores it anyway."""
    if math.isinf(value):
        return MAX_DOUBLE if value > 0 else -MAX_DOUBLE
    return value


def to_mlflow_metrics(lines: Iterable[tuple[int, int, Mapping[str, float]]]) -> list:
    """(step, ts_ms, {key: value}) lines -> mlflow Metric entities."""
    from mlflow.entities import Metric

    return [
        Metric(key, mlflow_value(value), ts, step)
        for step, ts, metrics in lines
        for key, value in metrics.items()
    ]


def send_metrics(client: MlflowClient, mlflow_run_id: str, metrics: Sequence) -> int:
    """log_batch in calls of ≤1000 points, each under the store lock; returns the points sent."""
    with fast_fail_http():
        for start in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            chunk = list(metrics[start : start + MAX_METRICS_PER_BATCH])
            with store_write_lock(client.tracking_uri):
                client.log_batch(mlflow_run_id, metrics=chunk, synchronous=True)
    return len(metrics)


def upload_jsonl_backlog(
    client: MlflowClient,
    run_dir: Path,
    progress: StoreProgress,
    checkpoint: Callable[[], None] = lambda: None,
) -> int:
    """Upload metrics.jsonl beyond `progress.bytes`; advances `progress` in place and calls
    `checkpoint` every few thousand points so a crash mid-upload resumes near where it stopped
    (re-sent points are no-ops: same key, step, timestamp and value)."""
    uploaded = 0
    group: list[tuple[int, int, dict[str, float]]] = []
    group_points = 0
    groups_since_checkpoint = 0
    last_end = progress.bytes
    for line in iter_metrics_lines(Path(run_dir) / METRICS_JSONL, progress.bytes):
        group.append((line.step, line.ts, line.metrics))
        group_points += len(line.metrics)
        last_end = line.end
        if group_points >= MAX_METRICS_PER_BATCH:
            uploaded += _send_group(client, progress, group, last_end)
            group, group_points = [], 0
            groups_since_checkpoint += 1
            if groups_since_checkpoint >= GROUPS_PER_CHECKPOINT:
                checkpoint()
                groups_since_checkpoint = 0
    if group:
        uploaded += _send_group(client, progress, group, last_end)
    return uploaded


def _send_group(client, progress: StoreProgress, group, end: int) -> int:
    sent = send_metrics(client, progress.mlflow_run_id, to_mlflow_metrics(group))
    progress.bytes = end
    progress.points += sent
    return sent


def ensure_mlflow_run(uri: str, run_dir: Path, progress: StoreProgress) -> bool:
    """Make sure `progress.mlflow_run_id` names this run's MLflow run in `uri`, creating the run
    from run.json (idempotent, by tag) if needed. Returns whether a run was created."""
    if progress.mlflow_run_id:
        return False
    record = RunRecord.load(run_dir)
    progress.mlflow_run_id, created = get_or_create_run(
        uri, record.experiment, run_id=record.run_id, name=record.name, tags=record.tags, params=record.params
    )
    return created


def set_status(client: MlflowClient, mlflow_run_id: str, status: str) -> None:
    """Terminal statuses also stamp the end time; others (RUNNING, SCHEDULED) only change status."""
    with fast_fail_http(), store_write_lock(client.tracking_uri):
        if status in ("FINISHED", "FAILED", "KILLED"):
            client.set_terminated(mlflow_run_id, status=status)
        else:
            client.update_run(mlflow_run_id, status=status)
