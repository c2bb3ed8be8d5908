"""The first seconds of a launch: the sweep is known to `cancel` before its manifest exists.

A launcher announces itself as soon as it has read its sweep file's name (`launching`: a shared flock
on `<sweep>/launch.lock`, one per launcher, held until it ends). `cancel` of a sweep with no manifest
yet but a launcher announced leaves a request (`<sweep>/cancel.json`) instead of answering "unknown
sweep"; the launch reads it (`cancel_requested_at`) just before it submits, and a request made since
it announced itself stops it: its runs are recorded cancelled, nothing is submitted.

`hold_at` is fault injection for the tests of that window (`tests/launch/test_interrupt.py`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from cancelctl.fileio import atomic_write_json, read_json
from cancelctl.manifest import Manifest
from cancelctl.workdir import SweepPaths

log = logging.getLogger("cancelctl.launch")

ANNOUNCE_WAIT_S = 5.0  # a `cancel` probing the lock holds it exclusively for a moment only
HOLD_PREFIX = "CANCELCTL_FAULT_HOLD_"  # + LOADING | PLANNING | REGISTERED: see `hold_at`
HOLD_MAX_S = 120.0

_announced: dict[Path, list] = {}  # launch.lock -> [fd, since, depth] of this process's announcement
_guard = threading.Lock()


@contextlib.contextmanager
def launching(paths: SweepPaths) -> Iterator[float]:
    """Announce a launch of `paths.sweep` for the block. Yields the time this process first announced
    it (an announcement inside another one — the CLI's, then `launch_sweep`'s — keeps the first): a
    `cancel` since then stops the launch. Best effort: where the lock cannot be taken (a read-only
    work dir) nothing is announced, and the launch itself then fails naming the cause."""
    lock = paths.launch_lock
    with _guard:
        held = _announced.get(lock)
        if held is not None:
            held[2] += 1
        else:
            created = _missing_dirs(lock.parent)
            fd = _take_shared(lock)
            held = [fd, time.time(), 1, created]
            if fd is not None:
                _announced[lock] = held
    try:
        yield held[1]
    finally:
        with _guard:
            held[2] -= 1
            if held[2] == 0 and held[0] is not None:
                _announced.pop(lock, None)
                os.close(held[0])  # releases the shared lock
                if not paths.manifest.exists():
                    _withdraw(lock, held[3])


def _missing_dirs(folder: Path) -> list[Path]:
    """The folders that creating `folder` would make, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _withdraw(lock: Path, created: list[Path]) -> None:
    """A launch that ended before recording anything (bad input, a signal while loading) leaves
    nothing behind: its lock file and the folders it made go, unless another launcher holds it."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return
    try:
        lock.unlink(missing_ok=True)
        for folder in created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty
    finally:
        os.close(fd)


def _take_shared(lock: Path) -> int | None:
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        log.debug("launch of %s not announced: %s", lock.parent.name, exc)
        return None
    deadline = time.monotonic() + ANNOUNCE_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                log.warning("launch of %s not announced: %s stayed locked; a `cancel` before its manifest "
                            "exists will not find it", lock.parent.name, lock)
                return None
            time.sleep(0.01)


def launch_in_progress(paths: SweepPaths) -> bool:
    """True while a launcher of the sweep (this process's or another's) is announced."""
    try:
        fd = os.open(paths.launch_lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False  # nobody holds it: the lock file of a launch that has ended
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def request_cancel(paths: SweepPaths) -> float:
    """Record a cancel of the sweep for a launch that has not submitted yet; returns its time."""
    now = time.time()
    atomic_write_json(paths.cancel_request, {"requested_at": now})
    return now


def cancel_requested_at(paths: SweepPaths, manifest: Manifest) -> float | None:
    """When the sweep was last cancelled: `cancel` of a registered sweep (the manifest's cancelled_at)
    or of one still starting (its request)."""
    request = read_json(paths.cancel_request)
    requested = request.get("requested_at") if isinstance(request, dict) else None
    times = [t for t in (manifest.cancelled_at, requested) if isinstance(t, (int, float)) and not isinstance(t, bool)]
    return max(times) if times else None


def hold_at(point: str) -> None:
    """Fault injection: with CANCELCTL_FAULT_HOLD_<POINT>=<file> set, the process reaching `point`
    creates <file>.reached and waits while <file> exists (at most HOLD_MAX_S, never for ever), so a
    test can land a signal or a `cancel` exactly there."""
    gate = os.environ.get(HOLD_PREFIX + point.upper())
    if not gate:
        return
    Path(gate + ".reached").touch()
    deadline = time.monotonic() + HOLD_MAX_S
    while Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


__all__ = ["cancel_requested_at", "hold_at", "launch_in_progress", "launching", "request_cancel"]
