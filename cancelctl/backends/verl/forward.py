"""verl's metrics into the run's RunLogger, step by step, as verl writes them.

verl runs with its `file` logger (command.py); `MetricsForwarder` tails that JSONL and logs each
complete step's numeric metrics (metrics.jsonl record + buffered MLflow, `cancelctl sync` for gaps).
The metric keys are verl's own, sanitised as verl's MLflow logger does (`@` → `_at_`), except the
The mechanism keys of docs/metrics.md (mismatch/*, hacking/J, dfpo/*, cancel/*): the `cancel_*` losses compute them
inside verl's actor update (losses/verl_metrics.py) and verl prefixes every actor metric with
`actor/`; they are logged under those keys, as the lab does.

On the way (`monitored`, the forwarder's `derive`): the compute keys (generated tokens, update
steps, GPU-hours) from verl's own metrics (`compute.ComputeAccount`), so `cancelctl report` has its
compute axes for verl runs; the spec's monitor rules (`cancelctl.jobs.monitor.RunMonitor`), which see
every forwarded step as in the lab; and a generated-token budget (`budget.gen_tokens`, `TokenBudget`):
the first step whose `compute/gen_tokens_cum` reaches it. Steps verl logs after a `stop` rule fired or
the budget was spent are not forwarded (the run ends at that step). A resumed verl replays the steps
an earlier attempt logged (`last_logged_step`): they are skipped, so MLflow holds each step once.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cancelctl.backends.verl.compute import GEN_TOKENS_CUM, ComputeAccount
from cancelctl.jobs.monitor import RunMonitor
from cancelctl.spec.run import RunSpec
from cancelctl.tracking.runfiles import iter_metrics_lines

if TYPE_CHECKING:
    from cancelctl.tracking.logger import MetricLogger

# verl's MLflow key sanitising (utils/tracking.py), so keys match what verl itself would log.
_INVALID_KEY_CHARS = re.compile(r"[^/\w.\- :]")
_SLASHES = re.compile(r"/+")
# mechanism keys (docs/metrics.md) the loss plugin logs; verl's _update_actor prefixes them with "actor/".
MECHANISM_PREFIXES = ("mismatch/", "hacking/", "dfpo/", "cancel/")


def spec_key(key: str) -> str:
    """verl's `actor/dfpo/asym` → `dfpo/asym` (docs/metrics.md); other keys unchanged."""
    inner = key[len("actor/") :] if key.startswith("actor/") else None
    return inner if inner is not None and inner.startswith(MECHANISM_PREFIXES) else key


class MetricsForwarder:
    """Tails verl's file-logger JSONL ({"step": n, "data": {...}} per line) into a RunLogger."""

    def __init__(
        self,
        path: Path,
        logger: MetricLogger,
        derive: Callable[[int, dict[str, float]], dict[str, float] | None] | None = None,
        skip_through: int = -1,
    ):
        self.path = Path(path)
        self.logger = logger
        self.derive = derive  # adds derived keys (the compute keys) to a step's metrics
        self.skip_through = skip_through  # steps an earlier attempt logged: a resumed verl replays them
        self.replayed: set[int] = set()
        self.offset = 0
        self.last: dict[str, float] = {}
        self.skipped_keys: set[str] = set()

    def pump(self) -> int:
        """Forward the complete lines written since the last call; returns how many steps."""
        if not self.path.exists():
            return 0
        if self.path.stat().st_size < self.offset:  # rewritten from scratch: start over
            self.offset = 0
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a half-written last line waits for the next pump
        self.offset += len(complete)
        steps = 0
        for raw in complete.splitlines():
            if not raw.strip():
                continue
            record = json.loads(raw)
            metrics = self._numeric(record.get("data") or {})
            step = int(record["step"])
            if metrics and step <= self.skip_through:
                self.replayed.add(step)
            elif metrics:
                if self.derive is not None:
                    metrics = self.derive(step, metrics)
                    if metrics is None:  # past the step the run ended at
                        continue
                self.logger.log(step, metrics)
                self.last = metrics
                steps += 1
        return steps

    def _numeric(self, data: dict) -> dict[str, float]:
        out = {}
        for key, value in data.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue  # tables / strings: MLflow metrics are numbers
            name = spec_key(sanitize_key(str(key)))
            if not name or name.startswith("/") or name.endswith("/") or os.path.normpath(name) != name:
                self.skipped_keys.add(str(key))
                continue
            out[name] = float(value)
        return out


def sanitize_key(key: str) -> str:
    return _INVALID_KEY_CHARS.sub("_", _SLASHES.sub("/", key.replace("@", "_at_")))[:250]


def monitored(
    derive: Callable[[int, dict[str, float]], dict[str, float]], mon: RunMonitor, budget: TokenBudget | None = None
) -> Callable[[int, dict[str, float]], dict[str, float] | None]:
    """The forwarder's `derive`: add the compute keys, then let the monitor rules see the step; None
    (not forwarded) for a step after the one that spent the token budget or fired a `stop` rule: verl
    trains on until the job's SIGTERM reaches it (on CPU a few steps), and the run ends at the rule's step."""

    def step(s: int, m: dict[str, float]) -> dict[str, float] | None:
        if budget is not None and budget.reached_at is not None and s > budget.reached_at:
            return None
        if mon.stopped is not None and s > mon.stopped.step:
            return None
        m = derive(s, m)
        mon.observe(s, m)  # alerts.jsonl; a stop writes stopped.json and sets mon.stopped
        if budget is not None:
            budget.observe(s, m)
        return m

    return step


class TokenBudget:
    """`budget.gen_tokens` in the job: the first step whose `compute/gen_tokens_cum` reaches it (every
    rollout of that step counts, so the run overshoots by less than that step's tokens)."""

    def __init__(self, run: RunSpec) -> None:
        self.amount = run.spec.budget.gen_tokens  # None: no token budget, nothing to watch
        self.reached_at: int | None = None

    def observe(self, step: int, metrics: dict[str, float]) -> None:
        if self.amount is not None and self.reached_at is None and metrics.get(GEN_TOKENS_CUM, 0.0) >= self.amount:
            self.reached_at = step

    def reached_before(self, compute: ComputeAccount, logged: int) -> bool:
        """Whether the steps an earlier attempt logged already spent the budget."""
        return self.amount is not None and logged > 0 and compute.gen_tokens_through(logged) >= self.amount


def last_logged_metrics(metrics_jsonl: Path) -> dict[str, float]:
    """The metrics of the last step an earlier attempt logged (its last line for that step)."""
    last: dict[int, dict[str, float]] = {}
    for line in iter_metrics_lines(metrics_jsonl):
        last[line.step] = {**last.get(line.step, {}), **line.metrics}
    return last[max(last)] if last else {}


def last_logged_step(metrics_jsonl: Path) -> int:
    """The last step an earlier attempt logged (0 when none): where the monitor's replay ends."""
    return max((line.step for line in iter_metrics_lines(metrics_jsonl)), default=0)
