"""`python -m cancelctl.jobs.stall_close RUN_DIR`: the MLflow end of a run the stall watchdog failed (its
retries used up): the stalls counted in tags, the latest stacks attached, the run closed FAILED.

The watchdog runs it in a process of its own, before it kills the job: the watchdog imports nothing but
the standard library, the frozen training process cannot close its own run, and on SLURM the job's end
would take this process with it. `tag_stalls` is also what each new attempt does for the stalls before it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def tag_stalls(logger: Any, run_dir: Path) -> None:
    """Earlier attempts the stall watchdog ended: counted on the MLflow run, the latest one's stacks kept."""
    from cancelctl.jobs.outcome import stalls
    from cancelctl.jobs.watchdog import stall_sentence
    from cancelctl.tracking.tags import stall_tags

    ended = stalls(run_dir)
    if ended:
        logger.set_tags(stall_tags(ended, stall_sentence))
        logger.log_artifact(run_dir / ended[-1]["stacks"])


def close_stalled(run_dir: Path) -> None:
    from cancelctl.tracking import RunLogger
    from cancelctl.tracking.runfiles import run_store_uri
    from cancelctl.fileio import read_json
    from cancelctl.workdir import RunFolder

    record = read_json(RunFolder(run_dir).run_json)
    if not record:
        return  # no run record to close (the next `status` or `sync` says why)
    logger = RunLogger(run_dir, run_store_uri(record, run_dir), record.get("mlflow_run_id"))
    tag_stalls(logger, run_dir)
    logger.close("FAILED")


if __name__ == "__main__":
    close_stalled(Path(sys.argv[1]))
