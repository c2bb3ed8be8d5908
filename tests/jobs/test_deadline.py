"""Leaving an allocation at a step boundary when its time left no longer holds the measured step and
checkpoint (`cancelctl.jobs.deadline`), as on USR2 (`preemption`). Clocks are stated, never waited on."""

from __future__ import annotations

import signal

import pytest

from cancelctl.jobs import preemption
from cancelctl.jobs.deadline import EXIT_S, AllocationDeadline, Timing, allocation_end, parse_time_left
from cancelctl.jobs.time_limit import LEAD_MARGIN


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("text, seconds", [("45", 45), ("0:45", 45), ("1:05", 65), ("2:03:04", 7384),
                                           ("1-02:03:04", 93784), ("UNLIMITED", None), ("NOT_SET", None), ("", None)])
def test_squeue_time_left_in_seconds(text, seconds):
    assert parse_time_left(text) == seconds


def test_the_end_is_slurms_own_where_it_sets_it_and_none_outside_a_job():
    assert allocation_end({"SLURM_JOB_ID": "7", "SLURM_JOB_END_TIME": "1800000000"}) == 1_800_000_000
    assert allocation_end({}) is None


def test_nothing_measured_never_leaves_early_then_the_measured_step_and_checkpoint_decide(tmp_path):
    clock = Clock(1000.0)
    deadline = AllocationDeadline(tmp_path, end=1030.0, clock=clock)
    assert deadline.needed_s() is None and not deadline.must_leave()  # the estimated lead covers it
    deadline.step_took(2.0)
    assert not deadline.must_leave()  # a step, but no checkpoint measured yet
    deadline.checkpoint_took(0.5)
    needed = LEAD_MARGIN * 2.5 + EXIT_S
    assert deadline.needed_s() == pytest.approx(needed)
    clock.now = 1030.0 - needed - 0.1
    assert not deadline.must_leave()
    clock.now = 1030.0 - needed + 0.1
    assert deadline.must_leave()


def test_the_longest_recent_step_counts_and_a_requeued_attempt_starts_knowing_it(tmp_path):
    deadline = AllocationDeadline(tmp_path, end=0.0)
    for seconds in (1.0, 4.0, 2.0):
        deadline.step_took(seconds)
    deadline.checkpoint_took(3.0)  # written with the checkpoint
    again = Timing.read(tmp_path)
    assert (again.step_s, again.checkpoint_s) == (4.0, 3.0)
    for _ in range(30):  # a slow step long ago stops counting
        deadline.step_took(1.0)
    deadline.checkpoint_took(3.0)
    assert Timing.read(tmp_path).step_s == 1.0


@pytest.fixture
def usr2_handler():
    """A Python handler on USR2, as submitit's job runtime installs it (its checkpoint_and_try_requeue)."""
    calls: list[int] = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    yield calls
    signal.signal(signal.SIGUSR2, previous)


def test_too_little_time_left_checkpoints_and_hands_over_to_the_usr2_handler_at_the_boundary(tmp_path, usr2_handler):
    clock = Clock(0.0)
    deadline = AllocationDeadline(tmp_path, end=60.0, timing=Timing(checkpoints=[0.5]), clock=clock)
    saved: list[float] = []
    with preemption.deferred_signals(deadline=deadline):
        preemption.at_step_boundary(lambda: saved.append(clock.now), step_s=2.0)  # 60 s left: go on
        assert saved == [] and usr2_handler == []
        clock.now = 50.0  # 10 s left < 1.5 x 2.5 + 10
        preemption.at_step_boundary(lambda: saved.append(clock.now), step_s=2.0)
        assert saved == [50.0] and usr2_handler == [signal.SIGUSR2]  # saved first, then the requeue
        preemption.at_step_boundary(lambda: saved.append(-1.0))  # a poll without a step (verl): no measure, no act
        assert saved == [50.0]


def test_without_submitits_usr2_handler_the_deadline_does_nothing(tmp_path):
    previous = signal.signal(signal.SIGUSR2, signal.SIG_DFL)  # an in-process (debug) run
    try:
        deadline = AllocationDeadline(tmp_path, end=0.0, timing=Timing([5.0], [5.0]), clock=Clock(100.0))
        with preemption.deferred_signals(deadline=deadline):
            preemption.at_step_boundary(lambda: pytest.fail("saved"), step_s=5.0)
    finally:
        signal.signal(signal.SIGUSR2, previous)
