"""Waiting on a condition in the SLURM tests (a plain module shared by them: tests/ has no packages)."""

from __future__ import annotations

import time


def wait_until(condition, timeout_s: float, what: str, poll_s: float = 0.5):
    """condition()'s first truthy value, polled every poll_s; fails naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        time.sleep(poll_s)
    return value
