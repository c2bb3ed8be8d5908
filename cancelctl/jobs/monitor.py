"""Alert rules evaluated inside the job, after every step (spec `monitor:`, cancelctl.spec.monitor).

`Monitor(spec).observe(step, metrics)` is pure and incremental: each rule keeps a window or two of
its own metric (O(window) per step, no history), and raises an `Alert` when its condition turns
true (edge-triggered: a run that stays collapsed is reported once, not at every step). Steps
without a rule's metric are skipped by that rule, so windows count observations, not step numbers.

`RunMonitor` is the in-job wrapper both backends call: it appends new alerts to the run folder's
`alerts.jsonl` (read by `watch` and `report`) and, on the first alert whose action is `stop`,
writes `stopped.json` ({rule, step, metric, value, threshold, message}) for the job to mark the run
`stopped`; the backend then ends the run at this step boundary with its checkpoint saved. A resumed
run rebuilds the rules' windows by replaying metrics.jsonl up to its checkpoint's step.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cancelctl import fencing
from cancelctl.fileio import atomic_write_json, say_once, unreadable_cause
from cancelctl.spec.monitor import (
    EntropyCollapseRule,
    MismatchGrowthRule,
    MonitorSpec,
    NonFiniteRule,
    PccDropRule,
    RewardCollapseRule,
)
from cancelctl.workdir import ALERTS_JSONL, STOPPED_JSON  # noqa: F401 - the run folder's names (RunFolder), re-exported

# Test support: "<step>:<factor>" multiplies the lab's learning rate by factor from that step on,
# to make a run diverge on purpose (tests, and seeing a stop live in `watch`). An environment
# variable rather than a spec field: it is fault injection, not part of any experiment, and must
# neither appear in the schema users write against nor change a run's id.
LR_SPIKE_ENV = "CANCELCTL_TEST_LR_SPIKE"


@dataclass(frozen=True)
class Alert:
    rule: str
    step: int
    metric: str
    value: float
    threshold: float
    action: str  # warn | stop
    message: str

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["value"], data["threshold"] = _json_float(self.value), _json_float(self.threshold)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Alert:
        return cls(
            rule=str(data["rule"]),
            step=int(data["step"]),
            metric=str(data.get("metric", "")),
            value=float(data["value"]),
            threshold=float(data["threshold"]),
            action=str(data["action"]),
            message=str(data.get("message", "")),
        )


# ------------------------------------------------------------------------------------- windows


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return math.fsum(values) / len(values)


class Window:
    """The last `size` values, their mean and median (over ≤ size values: O(window))."""

    def __init__(self, size: int) -> None:
        self.values: deque[float] = deque(maxlen=size)

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def full(self) -> bool:
        return len(self.values) == self.values.maxlen

    @property
    def mean(self) -> float:
        return _mean(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)


class Baseline:
    """The mean (or median) of a metric's first `size` values: the run's own reference level."""

    def __init__(self, size: int, center: Callable[[list[float]], float] = _mean) -> None:
        self.size, self.center, self.values = size, center, []
        self.level: float | None = None  # set once the first `size` values are in

    def add(self, value: float) -> None:
        if self.level is None:
            self.values.append(value)
            if len(self.values) == self.size:
                self.level, self.values = self.center(self.values), []


# --------------------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Finding:
    """A rule's condition holding at this step: the value compared, the threshold it crossed, why."""

    value: float
    threshold: float
    message: str


class Rule:
    name = ""

    def __init__(self, action: str, keys: Iterable[str] = ()) -> None:
        self.action, self.keys = action, tuple(keys)
        self.firing = False

    def observe(self, step: int, metrics: Mapping[str, float]) -> Alert | None:
        key = next((k for k in self.keys if k in metrics), None)
        if key is None or not math.isfinite(metrics[key]):  # non-finite values are NonFinite's
            return None
        found = self.check(key, float(metrics[key]))
        was_firing, self.firing = self.firing, found is not None
        if found is None or was_firing:
            return None
        return Alert(self.name, step, key, found.value, found.threshold, self.action, found.message)

    def check(self, key: str, value: float) -> Finding | None:
        raise NotImplementedError


class MismatchGrowth(Rule):
    """[H §5.3, App. D]: std of ρ grows before entropy and reward collapse; recent / baseline ≥ ratio.
    Medians, not means: a step's ρ std has heavy-tailed spikes (one odd token) that are not growth."""

    name = "mismatch_growth"

    def __init__(self, spec: MismatchGrowthRule) -> None:
        super().__init__(spec.action, spec.keys)
        self.ratio, self.window = spec.ratio, spec.window
        self.baseline, self.recent = Baseline(spec.window, statistics.median), Window(spec.window)

    def check(self, key: str, value: float) -> Finding | None:
        self.baseline.add(value)
        self.recent.add(value)
        base = self.baseline.level
        if base is None or base <= 0 or not self.recent.full:  # fp32 rollouts: ρ ≡ 1, nothing to grow
            return None
        now = self.recent.median
        if now < self.ratio * base:
            return None
        return Finding(now, self.ratio * base, (
            f"{key} grew {now / base:.2f}x: median {now:.4g} over the last {self.window} steps vs "
            f"{base:.4g} over the first {self.window} (alert at {self.ratio:g}x) — the early sign of collapse [H §5.3]"
        ))


class PccDrop(Rule):
    """[H Fig. 3, 9a]: π_train and π_infer decorrelate as the mismatch grows."""

    name = "pcc_drop"

    def __init__(self, spec: PccDropRule) -> None:
        super().__init__(spec.action, spec.keys)
        self.drop, self.window = spec.drop, spec.window
        self.baseline, self.recent = Baseline(spec.window), Window(spec.window)

    def check(self, key: str, value: float) -> Finding | None:
        self.baseline.add(value)
        self.recent.add(value)
        base = self.baseline.level
        if base is None or not self.recent.full or self.recent.mean >= base - self.drop:
            return None
        return Finding(self.recent.mean, base - self.drop, (
            f"{key} fell to {self.recent.mean:.4g} (mean of the last {self.window} steps) from {base:.4g} "
            f"(first {self.window}); alert below {base - self.drop:.4g} [H Fig. 3]"
        ))


class EntropyCollapse(Rule):
    """[H App. D.1]: token entropy below a floor, or losing more than (1 − fall) in one window."""

    name = "entropy_collapse"

    def __init__(self, spec: EntropyCollapseRule) -> None:
        super().__init__(spec.action, spec.keys)
        self.floor, self.fall, self.window = spec.floor, spec.fall, spec.window
        self.previous, self.recent = Window(spec.window), Window(spec.window)

    def check(self, key: str, value: float) -> Finding | None:
        if self.recent.full:
            self.previous.add(self.recent.values[0])
        self.recent.add(value)
        if not self.recent.full:
            return None
        now = self.recent.mean
        if now < self.floor:
            why = f"{key} collapsed: mean {now:.4g} over the last {self.window} steps, below the floor {self.floor:g}"
            return Finding(now, self.floor, why)
        if self.previous.full and now < self.fall * self.previous.mean:
            before = self.previous.mean
            return Finding(now, self.fall * before, (
                f"{key} fell fast: mean {now:.4g} over the last {self.window} steps vs {before:.4g} over the "
                f"{self.window} before (alert below {self.fall:g}x)"
            ))
        return None


class RewardCollapse(Rule):
    """[H §5.3]: the reward falls from the run's best and (the paper finds) does not come back."""

    name = "reward_collapse"

    def __init__(self, spec: RewardCollapseRule) -> None:
        super().__init__(spec.action, spec.keys)
        self.drop, self.min_best, self.window = spec.drop, spec.min_best, spec.window
        self.recent = Window(spec.window)
        self.best = -math.inf

    def check(self, key: str, value: float) -> Finding | None:
        self.recent.add(value)
        if not self.recent.full:
            return None
        now = self.recent.mean
        self.best = max(self.best, now)
        limit = (1 - self.drop) * self.best
        if self.best < self.min_best or now >= limit:
            return None
        return Finding(now, limit, (
            f"{key} collapsed: mean {now:.4g} over the last {self.window} steps, "
            f"{100 * (1 - now / self.best):.0f}% below the run's best {self.best:.4g} (alert at {100 * self.drop:g}%)"
        ))


class NonFinite(Rule):
    name = "nonfinite"

    def __init__(self, spec: NonFiniteRule) -> None:
        super().__init__(spec.action)

    def observe(self, step: int, metrics: Mapping[str, float]) -> Alert | None:
        bad = sorted(k for k, v in metrics.items() if not math.isfinite(v))
        was_firing, self.firing = self.firing, bool(bad)
        if not bad or was_firing:
            return None
        shown = ", ".join(f"{k}={metrics[k]}" for k in bad[:4]) + (f" (+{len(bad) - 4} more)" if len(bad) > 4 else "")
        why = f"non-finite metrics: {shown}"
        return Alert(self.name, step, bad[0], float(metrics[bad[0]]), math.inf, self.action, why)


RULES = (
    ("mismatch_growth", MismatchGrowth),
    ("pcc_drop", PccDrop),
    ("entropy_collapse", EntropyCollapse),
    ("reward_collapse", RewardCollapse),
    ("nonfinite", NonFinite),
)


class Monitor:
    """Every rule whose action is not `off`, fed one step at a time."""

    def __init__(self, spec: MonitorSpec | None = None) -> None:
        spec = spec or MonitorSpec()
        self.rules: list[Rule] = [
            build(getattr(spec, name)) for name, build in RULES if getattr(spec, name).action != "off"
        ]

    def observe(self, step: int, metrics: Mapping[str, float]) -> list[Alert]:
        return [alert for rule in self.rules if (alert := rule.observe(step, metrics)) is not None]


# ------------------------------------------------------------------------------- in the job


class RunMonitor:
    """A Monitor bound to a run folder: alerts → alerts.jsonl, the first stop → stopped.json."""

    def __init__(self, spec: MonitorSpec, run_dir: Path, *, resume_step: int = 0) -> None:
        self.monitor = Monitor(spec)
        self.run_dir = Path(run_dir)
        self.written = {(a.rule, a.step) for a in read_alerts(self.run_dir)}  # a replayed step's alerts
        self.stopped: Alert | None = None
        if resume_step > 0:
            self._replay(resume_step)

    def _replay(self, upto: int) -> None:
        """Refill the rules' windows from the steps already logged (up to the checkpoint's step)."""
        from cancelctl.tracking.runfiles import METRICS_JSONL, iter_metrics_lines

        by_step: dict[int, dict[str, float]] = {}
        for line in iter_metrics_lines(self.run_dir / METRICS_JSONL):
            if line.step <= upto:
                by_step[line.step] = line.metrics  # a step replayed after a resume: its last line
        for step in sorted(by_step):
            self.monitor.observe(step, by_step[step])

    def observe(self, step: int, metrics: Mapping[str, float]) -> Alert | None:
        """Evaluate the rules on this step; returns the alert that stops the run, if any."""
        alerts = self.monitor.observe(step, metrics)
        new = [a for a in alerts if (a.rule, a.step) not in self.written]
        if new or (any(a.action == "stop" for a in alerts) and self.stopped is None):
            fencing.check(self.run_dir)  # alerts and a stop are the run's outcome: the newest attempt's
        if new:
            with open(self.run_dir / ALERTS_JSONL, "a", encoding="utf-8") as fh:
                for alert in new:
                    fh.write(json.dumps(alert.to_json(), sort_keys=True) + "\n")
            self.written.update((a.rule, a.step) for a in new)
        stop = next((a for a in alerts if a.action == "stop"), None)
        if stop is not None and self.stopped is None:
            self.stopped = stop
            atomic_write_json(self.run_dir / STOPPED_JSON, stop.to_json(), sort_keys=True)
        return stop


def read_alerts(run_dir: Path, start: int = 0) -> list[Alert]:
    return read_alerts_from(Path(run_dir) / ALERTS_JSONL, start)[0]


def read_alerts_from(path: Path, start: int = 0) -> tuple[list[Alert], int]:
    """Complete alert lines from byte `start` on, and the offset past the last one read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            chunk = fh.read()
    except FileNotFoundError:
        return [], start
    complete = chunk[: chunk.rfind(b"\n") + 1]
    alerts = []
    for raw in complete.splitlines():
        try:
            alerts.append(Alert.from_json(json.loads(raw)))
        except (ValueError, KeyError, TypeError) as exc:  # damaged, or from a newer/older writer: the rest still count
            if raw.strip():
                say_once(path, "lines", f"{path}: skipping unreadable line(s) ({unreadable_cause(exc)}); the other alerts are read")
    return alerts, start + len(complete)


def read_stop(run_dir: Path) -> Alert | None:
    """The alert that stopped this run (stopped.json), or None."""
    try:
        return Alert.from_json(json.loads((Path(run_dir) / STOPPED_JSON).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def lr_spike() -> tuple[int, float] | None:
    """The test-only learning-rate spike from $CANCELCTL_TEST_LR_SPIKE ("<step>:<factor>")."""
    raw = os.environ.get(LR_SPIKE_ENV)
    if not raw:
        return None
    try:
        step, factor = raw.split(":")
        return int(step), float(factor)
    except ValueError:
        raise ValueError(f"${LR_SPIKE_ENV}={raw!r}: expected <step>:<factor>, e.g. 20:100") from None


def _json_float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
