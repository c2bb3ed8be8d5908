"""One view of SLURM per sweep, shared by every verb and watcher of the work dir.

SLURM's controller is shared by everyone on the cluster: a `watch` in one terminal, a `status` every
10 s in another and a colleague's `list` should cost it one `sacct` and one `squeue` between them, not
one each. The answer lives in the sweep's `slurm_states.json` (`LastKnownStates`) with the time it was
asked; an asker reuses an answer — or a failed query — younger than its `Freshness.max_age_s`, and
only one process asks at a time (a lock beside the file): the others wait for its answer, at most one
query time-out, then show the last known states. A watcher never waits: it draws what is known and
asks in the background, at most every `max_age_s`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

from cancelctl.executors import slurm_states
from cancelctl.executors.base import Freshness
from cancelctl.executors.slurm_states import LastKnownStates, TaskStates
from cancelctl.fileio import file_lock_if_free

LAST_KNOWN_STATES = "slurm_states.json"  # in the sweep's folder: what SLURM last said of its tasks
VIEW_LOCK = "slurm_states.lock"  # held by the one process asking SLURM for the sweep right now


_asking: dict[Path, threading.Thread] = {}  # a watcher's background query per sweep, one at a time


def shared_task_states(sweep_dir: Path, sizes: dict[str, int], names: Sequence[str], freshness: Freshness) -> TaskStates:
    """The tasks of these arrays (array id -> task count) as the sweep's shared view has them, asked
    of SLURM (one sacct and one squeue, at once) when the view is older than `freshness` allows."""
    memory = LastKnownStates(sweep_dir / LAST_KNOWN_STATES)
    ids = sorted(sizes)
    cached, asked_at = memory.cached(ids)
    if asked_at is not None and time.time() - asked_at < freshness.max_age_s:
        return cached
    if not freshness.wait:
        _ask_in_background(sweep_dir, sizes, names)
        return cached
    # an answer another asker got while this one waited for the lock serves if fresh enough for it
    answer = _ask(sweep_dir, sizes, names, wait_s=slurm_states.QUERY_TIMEOUT_S,
                  fresher_than=time.time() - freshness.max_age_s)
    if answer is not None:
        return answer
    cached, _ = memory.cached(ids)  # another process has been asking for a whole query time-out
    cached.unanswered.update(ids)
    cached.unasked.clear()
    cached.failures["sacct/squeue"] = (f"another cancelctl process has been asking SLURM for this sweep for over "
                                       f"{slurm_states.QUERY_TIMEOUT_S:.0f} s without an answer")
    return cached


def _ask(sweep_dir: Path, sizes: dict[str, int], names: Sequence[str], *, wait_s: float,
         fresher_than: float) -> TaskStates | None:
    """Ask SLURM under the view's lock (None when another asker held it past `wait_s`); an answer
    another asker got while this one waited, asked after `fresher_than`, is used as it is."""
    memory = LastKnownStates(sweep_dir / LAST_KNOWN_STATES)
    ids = sorted(sizes)
    with file_lock_if_free(sweep_dir / VIEW_LOCK, wait_s, what="SLURM view") as held:
        if not held:
            return None
        cached, asked_at = memory.cached(ids)
        if asked_at is not None and asked_at >= fresher_than:
            return cached
        asked = time.time()
        return memory.merge(slurm_states.task_states(ids, sizes, names), asked_at=asked)


def _ask_in_background(sweep_dir: Path, sizes: dict[str, int], names: Sequence[str]) -> None:
    running = _asking.get(sweep_dir)
    if running is not None and running.is_alive():
        return
    thread = threading.Thread(target=_ask, args=(sweep_dir, dict(sizes), list(names)),
                              kwargs={"wait_s": 0.0, "fresher_than": time.time()}, daemon=True,
                              name=f"slurm-view-{sweep_dir.name}")
    _asking[sweep_dir] = thread
    thread.start()


__all__ = ["LAST_KNOWN_STATES", "shared_task_states"]
