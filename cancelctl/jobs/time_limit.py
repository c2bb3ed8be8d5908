"""What a run's SLURM time limit must hold, planned before submission: the lead time of the time-limit
signal, the allocations the run is expected to need, and how many time-outs submitit may requeue.

A job learns its allocation is ending from USR2, `lead_s` before the limit (sbatch `--signal=USR2@lead`);
it then finishes the step in flight, writes a checkpoint and requeues (`cancelctl.jobs.preemption`).
So the lead must cover one step plus one checkpoint write: both come from the run's backend
(`cancelctl.backends.protocol.Backend.step_cost`, from the model's size), with a margin
and a floor. Once a job has measured its own step and checkpoint it also leaves on its own, at a step
boundary, when the allocation's time left no longer holds them (`cancelctl.jobs.deadline`).

submitit gives up after `max_num_timeout` time-outs (3 by default): here the count follows the plan,
the expected allocations (the run's work over what one allocation leaves after start-up and the lead)
plus a margin, so a run that needs many allocations is never stopped by the count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cancelctl.spec.run import RunSpec

SUBMITIT_LEAD_S = 90  # submitit's signal_delay_s: the lead when a backend has no estimate
SUBMITIT_TIMEOUTS = 3  # submitit's max_num_timeout: the count's floor
LEAD_MARGIN = 1.5  # the lead covers (one step + one checkpoint) x this
LEAD_SHARE = 0.1  # ... but takes at most this share of an allocation (above the backend's floor)
# A token budget's steps are unknown before the run: planned as if responses averaged this share of
# the response cap (shorter responses mean more steps; the lab's sums answer in about a third of it).
TOKEN_BUDGET_FILL = 0.25


@dataclass(frozen=True)
class StepCost:
    """A backend's estimate of what one allocation of a run spends, in seconds (conservative: slow)."""

    step_s: float  # one training step
    checkpoint_s: float  # writing one checkpoint
    startup_s: float  # from the job's start to its first step (imports, model load, resume)
    lead_floor_s: float  # the least lead this backend gets (start-up jitter, the scheduler's signal resolution)
    checkpoint_every: int | None  # steps between periodic checkpoints (besides the one at the signal); None: none

    @property
    def lead_s(self) -> int:
        return math.ceil(max(self.lead_floor_s, LEAD_MARGIN * (self.step_s + self.checkpoint_s)))

    def to_json(self) -> dict[str, float]:
        return {"step_s": round(self.step_s, 2), "checkpoint_s": round(self.checkpoint_s, 2),
                "startup_s": round(self.startup_s, 1)}


@dataclass(frozen=True)
class TimeLimitPlan:
    """A run's time limit as planned: the signal's lead, the allocations expected, submitit's time-out count."""

    time_s: int  # cluster.time_min in seconds
    lead_s: int
    allocations: int | None  # None: the backend has no estimate
    max_timeouts: int
    cost: StepCost | None = None

    @property
    def holds_one_step(self) -> bool:
        """Whether an allocation holds start-up, one step and one checkpoint (else the run cannot progress)."""
        c = self.cost
        return c is None or c.startup_s + c.step_s + c.checkpoint_s <= self.time_s

    def warning(self) -> str | None:
        """What `validate` says when the time limit cannot hold start-up, one step and one checkpoint."""
        if self.holds_one_step:
            return None
        c = self.cost
        needed = c.startup_s + c.step_s + c.checkpoint_s
        return (f"cluster.time_min {self.time_s // 60} may not hold start-up ({c.startup_s:.0f} s), one step "
                f"({c.step_s:.0f} s) and one checkpoint ({c.checkpoint_s:.0f} s) = {needed:.0f} s (estimates): each "
                f"allocation could end before the run makes progress; raise it to at least {math.ceil(needed / 60)}")

    def to_json(self) -> dict[str, object]:
        return {"time_s": self.time_s, "lead_s": self.lead_s, "expected_allocations": self.allocations,
                "max_timeouts": self.max_timeouts, **({"estimate": self.cost.to_json()} if self.cost else {})}


def plan_time_limit(run: RunSpec, cost: StepCost | None) -> TimeLimitPlan:
    """The run's lead, expected allocations and time-out count from its backend's estimate."""
    time_s = run.spec.cluster.time_min * 60
    if cost is None:
        return TimeLimitPlan(time_s, SUBMITIT_LEAD_S, None, SUBMITIT_TIMEOUTS)
    # An estimate that errs slow must not give away a large share of every allocation: the lead is at most
    # LEAD_SHARE of it (above the floor); a step longer than that is caught by the measured deadline.
    lead = min(cost.lead_s, max(math.ceil(cost.lead_floor_s), int(time_s * LEAD_SHARE)), time_s)
    allocations = expected_allocations(run, cost, time_s, lead)
    return TimeLimitPlan(time_s, lead, allocations, max_timeouts(allocations), cost)


def expected_allocations(run: RunSpec, cost: StepCost, time_s: int, lead_s: int) -> int:
    """The run's work (its steps and periodic checkpoints) over what one allocation leaves for it; an
    allocation with no time left after start-up and the lead still does one step (the signal waits for it)."""
    steps = planned_steps_or_guess(run)
    periodic = steps // cost.checkpoint_every if cost.checkpoint_every else 0
    work = steps * cost.step_s + periodic * cost.checkpoint_s
    usable = time_s - cost.startup_s - lead_s
    if usable < cost.step_s:
        return max(1, steps)
    return max(1, math.ceil(work / usable))


def max_timeouts(allocations: int) -> int:
    """submitit's time-out count for a run expected to need `allocations`: twice the time-outs the plan
    expects, plus two, never below submitit's default. Estimates err fast on a busy node (start-up under
    contention took 40 of a 60 s allocation in the chaos soak, which needed 7 allocations for a plan's 3):
    a run still progressing must not fail of the count, and a run that stopped progressing is the stall
    watchdog's to catch, not this count's."""
    return max(SUBMITIT_TIMEOUTS, 2 * (allocations - 1) + 2)


def planned_steps_or_guess(run: RunSpec) -> int:
    from cancelctl.spec.run import max_step_tokens, planned_steps

    steps = planned_steps(run.spec)
    if steps is not None:
        return steps
    return math.ceil(run.spec.budget.gen_tokens / max(1.0, max_step_tokens(run.spec) * TOKEN_BUDGET_FILL))


def step_cost(run: RunSpec) -> StepCost | None:
    """The backend's estimate (found through the spec's catalog, as the job finds its backend's `train`:
    executors and the job side never import a backend), None without one (the job then gets submitit's
    lead and count)."""
    from cancelctl.spec.backends import resolve_backend

    return resolve_backend(run.spec.backend).step_cost(run)


def time_limit_plan(run: RunSpec) -> TimeLimitPlan:
    return plan_time_limit(run, step_cost(run))
