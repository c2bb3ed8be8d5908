"""RunLogger: metrics to metrics.jsonl at once and to MLflow in buffered log_batch calls.

The JSONL file is the record; MLflow is a copy that may lag. If the store fails, the logger warns
once, keeps writing JSONL, leaves MLflow alone for `retry_interval_s`, tries once more at close,
and `cancelctl sync` uploads whatever is still missing. Not thread-safe: one logger per run process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from cancelctl import fencing
from cancelctl.fileio import raise_naming
from cancelctl.tracking.runfiles import (
    METRICS_JSONL,
    TERMINAL_STATUSES,
    StoreProgress,
    SyncState,
    encode_metrics_line,
    run_dir_lock,
)
from cancelctl.tracking.runs import client_for
from cancelctl.tracking.storelock import STORE_LOCK_TIMEOUT_S, StoreBusy, store_write_lock
from cancelctl.tracking.upload import (
    check_metric_key,
    ensure_mlflow_run,
    send_metrics,
    set_status,
    to_mlflow_metrics,
    upload_jsonl_backlog,
)
from cancelctl.tracking.uri import TrackingUnavailable, normalize_tracking_uri, probe_store

log = logging.getLogger("cancelctl.tracking")

RUN_STATUSES = ("SCHEDULED", "RUNNING", *TERMINAL_STATUSES)
MAX_BUFFERED_POINTS = 50_000  # beyond this, a busy store's points are re-read from metrics.jsonl

StoreAction = Callable[["object", StoreProgress, SyncState], None]  # (MlflowClient, progress, state)


class MetricLogger(Protocol):
    """What a backend's `train` and the job around it log through (`RunLogger` is the one the jobs
    hand them; a test's list logger is another)."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...
    def flush(self, wait: bool = True) -> None: ...
    def set_tags(self, tags: Mapping[str, str]) -> None: ...


class RunLogger:
    """Log metrics of one run. `log` appends to metrics.jsonl immediately and buffers for MLflow;
    `flush` uploads the buffer (≤1000 points per log_batch) and records the watermark in
    sync_state.json. Construction marks the MLflow run RUNNING (pass mark_running=False not to).

    `flush_every` counts points (not steps); a flush also happens when `flush_interval_s` has passed
    since the last one, so the MLflow UI stays current on slow runs. Those flushes (and the RUNNING
    mark) never wait for a sqlite store another run is writing: they try again at the next `log`.
    `flush` and `close` wait (bounded, `storelock.STORE_LOCK_TIMEOUT_S`). With `mlflow_run_id=None` the
    logger finds or creates the MLflow run from `run_dir/run.json`.
    Usable as a context manager: closes FINISHED, or FAILED/KILLED on an exception.
    """

    def __init__(
        self,
        run_dir: Path,
        uri: str,
        mlflow_run_id: str | None = None,
        flush_every: int = 1000,
        *,
        flush_interval_s: float = 30.0,
        retry_interval_s: float = 300.0,
        mark_running: bool = True,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.uri = normalize_tracking_uri(uri)
        self.flush_every = flush_every
        self.flush_interval_s = flush_interval_s
        self.retry_interval_s = retry_interval_s
        self._mlflow_run_id = mlflow_run_id
        self._jsonl, self._end = _open_for_append(self.run_dir / METRICS_JSONL)
        self._buffer: list[tuple[int, int, dict[str, float]]] = []
        self._buffer_points = 0
        self._buffer_start = self._end  # byte offset in metrics.jsonl where the buffer begins
        # Lines an earlier attempt (crash, requeue, dead store) left behind go up from the JSONL.
        self._backlog = SyncState.load(self.run_dir).progress(self.uri).bytes < self._end
        self._retry_at = 0.0  # time.monotonic() before which MLflow is left alone
        self._warned = False
        self._store_failures = 0
        self._pending_status: str | None = None  # RUNNING, when the store was busy at construction
        self._last_flush = time.monotonic()
        self._closed = False
        if mark_running and not self._store_call(self._status_update("RUNNING"), wait=False):
            self._pending_status = "RUNNING"  # set by the next upload that gets through

    # -- public API ---------------------------------------------------------------------------

    @property
    def mlflow_run_id(self) -> str | None:
        return self._mlflow_run_id

    @property
    def store_failures(self) -> int:
        """How many store calls failed (each one paused MLflow use; the JSONL kept the points)."""
        return self._store_failures

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record `metrics` at `step`: to metrics.jsonl now, to MLflow at the next flush."""
        if self._closed:
            raise RuntimeError(f"RunLogger for {self.run_dir} is closed")
        fencing.check(self.run_dir)  # a stale attempt (a newer one started) stops here, writing nothing
        values = {}
        for key, value in metrics.items():
            check_metric_key(key)
            values[key] = float(value)
        step, ts_ms = int(step), int(time.time() * 1000)
        line = encode_metrics_line(step, ts_ms, values)
        try:
            self._jsonl.write(line)
            self._jsonl.flush()  # survives a crash of this process (no fsync: not a power loss)
        except OSError as exc:  # a full disk: the run's reason names the file, not only the cause
            raise_naming(exc, self.run_dir / METRICS_JSONL)
        self._end += len(line)
        if self._paused():
            self._buffer_start = self._end  # the JSONL backlog covers it
            return
        self._buffer.append((step, ts_ms, values))
        self._buffer_points += len(values)
        if self._buffer_points > MAX_BUFFERED_POINTS:  # the store has been busy for long: read them back later
            self._backlog = True
            self._buffer, self._buffer_points, self._buffer_start = [], 0, self._end
        overdue = time.monotonic() - self._last_flush >= self.flush_interval_s
        if self._buffer_points >= self.flush_every or overdue:
            self._flush(wait=False)

    def flush(self, wait: bool = True) -> None:
        """Upload buffered points (or the JSONL backlog) to MLflow; never raises for store errors.
        `wait=False`: only if the store is free now (a busy sqlite store is left for a later flush)."""
        self._flush(wait=wait)

    def _flush(self, wait: bool) -> None:
        if not (self._buffer or self._backlog or self._pending_status) or self._paused():
            self._last_flush = time.monotonic()
            return
        fencing.check(self.run_dir)
        buffer, start, end = self._buffer, self._buffer_start, self._end

        def upload(client, progress: StoreProgress, state: SyncState) -> None:
            if self._backlog or progress.bytes != start:
                upload_jsonl_backlog(client, self.run_dir, progress, checkpoint=lambda: state.save(self.run_dir))
            else:
                progress.points += send_metrics(client, progress.mlflow_run_id, to_mlflow_metrics(buffer))
                progress.bytes = end
            self._backlog = False
            if self._pending_status:
                self._status_update(self._pending_status)(client, progress, state)
                self._pending_status = None

        if self._store_call(upload, wait=wait):  # else busy (kept for the next try) or paused (backlog)
            self._last_flush = time.monotonic()
            self._buffer, self._buffer_points, self._buffer_start = [], 0, end

    def set_state(self, status: str) -> None:
        """Set the MLflow run status (SCHEDULED, RUNNING, FINISHED, FAILED, KILLED)."""
        status = _checked_status(status)
        if status in TERMINAL_STATUSES:
            self._record_final_status(status)
        self._pending_status = None
        self._store_call(self._status_update(status))

    @staticmethod
    def _status_update(status: str) -> StoreAction:
        def update(client, progress: StoreProgress, state: SyncState) -> None:
            set_status(client, progress.mlflow_run_id, status)
            progress.status = status

        return update

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set tags on the MLflow run (best effort, like every store call: the run goes on)."""

        def update(client, progress: StoreProgress, state: SyncState) -> None:
            with store_write_lock(self.uri):
                for key, value in tags.items():
                    client.set_tag(progress.mlflow_run_id, key, str(value))

        self._store_call(update)

    def log_artifact(self, path: Path) -> None:
        """Upload a run-folder file as an MLflow artifact, if it exists (best effort)."""
        if not Path(path).exists():
            return

        def upload(client, progress: StoreProgress, state: SyncState) -> None:
            client.log_artifact(progress.mlflow_run_id, str(path))

        self._store_call(upload)

    def close(self, status: str = "FINISHED") -> None:
        """Set the final status, flush, close the JSONL. After a store failure this is the one
        cheap retry (HTTP stores are probed first); what still fails is left to `cancelctl sync`."""
        if self._closed:
            return
        fencing.check(self.run_dir)  # the newer attempt owns the MLflow run's status now
        status = _checked_status(status)
        self._retry_at = 0.0
        # the status first: a run closing on SIGTERM may be SIGKILLed mid-upload at the scheduler's
        # kill wait; its points stay in metrics.jsonl for `status` (settle_tracking) or `sync`
        self.set_state(status)
        self._flush(wait=True)
        self._jsonl.close()
        self._closed = True
        if self._backlog:
            log.info("%s: metrics not all in %s yet; `cancelctl sync` uploads them", self.run_dir, self.uri)

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close("FINISHED")
        else:
            self.close("KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED")

    # -- internals ----------------------------------------------------------------------------

    def _paused(self) -> bool:
        return time.monotonic() < self._retry_at

    def _store_call(self, action: StoreAction, wait: bool = True) -> bool:
        """Run `action` against the store under the run-folder lock and the store lock, with fresh
        sync state. `wait=False`: a busy sqlite store returns False at once, nothing changed.
        Any failure pauses MLflow use; the JSONL keeps everything."""
        if self._paused():
            return False
        try:
            with run_dir_lock(self.run_dir), store_write_lock(self.uri, STORE_LOCK_TIMEOUT_S if wait else 0):
                state = SyncState.load(self.run_dir)
                try:
                    self._act(action, state)
                finally:
                    state.save(self.run_dir)
        except StoreBusy as exc:
            if not wait:
                return False
            self._pause(exc)
            return False
        except Exception as exc:  # tracking must never stop a training run
            self._pause(exc)
            return False
        return True

    def _act(self, action: StoreAction, state: SyncState) -> None:
        reason = probe_store(self.uri)
        if reason:
            raise TrackingUnavailable(reason)
        client = client_for(self.uri)  # first: opening may rebuild the store, which voids the marks below
        progress = state.progress(self.uri)
        if self.uri in state.voided:  # a rebuilt store: the run id known so far is the old store's
            self._mlflow_run_id = None
        if self._mlflow_run_id:
            progress.mlflow_run_id = self._mlflow_run_id
        ensure_mlflow_run(self.uri, self.run_dir, progress)
        self._mlflow_run_id = progress.mlflow_run_id
        action(client, progress, state)

    def _pause(self, exc: Exception) -> None:
        self._store_failures += 1
        self._retry_at = time.monotonic() + self.retry_interval_s
        self._backlog = True
        self._buffer, self._buffer_points, self._buffer_start = [], 0, self._end
        message = "MLflow store %s unusable for run %s (%s: %s); the run goes on, metrics stay in %s, " \
            "retry in %.0f s / at close, `cancelctl sync` uploads the rest"
        args = (self.uri, self.run_dir.name, type(exc).__name__, _first_line(exc), METRICS_JSONL, self.retry_interval_s)
        if self._warned:
            log.debug(message, *args)
        else:
            log.warning(message, *args)
            self._warned = True

    def _record_final_status(self, status: str) -> None:
        try:
            with run_dir_lock(self.run_dir):
                state = SyncState.load(self.run_dir)
                state.final_status = status
                state.save(self.run_dir)
        except (OSError, TimeoutError) as exc:  # sync then falls back to run.json's status
            log.warning("%s: could not record final status %s (%s)", self.run_dir, status, exc)


def _open_for_append(path: Path):
    """Open metrics.jsonl for appending; terminate a torn last line so new lines stay readable."""
    handle = open(path, "ab")
    end = handle.seek(0, 2)
    if end:
        with open(path, "rb") as reader:
            reader.seek(end - 1)
            if reader.read(1) != b"\n":
                handle.write(b"\n")
                handle.flush()
                end += 1
    return handle, end


def _checked_status(status: str) -> str:
    status = str(status).upper()
    if status not in RUN_STATUSES:
        raise ValueError(f"run status {status!r}: expected one of {', '.join(RUN_STATUSES)}")
    return status


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""
