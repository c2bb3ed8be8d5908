"""One cancelctl writer at a time in a sqlite MLflow store, across processes.

sqlite lets one connection write at a time and MLflow meets contention with sqlite's busy handler
(busy_timeout 20 s): waiters poll with growing sleeps, so under many writers some starve for the
whole 20 s and fail, and sqlite fails some at once where waiting could deadlock ("database is
locked"). Measured with 32 concurrent runs (benchmarks/bench_tracking_scale.py): 56 s stalls and
24 of 32 runs paused. So cancelctl's own store calls take turns here instead, each holding the
lock for one short MLflow call. A RunLogger in the middle of a run only tries it (its points are in
metrics.jsonl and go up at a later step); starting a store, closing a run and `cancelctl sync`
wait for it, bounded, ahead of those who only try, and waiters who have waited longer poll more
often (20 ms down to 4 ms between tries), so the wait is roughly first come, first served. The
lock is a POSIX record lock on `<db>.lock` beside the database, the kind of lock sqlite itself
relies on: it holds wherever the sqlite store's own locking holds. Other stores (HTTP servers,
postgres) take no lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from cancelctl.tracking.uri import TrackingUnavailable, sqlite_path, sqlite_problem

STORE_LOCK_TIMEOUT_S = 10.0  # then the call fails like a dead store: the run pauses MLflow, JSONL goes on
STORE_CREATE_TIMEOUT_S = 60.0  # waiting for another process to create the schema (~5 s, more on a busy host)
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


class StoreBusy(TrackingUnavailable):
    """Another process holds the store lock (or waits for it, when trying without waiting)."""


@contextlib.contextmanager
def store_write_lock(uri: str, timeout_s: float = STORE_LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the store's write lock (no-op for non-sqlite stores and when this process holds it).

    `timeout_s > 0`: wait for it, ahead of those who only try, and raise StoreBusy after
    `timeout_s`. `timeout_s == 0`: one try, giving way to anyone waiting (a RunLogger's flush in
    the middle of a run: its points are in metrics.jsonl already and wait for its next step).
    A store that cannot be written (`uri.sqlite_problem`) raises TrackingUnavailable at once:
    MLflow would retry it for minutes."""
    path = store_lock_path(uri)
    if path is not None and path not in _held:
        problem = sqlite_problem(sqlite_path(uri))
        if problem:
            raise TrackingUnavailable(f"tracking store {uri} unusable: {problem}")
    if path is None or path in _held:
        if path is not None:
            _held[path] += 1
        try:
            yield
        finally:
            if path is not None:
                _held[path] -= 1
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        raise TrackingUnavailable(f"tracking store {uri} unusable: cannot write its lock file {path} "
                                  f"({exc.strerror})") from exc
    try:
        if timeout_s > 0:
            _wait(fd, path, timeout_s)
        else:
            _try(fd, path)
        _held[path] = 1
        try:
            yield
        finally:
            del _held[path]
    finally:
        os.close(fd)  # releases every lock this fd holds


# Byte 0 of the lock file is the write lock; byte 1 is held shared by every waiter, so that a try
# (which needs byte 1 exclusive for a moment) gives way to them.
_WRITE, _WAITERS = 0, 1


def _lock(fd: int, mode: int, byte: int) -> bool:
    try:
        fcntl.lockf(fd, mode | fcntl.LOCK_NB, 1, byte)
        return True
    except (BlockingIOError, PermissionError):  # EAGAIN/EACCES: held by another process
        return False


def _try(fd: int, path: Path) -> None:
    if not _lock(fd, fcntl.LOCK_EX, _WAITERS):
        raise StoreBusy(f"sqlite store lock {path}: others are waiting")
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, _WAITERS)
    if not _lock(fd, fcntl.LOCK_EX, _WRITE):
        raise StoreBusy(f"sqlite store lock {path} is held")


def _wait(fd: int, path: Path, timeout_s: float) -> None:
    started = time.monotonic()
    announced = False
    while True:
        announced = announced or _lock(fd, fcntl.LOCK_SH, _WAITERS)
        if announced and _lock(fd, fcntl.LOCK_EX, _WRITE):
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, _WAITERS)
            return
        waited = time.monotonic() - started
        if waited >= timeout_s:
            raise StoreBusy(f"sqlite store lock {path} busy for over {timeout_s:.0f} s")
        first, floor = _POLL_S
        time.sleep(max(floor, first / (1.0 + 4.0 * waited)))  # older waiters poll faster: ~FIFO
