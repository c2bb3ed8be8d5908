"""Stopping a job's child process and everything it started: one helper for the verl child
(cancelctl.backends.verl.supervisor) and a node's `ray start` (cancelctl.jobs.raycluster).

Both start their child with `start_new_session=True`, so the child leads a process group that holds
what it starts (verl's driver: the local Ray it starts; `ray start`: the node's Ray processes).
"""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen, grace_s: float, kill_wait_s: float) -> None:
    """SIGTERM `proc`'s process group and wait up to `grace_s` for `proc` to exit; then SIGKILL the
    group — what is left of it, `proc` gone or not — and wait up to `kill_wait_s`. A group that is
    gone already, or that this process may not signal, is left alone; a wait that runs out is not an
    error (the caller goes on with its teardown)."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
