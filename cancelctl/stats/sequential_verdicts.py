"""Verdicts of a sweep run until decided (`cancelctl sweep --until-decided`): the claims judged at
every look (round of seeds) by the safe t-test's e-process (`sequential`), each decided at the first
look its e-value crosses. Verdict rows in (the fixed-n `verdicts.judge_claims` at each look, for
their paired effect, sd and seeds), dataclasses out; nothing here reads the looks from disk.

Decisions, stated once:
- A paired claim is judged at every look with ≥ 2 shared seeds from the mean and sd of its
  differences (the e-value is exact from 2 seeds: no MIN_VERDICT_SEEDS); its verdict is the first
  crossing and stands. Its numbers (effect, Student's t CI, seeds) are those of the deciding look, or
  of the last look when undecided (a crossing e-value implies that interval excludes the boundary:
  `sequential`); p is the anytime-valid p-value 1/E (running maximum) and the
  adjusted p its Bonferroni m/E.
- Family-wise error: each of the m rows of the report (claims × groups × keys, counted at the last
  look) at level α/m — Bonferroni, which e-values allow at any looks and any stopping.
- Outcome claims (collapse rate, time to collapse, alert order) are unpaired: no e-process here.
  They are judged once, at the last look, by their own exact tests at the same level α/m (claim p,
  held to their interval like the fixed-n verdicts: `verdicts.agreeing`); the seeds
  that look has were chosen by the paired claims, so that one look is not strictly a fixed design
  (the table says so). They do not ask for more seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from cancelctl.spec.claim_metric import OUTCOME_KINDS
from cancelctl.stats.evidence import ALPHA, decide
from cancelctl.stats.sequential import PRIOR_VARIANCE, LookEvidence, first_decision, look_evidence
from cancelctl.stats.verdicts import Verdict, agreeing

SEQUENTIAL_TEST = "safe t-test (e-process)"


@dataclass(frozen=True)
class SequentialVerdict:
    """One row (claim × group × key) of a sweep run until decided.

    verdict: the row at its deciding look (the last when undecided), status the sequential decision.
    looks: the looks at which its seeds grew, up to the decision (the last look when undecided).
    decided_at: the sweep's look that decided it (1-based), None when undecided.
    judged_at: the sweep's last look judged (whose seeds the next round adds to).
    sequential: False for an outcome claim (judged once at the last look by its own test)."""

    verdict: Verdict
    looks: int
    decided_at: int | None
    e_for: float = 1.0
    e_against: float = 1.0
    level: float = ALPHA
    sequential: bool = True
    judged_at: int = 1

    @property
    def evaluable(self) -> bool:
        """A paired row with an effect and sd from ≥ 2 seeds: more seeds can decide it."""
        v = self.verdict
        return self.sequential and v.n_seeds >= 2 and math.isfinite(v.effect) and math.isfinite(v.sd)

    @property
    def wants_seeds(self) -> bool:
        """Undecided and judged by the e-process: another round of seeds may decide it."""
        return self.evaluable and self.decided_at is None


def _row_key(v: Verdict) -> tuple[str, str, str, str]:
    return (v.claim_id, v.key, v.versus_key, v.group)


def judge_looks(
    per_look: Sequence[Sequence[Verdict]], alpha: float = ALPHA, g: float = PRIOR_VARIANCE
) -> list[SequentialVerdict]:
    """The sequential verdict of every row of the last look, from the fixed-n rows of each look
    (`per_look[i]`: `judge_claims` on the runs of look i + 1), in the last look's order."""
    if not per_look:
        return []
    last = list(per_look[-1])
    m = max(1, len(last))
    by_look = [{_row_key(v): v for v in rows} for rows in per_look]
    return [
        replace(_outcome_row(row, m, alpha, len(per_look)) if row.kind in OUTCOME_KINDS
                else _paired_row([rows.get(_row_key(row)) for rows in by_look], m, alpha, g), judged_at=len(per_look))
        for row in last
    ]


def _paired_row(history: list[Verdict | None], m: int, alpha: float, g: float) -> SequentialVerdict:
    """Walk one row's looks: evidence where it has ≥ 2 seeds, decided at the first crossing."""
    looks: list[LookEvidence] = []
    at_look: list[int] = []  # the sweep's look number of each entry of `looks`
    rows: list[Verdict] = []
    for number, v in enumerate(history, start=1):
        if v is None or v.n_seeds < 2 or not (math.isfinite(v.effect) and math.isfinite(v.sd)):
            continue
        if looks and looks[-1].n == v.n_seeds:
            continue  # its arms got no seeds this round: the same data, not a new look at this claim
        margin = v.margin if math.isfinite(v.margin) else 0.0
        looks.append(look_evidence(v.effect, v.sd, v.n_seeds, v.direction, margin, g))
        at_look.append(number)
        rows.append(v)
    level, final = alpha / m, history[-1]
    if not looks:
        shown = final if final is not None else next(v for v in reversed(history) if v is not None)
        return SequentialVerdict(replace(shown, test=SEQUENTIAL_TEST, seeds_needed=None), 0, None, level=level)
    decision = first_decision(looks, level)
    index = (decision.look or len(looks)) - 1
    shown = rows[index]
    verdict = replace(
        shown, status=decision.status, reason="", test=SEQUENTIAL_TEST, seeds_needed=None,
        p=decision.p_for, p_against=decision.p_against,
        p_holm=min(1.0, m * decision.p_for), p_against_holm=min(1.0, m * decision.p_against),
    )
    decided_at = at_look[index] if decision.look is not None else None
    return SequentialVerdict(verdict, index + 1, decided_at, decision.e_for, decision.e_against, level)


def _outcome_row(row: Verdict, m: int, alpha: float, n_looks: int) -> SequentialVerdict:
    """An unpaired outcome claim, judged once at the last look by its own test at level α/m."""
    level = alpha / m
    if not row.judged:
        return SequentialVerdict(row, 0, None, level=level, sequential=False)
    p_for = min(1.0, m * row.p) if math.isfinite(row.p) else math.nan
    p_against = min(1.0, m * row.p_against) if math.isfinite(row.p_against) else math.nan
    verdict = agreeing(replace(row, status=decide(p_for, p_against, alpha), p_holm=p_for, p_against_holm=p_against))
    status = verdict.status
    return SequentialVerdict(verdict, 1, n_looks if status != "inconclusive" else None, level=level, sequential=False)
