"""Crash-safe files shared by the manifest, the job records and the tracking run folders."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

log = logging.getLogger("cancelctl")


class LockBusy(TimeoutError):
    """Another process held a lock for longer than the timeout."""


def raise_naming(exc: OSError, path: Path | str) -> NoReturn:
    """Raise `exc` naming `path` when it names no file: a write or flush on an open file (a full
    disk, an I/O error) says only its cause, and the screen and a run's reason must say where
    ("No space left on device: /w/sweeps/s/manifest.json")."""
    if exc.filename is None and exc.errno is not None:
        raise type(exc)(exc.errno, exc.strerror or os.strerror(exc.errno), str(path)) from exc
    raise exc


_SAID: set[tuple[str, str]] = set()


def say_once(path: Path | str, what: str, message: str) -> None:
    """Warn `message` once per process for (`path`, `what`): `watch` and `sweep` read a run's files
    at every refresh, and a damaged file is said once, not at each."""
    key = (str(path), what)
    if key not in _SAID:
        _SAID.add(key)
        log.warning("%s", message)


def atomic_write_json(path: Path, data: Any, *, sort_keys: bool = False) -> None:
    """Readers see the old or the new file, never a torn one, even if the writer is killed
    (tmp in the same folder + fsync + os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise_naming(exc, path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=sort_keys)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise_naming(exc, path)
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
    """The JSON document at `path`, or `default` when it is missing or unreadable. Every writer here
    is atomic, so a file that is there but unreadable (a byte that is not UTF-8, cut short, not
    JSON, no permission) was damaged from outside: it reads as absent, and that is said once."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as exc:
        say_once(path, "unreadable", f"{path}: unreadable ({unreadable_cause(exc)}); read as if it were missing")
        return default


def unreadable_cause(exc: BaseException) -> str:
    """Why a file could not be read, in a few words, without the codec's jargon."""
    if isinstance(exc, UnicodeDecodeError):
        return f"a byte that is not UTF-8 at offset {exc.start}"
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def read_jsonl(path: Path) -> list[Any]:
    """The JSON value of each line of `path` ([] when it is missing). A line that does not parse — a
    byte that is not UTF-8, a line damaged or from another writer — is skipped and said once (the
    rest still count); a torn last line (a writer killed mid-line) is skipped without a word.
    Other OS errors (no permission) are raised: the error screen names the file."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    torn = lines.pop()  # b"" when the file ends with a newline
    values, skipped = [], []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            values.append(json.loads(raw))
        except ValueError as exc:
            skipped.append((number, exc))
    if skipped:
        number, exc = skipped[0]
        say_once(path, "lines", f"{path}: skipped {len(skipped)} unreadable line(s), the first at line {number} "
                                f"({unreadable_cause(exc)}); the other lines are read")
    if torn.strip():
        with contextlib.suppress(ValueError):
            values.append(json.loads(torn))  # complete, only its newline is missing
    return values
