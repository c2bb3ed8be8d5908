"""Preemption, requeue and timeout signals, deferred to the training loop's next step boundary.

A SLURM job learns it is about to lose its allocation from a signal:
- USR2, `signal_delay_s` before its time limit (submitit's `--signal=USR2@90`); submitit's handler
  calls `RunJob.checkpoint`, requeues the job and exits;
- SIGTERM, from `scontrol requeue`, preemption, scancel or the time limit itself; SIGKILL follows
  after KillWait. Submitit's handler only logs it, so training used to go on until the SIGKILL and
  everything since the last periodic checkpoint was lost.

Acting inside a handler would save a half-updated step. So while a job runs these signals are only
recorded, and the backend calls `at_step_boundary(save)` after each step: when a signal is pending
it saves a checkpoint, then USR2 goes on to submitit's handler (its requeue logic unchanged) and
SIGTERM ends the job with `Terminated` — the requeued job resumes from that step, losing at most
the step that was in flight.

Only signals that already have a Python handler are deferred, i.e. inside submitit's job runtime;
an in-process (debug) run keeps the CLI's default handlers.

The USR2 lead is an estimate fixed at submission; a job given its allocation's deadline
(`jobs.deadline`) also leaves as on USR2 at the first step boundary where the time left no longer
holds the step and checkpoint it measured (`at_step_boundary(save, step_s=...)`, `checkpoint_took`).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# submitit's preemption signal (`SUBMITIT_PREEMPT_SIGNAL`, USR2 by default) and SIGTERM
DEFERRED_SIGNALS = (getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), signal.SIGUSR2), signal.SIGTERM)

_pending: list[int] = []
_failure: list[BaseException] = []
_replaced: dict[int, Any] = {}
_deadline: list[Any] = []  # this allocation's `deadline.AllocationDeadline`, while `deferred_signals` holds one
USR2 = DEFERRED_SIGNALS[0]


class Terminated(SystemExit):
    """SIGTERM arrived and the run checkpointed at a step boundary; the job ends here (exit 143)."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)

    def __str__(self) -> str:
        return "SIGTERM (requeue, preemption, time limit or kill): checkpointed at a step boundary; resumes from there"


def _record(signum: int, frame: Any) -> None:
    if signum not in _pending:
        _pending.append(signum)


@contextmanager
def deferred_signals(signums: tuple[int, ...] = DEFERRED_SIGNALS, deadline: Any = None) -> Iterator[None]:
    """Record `signums` instead of handling them, until `at_step_boundary`; restore on exit. `deadline`
    (`jobs.deadline.AllocationDeadline`): also leave as on USR2 when the next step would not fit."""
    installed: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in signums:
            current = signal.getsignal(signum)
            if callable(current) and current is not _record:
                installed[signum] = current
                signal.signal(signum, _record)
    _replaced.update(installed)
    _deadline[:] = [deadline] if deadline is not None and USR2 in installed else []  # only where USR2 requeues
    try:
        yield
    finally:
        for signum, handler in installed.items():
            signal.signal(signum, handler)
            _replaced.pop(signum, None)
        _pending.clear()
        _failure.clear()
        _deadline.clear()


def checkpoint_took(seconds: float) -> None:
    """A backend wrote a checkpoint in `seconds` (kept as the deadline's measure)."""
    if _deadline:
        _deadline[0].checkpoint_took(seconds)


def fail_at_step_boundary(exc: BaseException) -> None:
    """From another thread: end the run with `exc` at the next step boundary. (Raised at an arbitrary
    point of the main thread it could land inside a tracking-store call and pass for a store error.)"""
    _failure[:] = [exc]


def pending() -> list[int]:
    """The deferred signals received since the last step boundary."""
    return list(_pending)


def at_step_boundary(save: Callable[[], None], step_s: float | None = None) -> None:
    """Call after a step is complete (`step_s`: how long it took, where the caller knows its steps). If a
    deferred signal arrived, or the allocation's time left no longer holds another step: `save()` a
    checkpoint, then hand USR2 to the handler it was deferred from (submitit's: requeue and SystemExit)
    and end the job on SIGTERM (`Terminated`)."""
    if _failure:  # another thread found the run cannot go on (a node of its Ray cluster left)
        raise _failure.pop()
    if _deadline and step_s is not None:
        _deadline[0].step_took(step_s)
        if USR2 not in _pending and _deadline[0].must_leave():
            _pending.append(USR2)  # as if the time-limit signal had come: the same checkpoint and requeue
    if not _pending:
        return
    received = sorted(_pending, key=lambda signum: signum == signal.SIGTERM)  # a requeue request first
    _pending.clear()
    save()
    for signum in received:
        if signum == signal.SIGTERM:
            raise Terminated()
        handler = _replaced.get(signum)
        if callable(handler):
            handler(signum, None)
