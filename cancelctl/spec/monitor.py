"""The spec's `monitor:` block: alert rules evaluated inside the job at every step (`cancelctl.jobs.monitor`).

Defaults follow [H] §5.3 and App. D: the training–inference mismatch (std of ρ = π_train/π_infer)
grows first and is the earliest warning, a falling PCC of π_train vs π_infer says the same, and
entropy and reward collapse come later and are irreversible — so the early signals warn and the
late ones stop the run (its checkpoint is kept: a stop is cheap to undo, a collapsed run is not).
Thresholds are ratios or relative drops over windows of steps, so one default fits the lab (ρ std ~5e-3)
and an LLM alike; no default fires on the lab demo's healthy runs (tests/jobs/test_monitor.py).

Every rule reads the first of its `keys` present in a step's metrics (the names of docs/metrics.md first, then
verl's own spelling of the same quantity), and skips steps where none is.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cancelctl.spec.metric_keys import REWARD_KEY
from cancelctl.spec.strict import Strict

# `off` disables a rule (an arm can patch `monitor.<rule>.action: off`; YAML's boolean reads back as `off`).
Action = Literal["warn", "stop", "off"]
# the rules by name, as `MonitorSpec`'s fields and the alerts' `rule` spell them (claims on alerts name them)
RuleName = Literal["mismatch_growth", "pcc_drop", "entropy_collapse", "reward_collapse", "nonfinite"]


class MismatchGrowthRule(Strict):
    """Mismatch growth [H §5.3, App. D]: median of the last `window` values over the median of the
    first `window` (the run's baseline) ≥ `ratio`. A ratio, not a slope: ρ's std differs by orders
    of magnitude between precisions and models, its growth factor does not."""

    action: Action = Field("warn", description="warn: log an alert; stop: end the run at this step boundary, checkpoint kept; off")
    keys: list[str] = Field(
        default_factory=lambda: ["mismatch/rho_std", "rollout_corr/rollout_is_std"],
        min_length=1,
        description="std of rho per step (mismatch/rho_std; verl's rollout_is std when rollout_correction.rollout_is is on)",
    )
    window: int = Field(10, ge=1, le=10_000, description="steps per window (baseline and recent)")
    ratio: float = Field(3.0, gt=1, description="recent / baseline window median that raises the alert")


class PccDropRule(Strict):
    """PCC drop [H Fig. 3, Fig. 9a]: the mean PCC of the last `window` steps is `drop` below the
    baseline window's mean."""

    action: Action = Field("warn", description="warn: log an alert; stop: end the run at this step boundary, checkpoint kept; off")
    keys: list[str] = Field(
        default_factory=lambda: ["mismatch/pcc", "training/rollout_actor_probs_pearson_corr"],
        min_length=1,
        description="PCC of the train and inference token probabilities (mismatch/pcc; verl's debug metric)",
    )
    window: int = Field(10, ge=1, le=10_000, description="steps per window (baseline and recent)")
    drop: float = Field(0.05, gt=0, le=2, description="absolute fall of the window mean below the baseline's")


class EntropyCollapseRule(Strict):
    """Token-entropy collapse [H App. D.1]: the window mean below `floor`, or below `fall` times
    the mean of the window before it (a fast fall)."""

    action: Action = Field("stop", description="warn: log an alert; stop: end the run at this step boundary, checkpoint kept; off")
    keys: list[str] = Field(
        default_factory=lambda: ["actor/entropy"], min_length=1, description="the token entropy per step (the first key logged)"
    )
    window: int = Field(10, ge=1, le=10_000, description="steps per window")
    floor: float = Field(0.01, ge=0, description="nats per token; healthy RLVR runs stay well above")
    fall: float = Field(0.5, gt=0, lt=1, description="window mean / previous window mean that counts as a collapse")


class RewardCollapseRule(Strict):
    """Reward collapse [H §5.3]: the window mean fell below (1 − `drop`) × the best window mean of
    the run, once that best is at least `min_best` (a run at zero reward has nothing to lose)."""

    action: Action = Field("stop", description="warn: log an alert; stop: end the run at this step boundary, checkpoint kept; off")
    keys: list[str] = Field(
        default_factory=lambda: [REWARD_KEY], min_length=1, description="the training reward per step (the first key logged)"
    )
    # 20, not 10: a step's mean reward over a small batch is noisy (64 rollouts at reward 0.1: ±12%
    # per 10-step mean), and a false stop costs a restart
    window: int = Field(20, ge=1, le=10_000, description="steps per window")
    drop: float = Field(0.5, gt=0, le=1, description="relative drop from the run's best window mean")
    min_best: float = Field(
        0.1, ge=0, description="no alert before the best window mean reaches this (near 0, a 50% drop is noise)"
    )


class NonFiniteRule(Strict):
    """Any NaN/±inf metric value: the update blew up."""

    action: Action = Field("stop", description="warn: log an alert; stop: end the run at this step boundary, checkpoint kept; off")


class StallRule(Strict):
    """The stall watchdog (`cancelctl.jobs.watchdog`): a job that shows no progress (a step logged, a
    verl phase finished) for `after_min` minutes — by default the larger of `floor_min` and
    `step_multiple` × the run's median step time — or, before this attempt's first step, for
    `startup_min`, is stalled: its Python stacks are saved under `stalls/`, its processes killed, and it
    is requeued from its last checkpoint, at most `retries` times; then the run fails naming the stall.
    A multiple, not a fixed limit: a run whose steps grow several-fold is slow, not stalled."""

    action: Literal["requeue", "off"] = Field(
        "requeue", description="requeue: kill a stalled attempt and requeue it from its checkpoint; off"
    )
    after_min: float | None = Field(None, gt=0, description="fixed limit in minutes (default: from the run's step time)")
    floor_min: float = Field(10.0, gt=0, description="the smallest limit once steps are logged, in minutes")
    step_multiple: float = Field(10.0, ge=2, description="the limit as a multiple of the run's median step time")
    startup_min: float = Field(30.0, gt=0, description="the limit before an attempt's first step: model loading, the first rollout")
    retries: int = Field(2, ge=0, le=1000, description="requeues after a stall before the run fails")


class MonitorSpec(Strict):
    """Alert rules evaluated inside the job after every step; alerts go to the run folder's
    alerts.jsonl, a `stop` ends the run at that step boundary with its checkpoint kept. `stall`: the
    watchdog beside the job that requeues it when it stops making progress."""

    mismatch_growth: MismatchGrowthRule = Field(MismatchGrowthRule(), description="the train-inference mismatch grows [H §5.3]")
    pcc_drop: PccDropRule = Field(PccDropRule(), description="the train-inference probability correlation drops [H Fig. 3]")
    entropy_collapse: EntropyCollapseRule = Field(EntropyCollapseRule(), description="the token entropy collapses [H App. D.1]")
    reward_collapse: RewardCollapseRule = Field(RewardCollapseRule(), description="the training reward collapses [H §5.3]")
    nonfinite: NonFiniteRule = Field(NonFiniteRule(), description="a NaN or infinite metric value")
    stall: StallRule = Field(StallRule(), description="the stall watchdog beside the job")
