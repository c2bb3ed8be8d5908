"""A launcher interrupted by a signal: Ctrl-C (SIGINT), SIGTERM and a closed terminal (SIGHUP) all end
`cancelctl sweep` the same way, as a KeyboardInterrupt, so the driver lets go of the sweep and the
user learns how to resume. Runs interrupted with it end `cancelled` (resumable), never `failed`.
SIGKILL cannot be caught: its runs are classified as interrupted by their job handle (`DrivenJob.classify`).

A signal is also recorded (`raise_if_interrupted`): an exception raised by a handler can be lost —
Python prints and drops one raised while a finalizer (`__del__`) runs — so the launcher's loops ask
again at each tick, and a signal is never lost. While the launch stops its runs
(`signals_recorded`), further signals are only recorded: a second SIGTERM must not cut that short."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from cancelctl.runstate import state_counts

CAUGHT = (signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []  # signals caught since the block began, first first


class Interrupted(KeyboardInterrupt):
    """A signal ended the launcher; `signum` says which."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def signals_interrupt(signums: tuple[int, ...] = CAUGHT) -> Iterator[None]:
    """Raise `Interrupted` on `signums` (as SIGINT raises KeyboardInterrupt) inside the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupted(signum: int, frame) -> None:
        _received.append(signum)
        raise Interrupted(signum)

    _received.clear()
    previous = {signum: signal.signal(signum, raise_interrupted) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _received.clear()


def raise_if_interrupted() -> None:
    """Interrupted when a caught signal came since `signals_interrupt` began (its exception may have
    been dropped by a finalizer that was running when it landed)."""
    if _received:
        raise Interrupted(_received[0])


@contextlib.contextmanager
def signals_recorded(signums: tuple[int, ...] = (signal.SIGINT, *CAUGHT)) -> Iterator[None]:
    """Inside the block a signal is only recorded: a launch stopping its runs finishes doing so."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, lambda signum, frame: _received.append(signum)) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def interrupted_message(exc: KeyboardInterrupt, sweep: str, resume: str, states: list | None = None) -> str:
    """One line: what the interrupt left of the sweep — the states of its runs (`states`: [] when the
    launch recorded none; None when unknown) — and the command that resumes it."""
    name = exc.args[0] if isinstance(exc, Interrupted) else "SIGINT"
    if states is not None and not states:
        return f"sweep {sweep} interrupted ({name}) before it recorded any run: nothing was submitted; resume with: {resume}"
    if states and not any(s.executor for s in states):  # no run of it ever reached an executor
        return (f"sweep {sweep} interrupted ({name}) before it submitted any run: {state_counts(states)}; "
                f"resume with: {resume}")
    counts = f": {state_counts(states)}" if states else ""
    return (f"sweep {sweep} interrupted ({name}){counts}; finished runs are kept, interrupted runs end 'cancelled' "
            f"at a step boundary and resume from their checkpoint; resume with: {resume}")
