"""What `cancelctl watch` knows of a sweep: the states its caller reports (`states()`, once per
refresh: one sacct per refresh on SLURM) and what each run folder has appended since the last look.

Cheap by construction: per run it remembers the byte offsets it has read of metrics.jsonl and
alerts.jsonl and reads only what was appended since (a first look at a long file starts at its
tail). It never writes to a run folder and never signals a job. `folder_states` reads states from
the run folders alone, for work dirs without a scheduler to ask.
"""

from __future__ import annotations

import json
import os
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cancelctl.jobs.monitor import ALERTS_JSONL, STOPPED_JSON, Alert, read_alerts_from, read_stop
from cancelctl.spec.monitor import EntropyCollapseRule, MismatchGrowthRule, RewardCollapseRule
from cancelctl.workdir import METRICS_JSONL

REWARD_KEYS = tuple(RewardCollapseRule().keys)
MISMATCH_KEYS = tuple(MismatchGrowthRule().keys)
ENTROPY_KEYS = tuple(EntropyCollapseRule().keys)
GEN_TOKENS_KEY = "compute/gen_tokens_cum"
WATCHED = (*REWARD_KEYS, *MISMATCH_KEYS, *ENTROPY_KEYS, GEN_TOKENS_KEY)

# The executor's states (cancelctl.launch.states), plus `stopped`: a run a monitor rule ended.
ACTIVE = ("queued", "pending", "running")
STOPPED = "stopped"
ENDED = ("completed", "failed", "cancelled", STOPPED)
# With runs neither active nor ended (unsubmitted: a launcher starting up, or none running), how
# long to wait for one to start before leaving.
IDLE_EXIT_S = 30.0

SPARK_POINTS = 16
TIMING_POINTS = 10  # steps over which the time per step is measured
PARSED_LINES = max(SPARK_POINTS, TIMING_POINTS + 1)  # of what was appended, only the last lines are parsed
FIRST_READ_BYTES = 64 * 1024  # a first look at a long metrics.jsonl: its tail (≥ 8 lines of 8 kB)


class RunStatus(Protocol):
    """What the view needs of a run's state (cancelctl.launch.states.RunState has it)."""

    run_id: str
    name: str
    state: str
    steps: int | None
    run_dir: Path | None
    reason: str


StatesFn = Callable[[], Sequence[RunStatus]]


class RunTail:
    """What the view keeps of one run folder, updated from the bytes appended since the last read."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.metrics_offset = 0
        self.alerts_offset = 0
        self.step: int | None = None
        self.latest: dict[str, float] = {}
        self.rewards: deque[float] = deque(maxlen=SPARK_POINTS)
        self.times: deque[tuple[int, int]] = deque(maxlen=TIMING_POINTS + 1)  # (step, ts ms)
        self.alerts: list[Alert] = []
        self.stop: Alert | None = None

    def _reset_metrics(self) -> None:
        self.metrics_offset, self.step, self.latest = 0, None, {}
        self.rewards.clear()
        self.times.clear()

    def refresh(self) -> list[Alert]:
        """Read what was appended; returns the alerts new since the last refresh."""
        self._read_metrics()
        new, self.alerts_offset = read_alerts_from(self.run_dir / ALERTS_JSONL, self.alerts_offset)
        self.alerts.extend(new)
        if self.stop is None and any(a.action == "stop" for a in self.alerts):
            self.stop = read_stop(self.run_dir)  # written just after the alert: until then, next refresh
        return new

    def _read_metrics(self) -> None:
        path = self.run_dir / METRICS_JSONL
        try:
            size = os.stat(path).st_size
        except OSError:
            return
        if size < self.metrics_offset:  # rewritten from scratch
            self._reset_metrics()
        if size == self.metrics_offset:
            return
        start = self.metrics_offset
        if start == 0 and size > FIRST_READ_BYTES:
            start = size - FIRST_READ_BYTES
        with open(path, "rb") as fh:
            fh.seek(start)
            chunk = fh.read(size - start)
        if start != self.metrics_offset:  # began mid-file: drop the partial first line
            cut = chunk.find(b"\n") + 1
            chunk, start = chunk[cut:], start + cut
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a torn last line waits for the next refresh
        self.metrics_offset = start + len(complete)
        for raw in complete.splitlines()[-PARSED_LINES:]:  # older lines would be overwritten at once
            try:
                line = json.loads(raw)
                self._add(int(line["step"]), int(line["ts"]), line["metrics"])
            except (ValueError, KeyError, TypeError):
                continue

    def _add(self, step: int, ts: int, metrics: dict) -> None:
        if self.times and step <= self.times[-1][0]:  # resumed from a checkpoint: steps replayed
            self.times.clear()
        self.times.append((step, ts))
        self.step = step
        for key in WATCHED:
            if key in metrics:
                self.latest[key] = _number(metrics[key])
        reward = _first(metrics, REWARD_KEYS)
        if reward is not None:
            self.rewards.append(reward)

    @property
    def seconds_per_step(self) -> float | None:
        if len(self.times) < 2 or self.times[-1][0] == self.times[0][0]:
            return None
        (s0, t0), (s1, t1) = self.times[0], self.times[-1]
        return (t1 - t0) / 1000 / (s1 - s0)


@dataclass
class RunView:
    run_id: str
    name: str
    state: str
    reason: str
    step: int | None
    steps: int | None
    reward: float | None
    mismatch: float | None
    entropy: float | None
    rewards: list[float]
    seconds_per_step: float | None
    gen_tokens: float | None
    alerts: list[Alert]
    stop: Alert | None

    @property
    def eta_s(self) -> float | None:
        if self.state != "running" or self.seconds_per_step is None or self.steps is None or self.step is None:
            return None
        return max(self.steps - self.step, 0) * self.seconds_per_step


@dataclass
class SweepView:
    runs: list[RunView]
    new_alerts: list[tuple[str, Alert]] = field(default_factory=list)
    unreachable: str | None = None  # the scheduler did not answer: the states are the last it gave

    @property
    def counts(self) -> Counter:
        return Counter(run.state for run in self.runs)

    @property
    def active(self) -> int:
        return sum(run.state in ACTIVE for run in self.runs)

    @property
    def ended(self) -> bool:
        return all(run.state in ENDED for run in self.runs)

    @property
    def gen_tokens(self) -> float:
        return sum(run.gen_tokens or 0.0 for run in self.runs)

    @property
    def steps_progress(self) -> tuple[int, int]:
        """(steps done, steps planned) over the runs: a completed run counts in full."""
        done = total = 0
        for run in self.runs:
            if run.steps:
                total += run.steps
                done += run.steps if run.state == "completed" else min(run.step or 0, run.steps)
        return done, total

    @property
    def alerts(self) -> list[tuple[str, Alert]]:
        return sorted(((run.name, a) for run in self.runs for a in run.alerts), key=lambda p: (p[1].step, p[0]))


class Watcher:
    """Polls `states()` and the run folders; one `poll()` per refresh."""

    def __init__(self, states: StatesFn) -> None:
        self.states = states
        self.tails: dict[str, RunTail] = {}

    def poll(self) -> SweepView:
        views, new_alerts = [], []
        statuses = self.states()
        for status in statuses:
            tail = None
            if status.run_dir is not None:
                tail = self.tails.get(status.run_id)
                if tail is None or tail.run_dir != Path(status.run_dir):
                    tail = self.tails[status.run_id] = RunTail(Path(status.run_dir))
                new_alerts.extend((status.name, a) for a in tail.refresh())
            views.append(_view(status, tail))
        return SweepView(views, new_alerts, getattr(statuses, "unreachable", None))


def _view(status: RunStatus, tail: RunTail | None) -> RunView:
    state = status.state
    stop = tail.stop if tail is not None else None
    if stop is not None and state == "completed":  # the job returned after a monitor's stop
        state = STOPPED
    latest = tail.latest if tail is not None else {}
    return RunView(
        run_id=status.run_id,
        name=status.name,
        state=state,
        reason=f"{stop.rule} at step {stop.step}" if state == STOPPED and stop is not None else status.reason,
        step=tail.step if tail is not None and tail.step is not None else getattr(status, "step", None),
        steps=status.steps,
        reward=_first(latest, REWARD_KEYS),
        mismatch=_first(latest, MISMATCH_KEYS),
        entropy=_first(latest, ENTROPY_KEYS),
        rewards=list(tail.rewards) if tail is not None else [],
        seconds_per_step=tail.seconds_per_step if tail is not None else None,
        gen_tokens=latest.get(GEN_TOKENS_KEY),
        alerts=list(tail.alerts) if tail is not None else [],
        stop=stop,
    )


def _number(value) -> float:
    return float(value)  # "NaN"/"Infinity" (how metrics.jsonl spells non-finite values) parse too


def _first(metrics: dict, keys: Iterable[str]) -> float | None:
    for key in keys:
        if key in metrics:
            try:
                return _number(metrics[key])
            except (TypeError, ValueError):
                return None
    return None


@dataclass
class FolderRun:
    run_id: str
    name: str
    state: str
    steps: int | None
    run_dir: Path
    reason: str = ""


def folder_states(runs_dir: Path) -> StatesFn:
    """States read from the run folders alone (no scheduler): result.json → completed, stopped.json
    → stopped, error.txt → failed/cancelled, metrics.jsonl → running, else pending. For tests, the
    benchmark and work dirs without a manifest; the CLI passes the executor's states instead."""
    runs_dir = Path(runs_dir)
    identity: dict[Path, tuple[str, str, int | None]] = {}  # run.json is written once, at launch

    def states() -> list[FolderRun]:
        out = []
        for run_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
            if run_dir not in identity:
                try:
                    record = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue  # not (yet) a run folder
                steps = ((record.get("run") or {}).get("spec") or {}).get("budget", {}).get("steps")
                run_id, name = record.get("run_id") or run_dir.name, record.get("name") or run_dir.name
                identity[run_dir] = (str(run_id), str(name), steps)
            run_id, name, steps = identity[run_dir]
            state, reason = _folder_state(run_dir)
            out.append(FolderRun(run_id, name, state, steps, run_dir, reason))
        return out

    return states


def _folder_state(run_dir: Path) -> tuple[str, str]:
    if (run_dir / STOPPED_JSON).exists():
        return STOPPED, ""
    if (run_dir / "result.json").exists():
        return "completed", ""
    try:
        error = (run_dir / "error.txt").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        error = None
    if error:
        first = error[0]
        return ("cancelled" if first.startswith("INTERRUPTED") else "failed"), first.split(": ", 1)[-1][:80]
    return ("running", "") if (run_dir / METRICS_JSONL).exists() else ("pending", "")
