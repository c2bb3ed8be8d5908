"""How `cancelctl watch` shows a sweep: in a terminal a rich table of runs (active first, cut to the
screen; one line per run on a terminal narrower than the table), the totals and the latest
alerts; elsewhere (CI logs, a pipe) one line per state change and alert, and a fixed-width summary
when every run has ended."""

from __future__ import annotations

import io
import math
from collections.abc import Iterable

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from cancelctl.jobs.monitor import Alert
from cancelctl.report.live.state import ACTIVE, SPARK_POINTS, STOPPED, RunView, SweepView

STATE_ORDER = ("running", "pending", "queued", STOPPED, "failed", "cancelled", "unsubmitted", "completed")
STATE_STYLE = {"running": "cyan", "pending": "yellow", "queued": "yellow", STOPPED: "magenta", "failed": "red",
               "cancelled": "dim", "completed": "green"}  # fmt: skip
SPARK_BARS = "▁▂▃▄▅▆▇█"


def render(view: SweepView, title: str, height: int = 50, width: int | None = None) -> Group:
    """The terminal frame: a table of runs (active first, cut to the screen), totals, latest alerts;
    on a terminal narrower than the table (`width`), one line per run instead."""
    table = Table(title=title, title_justify="left", expand=False, pad_edge=False, show_edge=False)
    for name, justify in (("run", "left"), ("state", "left"), ("step", "right"), ("reward", "right"),
                          ("ρ std", "right"), ("entropy", "right"), ("reward trend", "left"),
                          ("s/step", "right"), ("ETA", "right"), ("alerts", "left")):  # fmt: skip
        table.add_column(name, justify=justify, no_wrap=True)
    alerts = view.alerts
    shown_alerts = alerts[-5:]
    room = max(3, height - 8 - len(shown_alerts))
    runs = sorted(view.runs, key=lambda r: _state_rank(r.state))
    for run in runs[:room]:
        table.add_row(
            run.name,
            Text(run.state, style=STATE_STYLE.get(run.state, "")),
            _step(run),
            _fmt(run.reward, ".3f"),
            _fmt(run.mismatch, ".3g"),
            _fmt(run.entropy, ".3f"),
            sparkline(run.rewards),
            _fmt(run.seconds_per_step, ".2f"),
            _duration(run.eta_s),
            Text(_alert_cell(run), style="magenta" if run.stop else ("yellow" if run.alerts else "")),
        )
    parts: list = [table]
    if width is not None and _table_width(table) > width:  # rich would squeeze every cell to nothing
        parts = [Text(title, style="bold", no_wrap=True, overflow="ellipsis")]
        parts += [_run_line(run) for run in runs[:room]]
    if len(runs) > room:
        parts.append(Text(f"… {len(runs) - room} more runs", style="dim"))
    parts.append(Text(totals_line(view, title)))
    for name, alert in shown_alerts:
        parts.append(Text(_alert_line(name, alert), style="magenta" if alert.action == "stop" else "yellow"))
    return Group(*parts)


def _table_width(table: Table) -> int:
    return Console(file=io.StringIO(), width=10_000).measure(table).maximum


def _run_line(run: RunView) -> Text:
    """One run on one line for a narrow terminal: name, state, step, reward, alerts (cut with …)."""
    line = Text(run.name + " ")
    line.append(run.state, style=STATE_STYLE.get(run.state, ""))
    rest = [_step(run), f"r={_fmt(run.reward, '.3f')}" if run.reward is not None else "", _alert_cell(run)]
    line.append("".join(f" {part}" for part in rest if part))
    line.no_wrap, line.overflow = True, "ellipsis"
    return line


PLAIN_COLUMNS = (("run", 28, "<"), ("state", 11, "<"), ("step", 9, ">"), ("reward", 7, ">"), ("rho_std", 9, ">"),
                 ("entropy", 8, ">"), ("reward trend", SPARK_POINTS + 2, "<"), ("s/step", 7, ">"),
                 ("alerts", 0, "<"))  # fmt: skip


def plain_summary(view: SweepView, title: str) -> list[str]:
    """Fixed-width lines: one per run (in the sweep's order), the totals, then every alert."""
    lines = [_columns([c[0] for c in PLAIN_COLUMNS])]
    for run in view.runs:
        lines.append(_columns([
            run.name, run.state, _step(run), _fmt(run.reward, ".3f"), _fmt(run.mismatch, ".3g"),
            _fmt(run.entropy, ".3f"), sparkline(run.rewards), _fmt(run.seconds_per_step, ".2f"), _alert_cell(run),
        ]))  # fmt: skip
    lines.append(totals_line(view, title))
    lines.extend(_alert_line(name, alert) for name, alert in view.alerts)
    return lines


def event_lines(previous: dict[str, str], view: SweepView) -> list[str]:
    """What changed since the last refresh, one line each: state changes, then new alerts."""
    lines = []
    for run in view.runs:
        before = previous.get(run.run_id)
        if before is not None and before != run.state:
            why = f" ({run.reason})" if run.reason and run.state not in ACTIVE else ""
            at = f" at {_step(run)}" if run.step is not None else ""
            lines.append(f"{run.name}: {before} -> {run.state}{at}{why}")
    lines.extend(_alert_line(name, alert) for name, alert in view.new_alerts)
    if lines:
        lines.append(totals_line(view, ""))
    return lines


def totals_line(view: SweepView, title: str) -> str:
    counts = view.counts
    done = counts["completed"]
    ended_badly = {s: counts[s] for s in (STOPPED, "failed", "cancelled") if counts[s]}
    waiting = sum(counts[s] for s in ("pending", "queued", "unsubmitted"))
    parts = [f"{done}/{len(view.runs)} done", f"{counts['running']} running", f"{waiting} waiting"]
    parts += [f"{n} {state}" for state, n in ended_badly.items()]
    alerts = view.alerts
    stops = sum(a.action == "stop" for _, a in alerts)
    parts += [f"{_tokens(view.gen_tokens)} generated tokens", f"{len(alerts)} alerts ({stops} stop)"]
    done_steps, total_steps = view.steps_progress
    if total_steps:  # progress inside the runs, not only whole runs
        parts.append(f"steps {done_steps}/{total_steps} ({100 * done_steps // total_steps}%)")
    note = f" — {view.unreachable}" if view.unreachable else ""
    return (f"{title}: " if title else "") + ", ".join(parts) + note


def sparkline(values: Iterable[float]) -> str:
    """Bars on [0, 1] (a reward's range), widened to the data when it leaves that range."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return ""
    low, high = min(0.0, *values), max(1.0, *values)
    top = len(SPARK_BARS) - 1
    return "".join(SPARK_BARS[round((v - low) / (high - low) * top)] for v in values)


def _columns(cells: list[str]) -> str:
    out = []
    for cell, (_, width, align) in zip(cells, PLAIN_COLUMNS):
        out.append(f"{cell:{align}{width}}" if width else cell)
    return " ".join(out).rstrip()


def _alert_cell(run: RunView) -> str:
    if run.stop is not None:
        return f"STOP {run.stop.rule}@{run.stop.step}"
    if run.alerts:
        last = run.alerts[-1]
        return f"{len(run.alerts)}: {last.rule}@{last.step}"
    return "-" if not run.reason or run.state in ("completed", "running") else run.reason[:60]


def _alert_line(name: str, alert: Alert) -> str:
    return f"{alert.action.upper():4} {name} step {alert.step} {alert.rule}: {alert.message}"


def _step(run: RunView) -> str:
    if run.step is None:  # no step logged yet: starting (imports, warm start) or not started
        return "starting" if run.state == "running" else ""
    return f"{run.step}/{run.steps}" if run.steps is not None else str(run.step)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def _tokens(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def _state_rank(state: str) -> int:
    return STATE_ORDER.index(state) if state in STATE_ORDER else len(STATE_ORDER)
