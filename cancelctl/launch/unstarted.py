"""What a launch that fails leaves behind: the runs it queued and never started end unsubmitted with
the reason ("submission failed: not started: the launcher stopped on No space left on device: …"),
not "queued, but no launcher is running"; the next `cancelctl sweep FILE` starts them.

The usual failure is a full disk under the work dir, and then the manifest write that records the
reason needs space too: each launch sets some aside when it starts (`reserve`) and frees it just
before that write, as each run attempt does for its error.txt (`cancelctl.jobs.outcome`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from cancelctl.fileio import LockBusy
from cancelctl.jobs.outcome import describe_exception
from cancelctl.executors import get_executor
from cancelctl.executors.driver import is_driver, me
from cancelctl.manifest import ABANDONED, SUBMIT_FAILED
from cancelctl.workdir import SweepPaths

log = logging.getLogger("cancelctl.launch")

RESERVE_MIN_BYTES = 64 * 1024


def _reserve_path(paths: SweepPaths) -> Path:
    return paths.sweep_dir / f".launch-{os.getpid()}.reserve"  # one per launcher: two may drive one sweep


@contextlib.contextmanager
def reserve(paths: SweepPaths) -> Iterator[None]:
    """Blocks set aside for the launch's lifetime, enough for two copies of the manifest (its
    atomic rewrite writes a whole new one); none when the disk is already full (nothing to lose)."""
    path = _reserve_path(paths)
    with contextlib.suppress(OSError):
        paths.sweep_dir.mkdir(parents=True, exist_ok=True)  # a first launch makes it next anyway
    try:
        size = paths.manifest.stat().st_size
    except OSError:
        size = 0
    try:
        with open(path, "wb") as handle:
            handle.write(b" " * max(RESERVE_MIN_BYTES, 2 * size + 16 * 1024))
            handle.flush()
            os.fsync(handle.fileno())
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink()
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def record_unstarted(paths: SweepPaths, executor: str, run_ids: list[str], exc: BaseException) -> list[str]:
    """The runs of `run_ids` the launch never started (it failed with `exc` while they were queued, or
    while starting one) get a failed submission saying why; returns them. Best effort: when even that
    cannot be written, the launch's own error screen is what the user gets."""
    if isinstance(exc, LockBusy):  # another process holds the manifest: waiting again would only repeat it
        return []
    why = f"not started: the launcher stopped on {describe_exception(exc)}; `cancelctl sweep FILE` starts it"
    reserve = _reserve_path(paths)
    unstarted: list[str] = []
    try:
        # half the reserve for the queued runs, at once: the runs failing beside it may fill what is freed
        with contextlib.suppress(OSError):
            os.truncate(reserve, reserve.stat().st_size // 2)
        with paths.store.update() as manifest:
            if is_driver(manifest, me()):  # this process drove the queue; the full disk kept it from saying so
                manifest.driver = None
            for run_id in run_ids:
                if run_id in manifest.runs and manifest.runs[run_id].queued_at:
                    manifest.add_submission(executor, [run_id], state=SUBMIT_FAILED, error=why)
                    unstarted.append(run_id)
        # a run it was starting: adopted if its process started (its job.json), else abandoned after the
        # executor's grace for a process still starting — a run that did start is never called unstarted
        starting = [sub for sub in paths.store.load().intents() if set(sub.run_ids) & set(run_ids)]
        if starting:
            get_executor(executor).reconcile(paths, starting, wait=True)
            with contextlib.suppress(OSError):
                reserve.unlink()  # the other half
            abandoned = {sub.token for sub in starting}
            with paths.store.update() as manifest:
                for run_id in run_ids:
                    latest = manifest.latest_submission(run_id)
                    if latest is not None and latest[0].token in abandoned and latest[0].state == ABANDONED:
                        latest[0].state, latest[0].error = SUBMIT_FAILED, why
                        unstarted.append(run_id)
    except (OSError, ValueError) as record_exc:
        log.warning("sweep %s: could not record why its queued runs did not start (%s)", paths.sweep,
                    describe_exception(record_exc))
    if unstarted:
        log.warning("sweep %s: %d queued run(s) not started: %s", paths.sweep, len(unstarted), why)
    return unstarted
