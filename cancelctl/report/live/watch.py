"""`cancelctl watch`: a live terminal view of a sweep, read from what its runs write to their folders.

Per run: state, step / total, the latest reward, ρ std (mismatch), entropy, a sparkline of the
reward, time per step and ETA; the sweep's totals (states, generated tokens) and its alerts. `watch`
polls its caller's states until every run has ended; `WatchProgress` is the same view pushed by a
launcher that drives the runs itself. What the view knows is `state`, how it shows it `render`.
Ctrl-C leaves the runs as they are.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.live import Live
from rich.text import Text

from cancelctl.report.live.render import event_lines, plain_summary, render, totals_line
from cancelctl.report.live.state import IDLE_EXIT_S, RunStatus, StatesFn, SweepView, Watcher


@dataclass
class WatchResult:
    view: SweepView
    interrupted: bool  # Ctrl-C: the runs were left as they are


def watch(
    states: StatesFn,
    *,
    title: str = "sweep",
    console: Console | None = None,
    refresh_s: float = 3.0,
    sleep: Callable[[float], None] = time.sleep,
    max_refreshes: int | None = None,
) -> WatchResult:
    """Show the sweep until every run has ended (completed, failed, cancelled, stopped), or no run
    has been queued, pending or running for IDLE_EXIT_S (nothing is launching the rest), or Ctrl-C."""
    console = console or Console()
    watcher = Watcher(states)
    view = watcher.poll()
    interrupted = False
    try:
        if console.is_terminal:
            with Live(render(view, title, console.size.height, console.size.width), console=console, auto_refresh=False) as live:
                view = _loop(watcher, view, refresh_s, sleep, max_refreshes,
                             lambda v: live.update(render(v, title, console.size.height, console.size.width), refresh=True))  # fmt: skip
        else:
            if view.active:
                console.print(totals_line(view, title), markup=False, highlight=False, soft_wrap=True)
            previous = {run.run_id: run.state for run in view.runs}
            said = [view.unreachable]

            def show(v: SweepView) -> None:
                lines = event_lines(previous, v)
                if v.unreachable != said[0]:  # an outage said once when it starts, and when it ends
                    lines.append(v.unreachable or "SLURM answers again")
                    said[0] = v.unreachable
                for line in lines:
                    console.print(line, markup=False, highlight=False, soft_wrap=True)
                previous.update({run.run_id: run.state for run in v.runs})

            view = _loop(watcher, view, refresh_s, sleep, max_refreshes, show)
    except KeyboardInterrupt:
        interrupted = True
    if not console.is_terminal:
        for line in plain_summary(view, title):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    else:
        console.print(totals_line(view, title) + (" (stopped watching; the runs go on)" if interrupted else ""))
    return WatchResult(view, interrupted)


def _loop(watcher: Watcher, view: SweepView, refresh_s: float, sleep, max_refreshes: int | None, show) -> SweepView:
    """Refresh until every run has ended, or none is active and none started for IDLE_EXIT_S."""
    refreshes, idle = 1, 0
    patience = math.ceil(IDLE_EXIT_S / refresh_s) if refresh_s > 0 else 1
    while not view.ended and idle < patience and (max_refreshes is None or refreshes < max_refreshes):
        sleep(refresh_s)
        view = watcher.poll()
        refreshes += 1
        idle = 0 if view.active else idle + 1
        show(view)
    return view


class WatchProgress:
    """The same view, pushed instead of polled: for a launcher that drives the runs itself (the local
    and debug drivers call it with the sweep's states at every tick, `sweep --wait`). A context
    manager: a rich `Live` in a terminal, event lines elsewhere; on exit the totals (terminal) or the
    plain summary. Refreshes at most every `refresh_s` (the last states are always shown on exit)."""

    def __init__(self, title: str, console: Console | None = None, refresh_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.title, self.console, self.refresh_s, self.clock = title, console or Console(), refresh_s, clock
        self.latest: Sequence[RunStatus] = []
        self.watcher = Watcher(lambda: self.latest)
        self.view: SweepView | None = None
        self.previous: dict[str, str] = {}
        self.shown_at: float | None = None
        self.live: Live | None = None

    def __call__(self, states: Sequence[RunStatus]) -> None:
        self.latest = list(states)
        now = self.clock()
        if self.shown_at is not None and now - self.shown_at < self.refresh_s:
            return
        self.shown_at = now
        self._show()

    def _show(self) -> None:
        view = self.view = self.watcher.poll()
        if self.live is not None:
            self.live.update(render(view, self.title, self.console.size.height, self.console.size.width), refresh=True)
            return
        lines = event_lines(self.previous, view) if self.previous else ([totals_line(view, self.title)] if view.runs else [])
        for line in lines:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
        self.previous = {run.run_id: run.state for run in view.runs}

    def __enter__(self) -> WatchProgress:
        if self.console.is_terminal:
            self.live = Live(Text(f"{self.title}: starting"), console=self.console, auto_refresh=False)
            self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.latest:
            self._show()  # the final states, whatever the throttle says
        if self.live is not None:
            self.live.stop()
        if self.view is None:
            return
        if self.live is not None:
            self.console.print(totals_line(self.view, self.title), markup=False, highlight=False)
        else:
            for line in plain_summary(self.view, self.title):
                self.console.print(line, markup=False, highlight=False, soft_wrap=True)
