"""The local driver's wait between looks at the queue: it wakes when one of its runs ends."""

from __future__ import annotations

import time

from cancelctl.executors.local import _until_one_ends


class EndsAfter:
    """A stand-in for submitit's LocalJob: `done()` (Popen.poll there) is true from its n-th call on."""

    def __init__(self, calls: int):
        self.calls_left = calls

    def done(self) -> bool:
        self.calls_left -= 1
        return self.calls_left <= 0


def test_the_wait_ends_when_one_of_the_drivers_runs_ends_not_at_the_interval():
    running, ending = EndsAfter(10**9), EndsAfter(3)
    started = time.monotonic()
    _until_one_ends([running, ending], timeout_s=60.0)
    assert time.monotonic() - started < 30.0  # woke on the exit (3 checks), not after the minute
    assert ending.calls_left == 0


def test_with_no_run_ending_the_wait_is_the_whole_interval():
    started = time.monotonic()
    _until_one_ends([EndsAfter(10**9)], timeout_s=0.3)
    _until_one_ends([], timeout_s=0.3)  # runs another driver started: only the interval
    assert time.monotonic() - started >= 0.6
