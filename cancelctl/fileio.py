"""Crash-safe files shared by the manifest, the job records and the tracking run folders."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class LockBusy(TimeoutError):
    """Another process held a lock for longer than the timeout."""


def atomic_write_json(path: Path, data: Any, *, sort_keys: bool = False) -> None:
    """Readers see the old or the new file, never a torn one, even if the writer is killed
    (tmp in the same folder + fsync + os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=sort_keys)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def file_lock(path: Path, timeout_s: float, *, what: str = "lock") -> Iterator[int]:
    """Exclusive flock on `path` with a bounded wait (LockBusy after `timeout_s`): a stuck holder
    must never hang a launcher or a training run. Yields the locked fd: pass it to a child
    (pass_fds) to keep the lock held while the child lives."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockBusy(f"{what}: {path} held by another process for over {timeout_s:.0f} s") from None
                time.sleep(0.05)
        yield fd
    finally:
        os.close(fd)  # closing our fd releases the lock unless a child still holds a copy


@contextlib.contextmanager
def file_lock_if_free(path: Path, timeout_s: float, *, what: str = "lock") -> Iterator[bool]:
    """`file_lock`, but a lock still held after `timeout_s` yields False instead of raising: for
    callers that go on either way (or skip) rather than fail."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(file_lock(path, timeout_s, what=what))
            held = True
        except LockBusy:
            held = False
        yield held  # outside the except: the body's own errors are not chained to LockBusy


def read_json(path: Path, default: Any = None) -> Any:
    """The JSON document at `path`, or `default` when it is missing or unreadable (a torn or
    half-written file reads as absent: every writer here is atomic, so that is a file being born)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default
