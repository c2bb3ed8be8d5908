"""What tracking writes in a run folder: run.json, metrics.jsonl, sync_state.json (schemas: package
docstring; where they are: `cancelctl.workdir.RunFolder`)."""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cancelctl.fileio import atomic_write_json, file_lock, say_once, unreadable_cause
from cancelctl.tracking.uri import sqlite_path, store_identity
from cancelctl.workdir import METRICS_JSONL, RUN_JSON, SYNC_STATE, RunFolder  # noqa: F401 (the tracking package re-exports the names)

LOCK_TIMEOUT_S = 30.0
TERMINAL_STATUSES = ("FINISHED", "FAILED", "KILLED")

log = logging.getLogger("cancelctl.tracking")


# ---------------------------------------------------------------------------------------------
# atomic writes and the per-run lock


@contextlib.contextmanager
def run_dir_lock(run_dir: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Serialize uploads of one run folder between a live RunLogger and `cancelctl sync`.
    Bounded wait (LockBusy, a TimeoutError): a stuck holder must not hang a training run."""
    with file_lock(RunFolder(Path(run_dir)).tracking_lock, timeout_s, what="run folder upload"):
        yield


# ---------------------------------------------------------------------------------------------
# run.json


@dataclass
class RunRecord:
    """run.json: what is needed to (re)create the MLflow run of a cancelctl run."""

    run_id: str
    name: str
    experiment: str
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    mlflow_run_id: str | None = None
    tracking_uri: str | None = None
    status: str | None = None
    workdir: str | None = None  # the work dir the run was launched in (see `store_uri`)

    @classmethod
    def load(cls, run_dir: Path) -> RunRecord:
        path = RunFolder(Path(run_dir)).run_json
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:  # the message names the file, not only the codec's complaint
            raise ValueError(f"{path}: unreadable run record ({unreadable_cause(exc)})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: unreadable run record (a JSON {type(data).__name__}, not an object)")
        missing = [key for key in ("run_id", "name", "experiment") if not data.get(key)]
        if missing:
            raise ValueError(f"{path}: missing {', '.join(missing)}")
        known = {name: data.get(name) for name in cls.__dataclass_fields__ if name in data}
        known["tags"] = {str(k): str(v) for k, v in (data.get("tags") or {}).items()}
        known["params"] = dict(data.get("params") or {})
        return cls(**known)

    def store_uri(self, run_dir: Path) -> str | None:
        """Where this run folder logs now (`run_store_uri`)."""
        return run_store_uri({"tracking_uri": self.tracking_uri, "workdir": self.workdir}, run_dir)


def run_store_uri(record: Mapping[str, Any], run_dir: Path) -> str | None:
    """The tracking URI a run folder logs to now: run.json's `tracking_uri`, except that a sqlite
    store inside the work dir the run was launched in (the default `<workdir>/mlflow.db`) is that
    store inside the work dir the folder is in now: a moved or copied work dir (`mv`, `cp -r`)
    carries its own store, and a copy never reads or writes the original's."""
    uri = record.get("tracking_uri")
    db = sqlite_path(uri) if uri else None
    if db is None:
        return uri
    moved = RunFolder(Path(run_dir)).relocated(db, record.get("workdir"))
    return uri if moved == db else "sqlite:///" + str(moved)


def write_run_json(
    run_dir: Path,
    *,
    run_id: str,
    name: str,
    experiment: str,
    tags: Mapping[str, str],
    params: Mapping[str, Any],
    mlflow_run_id: str | None = None,
    tracking_uri: str | None = None,
    status: str | None = None,
    workdir: str | None = None,
    **extra: Any,
) -> Path:
    """Write run.json atomically (extra keys, e.g. the executor's own fields, are kept as they are)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    record = RunRecord(run_id, name, experiment, dict(tags), dict(params), mlflow_run_id, tracking_uri, status, workdir)
    path = RunFolder(run_dir).run_json
    atomic_write_json(path, {**extra, **asdict(record)}, sort_keys=True)
    return path


def find_run_dirs(workdir: Path) -> list[Path]:
    """Every folder under `workdir` holding a run.json (any layout the executor picks)."""
    return sorted(path.parent for path in Path(workdir).rglob(RUN_JSON))


# ---------------------------------------------------------------------------------------------
# sync_state.json


@dataclass
class StoreProgress:
    """How much of metrics.jsonl one tracking store holds, and the run's id and status there."""

    mlflow_run_id: str | None = None
    bytes: int = 0  # the watermark: metrics.jsonl[:bytes] is in this store
    points: int = 0
    status: str | None = None
    store_id: str | None = None  # `uri.store_identity` of the store file these marks were made in


@dataclass
class SyncState:
    final_status: str | None = None
    stores: dict[str, StoreProgress] = field(default_factory=dict)
    voided: set[str] = field(default_factory=set)  # stores whose marks `progress` found were another file's

    @classmethod
    def load(cls, run_dir: Path) -> SyncState:
        path = RunFolder(Path(run_dir)).sync_state
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:  # unreadable state = nothing known uploaded (re-upload is a no-op)
            say_once(path, "unreadable", f"{path}: unreadable ({unreadable_cause(exc)}); ignored: its points are "
                                         f"compared with the store's again")
            return cls()
        known = StoreProgress.__dataclass_fields__
        stores = {
            uri: StoreProgress(**{k: v for k, v in entry.items() if k in known})
            for uri, entry in (data.get("stores") or {}).items()
        }
        return cls(final_status=data.get("final_status"), stores=stores)

    def save(self, run_dir: Path) -> None:
        data = {
            "version": 1,
            "final_status": self.final_status,
            "stores": {uri: asdict(progress) for uri, progress in self.stores.items()},
        }
        atomic_write_json(RunFolder(Path(run_dir)).sync_state, data, sort_keys=True)

    def progress(self, uri: str) -> StoreProgress:
        """The marks of store `uri`; none when the store file at `uri` is another than the one they
        were made in (rebuilt after a cut migration, or a copy's): it holds none of the points yet
        for all we know, and re-sending a point is a no-op."""
        progress = self.stores.setdefault(uri, StoreProgress())
        identity = store_identity(uri)
        if identity is not None:
            if progress.store_id not in (None, identity):
                progress = self.stores[uri] = StoreProgress()
                self.voided.add(uri)
            progress.store_id = identity
        return progress


# ---------------------------------------------------------------------------------------------
# metrics.jsonl


@dataclass
class MetricsLine:
    step: int
    ts: int  # epoch ms
    metrics: dict[str, float]
    end: int  # byte offset just past this line


def encode_metrics_line(step: int, ts_ms: int, metrics: Mapping[str, float]) -> bytes:
    values = {key: _json_safe(value) for key, value in metrics.items()}
    text = json.dumps({"step": step, "ts": ts_ms, "metrics": values}, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8") + b"\n"


def _json_safe(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def iter_metrics_lines(path: Path, start: int = 0) -> Iterator[MetricsLine]:
    """Complete lines from byte `start` on. A torn last line (killed mid-write) is not yielded;
    unparseable complete lines are skipped, said once per file (not at every read: `watch`, `sync`)."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return
    skipped: list[int] = []  # the byte each unreadable line ends at
    try:
        with handle:
            handle.seek(start)
            offset = start
            for raw in handle:
                if not raw.endswith(b"\n"):
                    return
                offset += len(raw)
                try:
                    data = json.loads(raw)
                    metrics = {str(k): float(v) for k, v in data["metrics"].items()}
                    line = MetricsLine(int(data["step"]), int(data["ts"]), metrics, offset)
                except (ValueError, KeyError, TypeError, AttributeError):
                    if raw.strip():
                        skipped.append(offset)
                    continue
                yield line
    finally:
        if skipped:
            say_once(path, "lines", f"{path}: skipping {len(skipped)} unreadable line(s), the first ending at byte "
                                    f"{skipped[0]}; the other points are read")


def read_metrics_jsonl(path: Path, start: int = 0) -> list[tuple[int, str, float, int]]:
    """(step, key, value, ts) for every point of a metrics.jsonl from byte `start` on."""
    return [
        (line.step, key, value, line.ts)
        for line in iter_metrics_lines(Path(path), start)
        for key, value in line.metrics.items()
    ]
