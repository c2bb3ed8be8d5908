"""The debug executor: the driver (the launcher itself, when it waits) calls the runs in its own
process, one after another, so breakpoints and pdb work."""

from __future__ import annotations

import logging
import sys
import time

from cancelctl.executors.base import Tick
from cancelctl.executors.driver import DrivenExecutor, main, me, queued_runs
from cancelctl.jobs.outcome import archive_error
from cancelctl.jobs.runjob import RunJob
from cancelctl.manifest import SUBMITTED
from cancelctl.workdir import RunFolder, SweepPaths

log = logging.getLogger("cancelctl.launch")


class DebugExecutor(DrivenExecutor):
    name = "debug"

    def drive_queue(self, paths: SweepPaths, tick: Tick | None, job_ids: list[str]) -> None:
        store = paths.store
        while True:
            with store.update() as manifest:
                queued = queued_runs(manifest)
                if not queued:
                    manifest.driver = None
                    return
                run_id, who = queued[0], me()
                name = manifest.runs[run_id].name
                sub = manifest.add_submission(
                    self.name, [run_id], state=SUBMITTED, job_id=str(who.pid), pid_start=who.start, submitted_at=time.time()
                )
            run_dir = paths.run_dir(run_id, name)
            archive_error(run_dir)
            try:
                RunJob(run_dir, sub.token)()
            except Exception as exc:  # noqa: BLE001 - recorded in error.txt and reported as failed
                log.error("run %s failed: %s: %s (see %s)", run_id, type(exc).__name__, exc, RunFolder(run_dir).error)
            if tick is not None:
                tick(True)


if __name__ == "__main__":
    sys.exit(main(DebugExecutor(), sys.argv[1:]))
