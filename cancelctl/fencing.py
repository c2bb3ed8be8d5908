"""The attempt fence: a run has at most one attempt writing, whatever started the others.

Every attempt of a run (a first start, a requeue, a `--retry-failed`, a hand-run `sbatch` of the
same script) claims the next attempt number in the run folder (`fence.json`) before it waits for
the attempt lock. Before each write — a metric line, a checkpoint, an outcome — the writer checks
that number: an attempt that is no longer the newest raises `StaleAttempt` and stops without
writing, so a stale attempt still alive beside a newer one (a requeue that raced a resubmit, a
scheduler that lost track of a job) never adds a point, a checkpoint or a verdict to the run.
Fencing tokens in the sense of Kleppmann's "How to do distributed locking": the lock says who
should run, the token decides who may write.

A process registers the fence it claimed (`hold`); `check(run_dir)` is a no-op for a run folder
no attempt of this process claimed (a backend called directly, a test, a tool reading files).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cancelctl.fileio import atomic_write_json, file_lock, read_json
from cancelctl.workdir import RunFolder

FENCE_LOCK_TIMEOUT_S = 30.0


class StaleAttempt(BaseException):
    """A newer attempt of this run exists: this one stops without writing. A BaseException, so a
    backend's `except Exception` (a retry loop, a tracking guard) cannot swallow it."""


@dataclass(frozen=True)
class AttemptFence:
    run_dir: Path
    number: int

    def check(self) -> None:
        """StaleAttempt when a newer attempt has claimed the run since this one did."""
        current = current_attempt(self.run_dir)
        if current > self.number:
            raise StaleAttempt(f"run folder {self.run_dir}: attempt {current} started after this attempt "
                               f"({self.number}); this one stops without writing")


def current_attempt(run_dir: Path) -> int:
    """The newest attempt number claimed in the run folder (0: none yet)."""
    record = read_json(RunFolder(Path(run_dir)).fence, {})
    return int(record.get("attempt", 0)) if isinstance(record, dict) else 0


def claim(run_dir: Path, job_id: str | None = None) -> AttemptFence:
    """The next attempt number of the run, recorded (who claimed it, when) for every later check."""
    folder = RunFolder(Path(run_dir))
    with file_lock(folder.fence_lock, FENCE_LOCK_TIMEOUT_S, what="attempt fence"):
        number = current_attempt(folder.path) + 1
        atomic_write_json(folder.fence, {"attempt": number, "pid": os.getpid(), "host": socket.gethostname(),
                                         "job_id": job_id, "claimed_at": time.time()})
    return AttemptFence(folder.path, number)


_HELD: dict[Path, AttemptFence] = {}  # run folder -> the fence this process's attempt claimed


@contextlib.contextmanager
def hold(fence: AttemptFence) -> Iterator[AttemptFence]:
    """Make `fence` the one `check` enforces for its run folder in this process."""
    key = Path(fence.run_dir).resolve()
    _HELD[key] = fence
    try:
        yield fence
    finally:
        if _HELD.get(key) is fence:
            del _HELD[key]


def check(run_dir: Path) -> None:
    """Before a write into `run_dir`: StaleAttempt if this process's attempt is no longer the newest."""
    if not _HELD:
        return
    fence = _HELD.get(Path(run_dir).resolve())
    if fence is not None:
        fence.check()
