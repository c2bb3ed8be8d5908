"""The claims of a sweep run until decided (`cancelctl sweep --until-decided`): the fixed-n verdict
rows at every recorded look (`cancelctl.seed_rounds`: the runs of the seeds each look holds), then
the sequential decision of each row (`cancelctl.stats.sequential_verdicts`) and its table.

κ for the claims on steps / compute to κ that name none is fixed at look 1 (the report's default
from the sweep file's seeds, or the one given): a threshold that moved with every round of seeds
would change what the earlier looks measured.

`cancelctl.report.sweep_report.judge_until_decided` is the same judging for the rounds themselves
(`cancelctl.launch.until_decided` is handed it by the CLI), reading the runs as `report` does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import pandas as pd

from cancelctl.report.claims import sequential_notes, sequential_records, sequential_rows
from cancelctl.report.prepared import PreparedSweep, ReportTable
from cancelctl.report.options import ReportOptions
from cancelctl.report.thresholds import default_kappa
from cancelctl.seed_rounds import SeedRounds
from cancelctl.spec.claims import ClaimSpec
from cancelctl.stats import verdicts
from cancelctl.stats.sequential_verdicts import SequentialVerdict, judge_looks

if TYPE_CHECKING:
    from cancelctl.report.alerts import SweepAlerts


def runs_at_look(runs: pd.DataFrame, rounds: SeedRounds, look: int) -> pd.DataFrame:
    """The runs among `runs` whose seed look `look` holds for their arm and group."""
    keep = [int(seed) in rounds.seeds_at(look, str(arm), str(group))
            for arm, group, seed in zip(runs["arm"], runs["group"].fillna(""), runs["seed"])]
    return runs.loc[keep]


def claims_kappa(prepared: PreparedSweep, rounds: SeedRounds, options: ReportOptions) -> float | None:
    """κ of the claims: the one given, else the report's default on look 1's runs."""
    if options.kappa is not None:
        return float(options.kappa)
    return default_kappa(replace(prepared, runs=runs_at_look(prepared.runs, rounds, 1)), options.metric)[0]


def sequential_verdicts(
    prepared: PreparedSweep, claims: Sequence[ClaimSpec], rounds: SeedRounds, options: ReportOptions, *,
    alerts: SweepAlerts | None = None, rules_off: Mapping[str, Collection[str]] | None = None,
) -> list[SequentialVerdict]:
    """Every claim row judged at every look, then decided by the e-process (Bonferroni over the rows)."""
    kappa = claims_kappa(prepared, rounds, options)
    per_look = []
    for look in range(1, rounds.n_looks + 1):
        at_look = runs_at_look(prepared.runs, rounds, look)
        per_look.append(verdicts.judge_claims(
            claims, at_look, prepared.by_key, options.compare, kappa=kappa, groups=prepared.groups,
            alerts=alerts.alerts if alerts is not None else None, stops=alerts.stops if alerts is not None else None,
            rules_off=rules_off,
        ))
    return judge_looks(per_look, alpha=rounds.alpha)


def budget_spent(rows: Sequence[SequentialVerdict], rounds: SeedRounds) -> list[bool]:
    """Per row: undecided with an arm at the seed budget at the look it was judged at (no round can
    add to it) — not at a look recorded since, whose round is being submitted."""
    return [
        row.decided_at is None and row.sequential and any(
            len(rounds.seeds_at(row.judged_at, arm, row.verdict.group)) >= rounds.max_seeds
            for arm in (row.verdict.arm, row.verdict.versus) if arm)
        for row in rows
    ]


def seeds_per_look(rounds: SeedRounds) -> str:
    """'look 1: seeds 0–4; look 2: +5, 6 (4 arms)'."""
    parts = [f"look 1: seeds {_seeds_text(rounds.initial_seeds)}"]
    for look, added in enumerate(rounds.rounds, start=2):
        seeds = sorted({s for new in added.values() for s in new})
        parts.append(f"look {look}: +{_seeds_text(seeds)} ({len(added)} arm(s))")
    return "; ".join(parts)


def _seeds_text(seeds: Sequence[int]) -> str:
    seeds = sorted(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def sequential_claims_table(rows: Sequence[SequentialVerdict], rounds: SeedRounds) -> ReportTable:
    spent = budget_spent(rows, rounds)
    return ReportTable(
        "claims", "Claims (run until decided)", pd.DataFrame(sequential_records(rows)),
        pd.DataFrame(sequential_rows(rows, spent)),
        sequential_notes(rows, rounds.n_looks, seeds_per_look(rounds), rounds.batch, rounds.max_seeds, rounds.alpha),
    )

