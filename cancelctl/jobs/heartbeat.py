"""A run's progress beyond its logged steps, for the stall watchdog (`cancelctl.jobs.watchdog`): the
run folder's `heartbeat` file, rewritten by the backend whenever it moves on.

    {"step": 7}        a step finished, logged or not (a requeued attempt replays the steps after its
                       last checkpoint without logging them again); {"step": null}: its number unknown
    {"phase": "..."}   a part of a step finished (verl: a rollout, an update, a validation, a save)

The watchdog reads only that the file changed (its size or modification time) and which of the two it
says: a step lets the step-time limit apply, a phase only resets the clock. Stdlib only: the watchdog
imports it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

HEARTBEAT = "heartbeat"
# the run folder, for processes of a job that do not know it (verl's trainer in its Ray actor)
HEARTBEAT_DIR_ENV = "CANCELCTL_HEARTBEAT_DIR"


def beat(run_dir: Path, *, step: int | None = None, phase: str | None = None) -> None:
    """Say the run moved on. Never raises: a beat lost to a full disk costs at most a false stall,
    which the requeue survives; a beat that failed the run would cost the run."""
    record = {"phase": str(phase)} if phase is not None else {"step": None if step is None else int(step)}
    try:
        with open(Path(run_dir) / HEARTBEAT, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(record))
    except OSError:
        pass


def beat_phase(phase: str) -> None:
    """A part of a step finished, said from a process that finds its run folder in the environment
    (HEARTBEAT_DIR_ENV); nothing where it is not set (verl run by hand)."""
    run_dir = os.environ.get(HEARTBEAT_DIR_ENV)
    if run_dir:
        beat(Path(run_dir), phase=phase)


def read_beat(run_dir: Path) -> tuple[tuple[int, int] | None, dict]:
    """(size and mtime in ns, or None when there is no heartbeat yet; what it says)."""
    path = Path(run_dir) / HEARTBEAT
    try:
        stat = os.stat(path)
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None, {}
    try:
        record = json.loads(text)
    except ValueError:  # read while being rewritten: it changed, what it says is unknown
        record = {}
    return (stat.st_size, stat.st_mtime_ns), record if isinstance(record, dict) else {}
