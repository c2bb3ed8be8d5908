"""One cancelctl writer at a time in a sqlite MLflow store, across processes.

sqlite lets one connection write at a time and MLflow meets contention with sqlite's busy handler
(busy_timeout 20 s): waiters poll with growing sleeps, so under many writers some starve for the
whole 20 s and fail, and sqlite fails some at once where waiting could deadlock ("database is
locked"). Measured with 32 concurrent runs (benchmarks/bench_tracking_scale.py): 56 s stalls and
24 of 32 runs paused. So cancelctl's own store calls queue here instead, each holding the lock for
one short MLflow call (≤1000 points). The lock is a POSIX record lock on `<db>.lock` beside the
database, the kind of lock sqlite itself relies on: it holds wherever the sqlite store's own
locking holds. Waiters who have waited longer poll more often (20 ms down to 4 ms between tries), so the
queue is roughly first come, first served. Other stores (HTTP servers, postgres) take no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from cancelctl.tracking.uri import TrackingUnavailable, sqlite_path

STORE_LOCK_TIMEOUT_S = 30.0  # then the call fails like a dead store: the run pauses MLflow, JSONL goes on
_POLL_S = (0.02, 0.004)  # sleep between tries: first, and floor as the wait grows

_held: dict[Path, int] = {}  # lock file -> depth: reentrant within a process (a store call inside another)


def sqlite_schema_exists(db_path: Path) -> bool:
    """Whether MLflow's schema was created in this sqlite file (its alembic_version has a row)."""
    if not db_path.exists():
        return False
    try:
        con = sqlite3.connect(db_path.as_uri() + "?mode=ro", uri=True, timeout=30)
        try:
            return con.execute("SELECT version_num FROM alembic_version").fetchone() is not None
        finally:
            con.close()
    except sqlite3.Error:  # no such table (empty file), or unreadable: let MLflow create/complain
        return False


def store_lock_path(uri: str) -> Path | None:
    """`<db>.lock` of a sqlite store; None for stores that need no lock."""
    db = sqlite_path(uri)
    return db.with_name(db.name + ".lock") if db is not None else None


@contextlib.contextmanager
def store_write_lock(uri: str, timeout_s: float = STORE_LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the store's write lock (no-op for non-sqlite stores). Raises TrackingUnavailable
    after `timeout_s` of waiting."""
    path = store_lock_path(uri)
    if path is None or path in _held:
        if path is not None:
            _held[path] += 1
        try:
            yield
        finally:
            if path is not None:
                _held[path] -= 1
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(fd, path, timeout_s)
        _held[path] = 1
        try:
            yield
        finally:
            del _held[path]
    finally:
        os.close(fd)  # releases the lock


def _acquire(fd: int, path: Path, timeout_s: float) -> None:
    started = time.monotonic()
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:  # EAGAIN/EACCES: held by another process
            if not isinstance(exc, BlockingIOError) and not isinstance(exc, PermissionError):
                raise
        waited = time.monotonic() - started
        if waited >= timeout_s:
            raise TrackingUnavailable(f"sqlite store lock {path} busy for over {timeout_s:.0f} s")
        first, floor = _POLL_S
        time.sleep(max(floor, first / (1.0 + 4.0 * waited)))  # older waiters poll faster: ~FIFO
