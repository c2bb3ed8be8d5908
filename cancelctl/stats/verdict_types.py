"""What judging a claim takes and gives, below every module that judges one: the `Verdict` row (out),
the `Judging` of one report (in: its runs, metrics, κ, alerts, stops and `ComparisonOptions`), and
the `Stop` that ended a run. The rules themselves are `verdict_rules` (paired and trend claims) and
`outcomes` (claims on the monitor's alerts); `verdicts` dispatches on the claim's kind and adjusts."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import pandas as pd

from cancelctl.spec.claims import ClaimSpec
from cancelctl.spec.directions import MARGIN_DIRECTIONS
from cancelctl.stats.evidence import ALPHA, Status
from cancelctl.stats.options import ComparisonOptions


@dataclass(frozen=True)
class Stop:
    """The alert that ended a run: the rule and the step (stopped.json)."""

    rule: str
    step: int


@dataclass(frozen=True)
class Verdict:
    """One claim in one comparison group (and, for a '*' key, one matching metric key)."""

    claim_id: str
    source: str
    statement: str
    metric: str  # what was compared, e.g. "slope/step of mismatch/rho_std"
    key: str  # the resolved metric key
    versus_key: str
    direction: str
    arm: str
    versus: str
    group: str
    status: Status
    reason: str = ""  # why "cannot judge"; empty otherwise
    notes: str = ""  # runs left out, not compute-matched but judged, ...
    n_seeds: int = 0  # shared seeds behind the numbers
    arm_mean: float = math.nan
    versus_mean: float = math.nan
    effect: float = math.nan  # mean over seeds of arm − versus
    ci_lo: float = math.nan
    ci_hi: float = math.nan
    sd: float = math.nan  # sd over seeds of arm − versus
    margin: float = math.nan  # absolute margin used (not_higher / not_lower / similar)
    distance: float = math.nan  # effect's distance from the decision boundary, > 0 on the claim's side
    p: float = math.nan  # claim p (one-sided, doubled: `evidence.doubled`) of the test that supports the claim
    p_against: float = math.nan  # ... and of the test that contradicts it
    p_holm: float = math.nan
    p_against_holm: float = math.nan
    alpha: float = ALPHA
    seeds_needed: int | None = None  # paired seeds for 80% power at the observed effect and sd, level α/(2m)
    compute_matched: bool = True
    kind: str = ""  # the claim's metric kind
    test: str = "paired t"  # the test behind p
    n_versus: int | None = None  # unpaired (outcome) claims: runs of versus; n_seeds then counts arm's runs
    event_fraction: float = math.nan  # outcome claims: share of the compared runs that collapsed
    log_hazard_ratio: float = math.nan  # time_to_collapse: Peto's estimate, arm vs versus
    axis: str = ""  # trend claims: the grid axis; effect, CI, sd (and each arm's mean) are then of slopes along it
    axis_effects: tuple[tuple[float, float], ...] = ()  # ... and (axis value, mean of arm − versus) per value

    @property
    def judged(self) -> bool:
        return self.status != "cannot judge"

    @property
    def leans_against(self) -> bool:
        """Whether the row's evidence points against the claim: of its two tests the contradicting one
        has the smaller p (each is twice a one-sided p capped at 1, so at most one of them is below 1;
        a contradicted row's is); with no p to tell (both 1, or none), the effect is on the
        contradicting side of the boundary. The report's p columns show this test (`shown_p`)."""
        if math.isfinite(self.p) and math.isfinite(self.p_against) and self.p != self.p_against:
            return self.p_against < self.p
        return self.distance < 0

    @property
    def shown_p(self) -> tuple[float, float]:
        """(p, Holm p) the report shows beside the verdict: those of the test that decided the row, or
        would with more seeds — the contradicting test's when it `leans_against`, else the predicted
        direction's. Every label of the row ('after Holm', 'leans against') reads off these two."""
        return (self.p_against, self.p_against_holm) if self.leans_against else (self.p, self.p_holm)


@dataclass(frozen=True)
class Judging:
    """Everything a claim is judged on, the same for every claim of one report.

    runs: the runs the report uses, a monitor rule's stopped ones included (run_id, arm, group, seed,
    axis.*); by_key: the tidy metrics split per key; kappa: κ for the claims on steps / compute to κ
    that give none (the report's); alerts: the monitor's alerts (run_id, rule, step, action); stops:
    run id -> the `Stop` that ended it; ends: run id -> its last logged step (where a run that never
    collapsed is censored); rules_off: arm -> the monitor rules that are off in its runs."""

    runs: pd.DataFrame
    by_key: dict[str, pd.DataFrame]
    options: ComparisonOptions = field(default_factory=ComparisonOptions)
    kappa: float | None = None
    alerts: pd.DataFrame | None = None
    stops: Mapping[str, Stop] = field(default_factory=dict)
    ends: Mapping[str, float] = field(default_factory=dict)
    rules_off: Mapping[str, Collection[str]] = field(default_factory=dict)

    def in_group(self, group: str) -> pd.DataFrame:
        return self.runs[self.runs["group"] == group]


def base_verdict(claim: ClaimSpec, key: str, versus_key: str, group: str) -> Verdict:
    """The claim's row in `group`, not judged yet (status "cannot judge", no numbers)."""
    label = claim.metric.label.replace(claim.metric.resolved_key, key, 1)  # a '*' or {last} key, resolved
    return Verdict(
        claim.id, claim.source, claim.statement, label, key, versus_key, claim.direction,
        ", ".join(claim.arms), claim.versus or "", group, "cannot judge", kind=claim.metric.kind,
    )


def shown_margin(claim: ClaimSpec, margin: float) -> float:
    """The margin a verdict shows: the one tested for not_higher / not_lower / similar, else none."""
    return margin if claim.direction in MARGIN_DIRECTIONS else math.nan
