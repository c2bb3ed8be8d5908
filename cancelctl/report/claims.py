"""The claims table's cells: each verdict of `cancelctl.stats.verdicts` as the report shows it
(terminal, Markdown, HTML) and as its table files hold it (JSON-ready records, NaN as None)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict

from cancelctl.spec.claim_metric import OUTCOME_KINDS, SCALING_KINDS
from cancelctl.stats.sequential_verdicts import SequentialVerdict
from cancelctl.stats.verdicts import Verdict


# how to read a claims row's p columns and labels: stated under every claims table (`Verdict.shown_p`)
P_RULE = (
    "p and p (Holm) are of the test the row's verdict is about: the contradicting test for 'contradicted' and "
    "'leans against' rows (of the two tests, the one with the smaller p), the predicted direction's test for every "
    "other row; p = twice its one-sided p (capped at 1), p (Holm) its Holm-adjusted value. The labels read off these "
    "two: 'inconclusive after Holm' = p < 0.05 but p (Holm) ≥ 0.05; 'inconclusive (test and 95% CI disagree)' = "
    "p (Holm) < 0.05 but the 95% CI reaches the claim's boundary (the note says)."
)


def verdict_text(v: Verdict) -> str:
    """The verdict cell: 'supported', 'inconclusive, ~12 seeds needed', 'cannot judge: <why>';
    a verdict on arms that are not compute-matched (judged with allow_unmatched) says so in the cell."""
    if v.status == "cannot judge":
        return f"cannot judge: {v.reason}"
    text = _status_text(v)
    return text if v.compute_matched else f"{text} (NOT compute-matched)"


def _status_text(v: Verdict) -> str:
    if v.status != "inconclusive":
        return v.status
    text = "inconclusive" + _why_undecided(v)
    if v.leans_against:  # the evidence points against the claim: more seeds would contradict it
        text += ", leans against"
    if v.seeds_needed is None:
        return text if v.kind in OUTCOME_KINDS else f"{text} (no usable effect to power)"
    return f"{text}; ~{v.seeds_needed} seeds needed" if text != "inconclusive" else f"{text}, ~{v.seeds_needed} seeds needed"


def _why_undecided(v: Verdict) -> str:
    """Why a row whose own test decides is inconclusive, read off the p and Holm p the row shows
    (`Verdict.shown_p`): its p is below α but not after Holm across the report's claims (its 95% CI
    then lies on one side: its own test's, not the family's), or its test rejects after Holm but its
    95% interval reaches the boundary (a time-to-collapse claim; the note says)."""
    p, holm = v.shown_p
    if math.isfinite(holm) and holm < v.alpha:
        return " (test and 95% CI disagree)"
    if math.isfinite(p) and p < v.alpha:
        return " after Holm"
    return ""


def predicted_text(v: Verdict) -> str:
    """What the claim predicts for arm − versus, with its margin: 'lower', 'similar (±0.05)'."""
    words = {"not_higher": "not higher", "not_lower": "not lower", "similar": "similar"}
    if v.direction not in words:
        return v.direction
    bound = "±" if v.direction == "similar" else ""
    return f"{words[v.direction]} ({bound}{_num(v.margin)})" if math.isfinite(v.margin) else words[v.direction]


def _num(x: float | None, signed: bool = False) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:+.3g}" if signed else f"{x:.3g}"


def _p_text(p: float, alpha: float) -> str:
    """p to 3 decimals, or as many more as keep it on its side of α (0.04996 is "0.04996", never "0.050"
    beside a verdict that it decided)."""
    if not math.isfinite(p):
        return "—"
    if p < 0.001:
        return "<0.001"
    for decimals in range(3, 9):
        text = f"{p:.{decimals}f}"
        if (float(text) < alpha) == (p < alpha):
            return text
    return text


def claim_columns(v: Verdict) -> dict[str, str]:
    """The columns that say which claim a row is: id, source, group, the arms, metric, prediction."""
    return {
        "claim": v.claim_id,
        "source": v.source,
        "group": v.group,
        "arm vs versus": f"{v.arm} vs {v.versus}" if v.versus else f"{v.arm} (within runs)",
        "metric": v.metric,
        "predicted": predicted_text(v),
    }


def verdict_rows(verdicts: Sequence[Verdict]) -> list[dict[str, str]]:
    """One display row per verdict (terminal / Markdown / HTML): the claim, where, what was
    predicted, the verdict, the effect arm − versus with its 95% CI, the claim p and its Holm-adjusted
    value of the test the verdict is about (`Verdict.shown_p`, the rule `P_RULE` states), n seeds."""
    rows = []
    for v in verdicts:
        p, holm = v.shown_p
        rows.append({
            **claim_columns(v),
            "verdict": verdict_text(v),
            "effect [95% CI]": _effect_text(v),
            "p": _p_text(p, v.alpha),
            "p (Holm)": _p_text(holm, v.alpha),
            "n": _n_text(v),
        })
    return rows


def _effect_text(v: Verdict) -> str:
    """arm − versus with its interval, signed; an alert order's share (of the collapsing runs) unsigned."""
    if not math.isfinite(v.effect):
        return "—"
    signed = v.kind != "alert_order"
    return f"{_num(v.effect, signed)} [{_num(v.ci_lo, signed)}, {_num(v.ci_hi, signed)}]"


def _n_text(v: Verdict) -> str:
    """Shared seeds of a paired claim; runs of each arm ("4+4") of an unpaired outcome claim; the
    collapsing runs an alert order was read in."""
    return str(v.n_seeds) if v.n_versus is None else f"{v.n_seeds}+{v.n_versus}"


def claims_notes(verdicts: Sequence[Verdict]) -> list[str]:
    """The table's notes: how to read it, which test each kind of claim used, then one line per claim
    (and group) saying what it did with runs a monitor rule stopped or another rule cut short."""
    notes = [(
        "effect = arm − versus, 95% CI (paired claims: Student's t over shared seeds, mean ± t(0.975, n−1)·sd/√n; "
        "outcome claims: over runs, as named below). Each row has two one-sided tests, each at the level of one tail "
        "of its 95% CI: the predicted direction's, which supports the claim, and the contradicting one's (paired "
        "claims: the paired t-test against 0 or the margin, the interval's own test: p < 0.05 exactly when the 95% CI "
        "lies wholly on that side). " + P_RULE + " Holm adjusts each test's p across every claim of this report. "
        "'inconclusive, ~N seeds needed' = seeds (runs an arm) for 80% power at the observed effect."
    )]
    kinds = {v.kind for v in verdicts}
    if "collapse_rate" in kinds:
        notes.append("collapse rate: share of runs a monitor rule alerted (or stopped), every run counted; the exact "
                     "unconditional score test of the difference (Suissa–Shuster at 0) and the 95% interval that "
                     "inverts it (Chan–Zhang): the interval excludes 0 exactly when p < 0.05.")
    if "time_to_collapse" in kinds:
        notes.append("time to collapse: steps to the rule's first alert, runs that never collapsed censored at their "
                     "last step; log-rank test (exact permutation with few runs); effect = difference of the mean "
                     "steps to collapse up to the common horizon (Kaplan–Meier area), negative = sooner. The "
                     "log-rank test decides; the interval is another method's, so an inconclusive row's may exclude 0, "
                     "and a decision whose interval reaches 0 is held inconclusive.")
    if kinds & set(SCALING_KINDS):
        notes.append("asymptote / efficiency: A / B of ScaleRL's curve R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B) "
                     "fitted to each run's curve against its cumulative compute (the earliest 10% left out; see the "
                     "compute-scaling table), compared paired over seeds like any curve claim.")
    if any(v.axis for v in verdicts):
        notes.append("trend claims (along an axis): effect = least-squares slope of arm − versus along the axis (per "
                     "unit of its value, or per doubling on scale log), one slope per seed paired at every axis value, "
                     "tested over seeds like a paired effect; the effect at each value is in the claim's note.")
    if "alert_order" in kinds:
        notes.append("alert order: among the runs that collapsed, the share in which the first rule alerted before "
                     "the collapse; exact binomial (sign) test against 1/2, Clopper–Pearson interval.")
    for v in verdicts:
        if v.notes:
            where = f" ({v.group})" if v.group else ""
            notes.append(f"{v.claim_id}{where}: {v.notes}")
    return notes


def verdicts_as_records(verdicts: Sequence[Verdict]) -> list[dict]:
    """JSON-ready dicts holding every number (NaN as None) plus the verdict text."""
    records = []
    for v in verdicts:
        record = {k: (None if isinstance(val, float) and not math.isfinite(val) else val) for k, val in asdict(v).items()}
        record["verdict"] = verdict_text(v)
        records.append(record)
    return records


# ---------------------------------------------------------------- a sweep run until decided


def sequential_verdict_text(row: SequentialVerdict) -> str:
    """The verdict cell of a sweep run until decided: the decision, no fixed-design seed plan."""
    v = row.verdict
    if v.status == "cannot judge":
        return f"cannot judge: {v.reason}"
    text = v.status
    if v.status == "inconclusive" and v.leans_against:
        text = "inconclusive, leans against"
    return text if v.compute_matched else f"{text} (NOT compute-matched)"


def decided_text(row: SequentialVerdict, budget_spent: bool) -> str:
    """'look 3', 'look 4 (judged once)' for an outcome claim, 'no (seed budget spent)'."""
    if row.verdict.status == "cannot judge":
        return "—"
    if row.decided_at is not None:
        return f"look {row.decided_at}" + ("" if row.sequential else " (judged once)")
    return "no (seed budget spent)" if budget_spent else "no"


def sequential_rows(rows: Sequence[SequentialVerdict], budget_spent: Sequence[bool]) -> list[dict[str, str]]:
    """One display row per claim row of a sweep run until decided: the claim, its decision, the look
    that decided it, the looks and seeds it took, the effect at that look, the anytime-valid p
    (1/E; an outcome claim's: its exact test's) and its Bonferroni adjustment (m p), and the test."""
    out = []
    for row, spent in zip(rows, budget_spent):
        v = row.verdict
        p, adjusted = v.shown_p
        out.append({
            **claim_columns(v),
            "verdict": sequential_verdict_text(row),
            "decided": decided_text(row, spent),
            "looks": str(row.looks),
            "seeds": _n_text(v),
            "effect [95% CI]": _effect_text(v),
            "p": _p_text(p, v.alpha),
            "p (Bonferroni)": _p_text(adjusted, v.alpha),
            "test": v.test if row.sequential else f"{v.test} (last look)",
        })
    return out


def sequential_notes(rows: Sequence[SequentialVerdict], looks: int, seeds_per_look: str, batch: int,
                     max_seeds: int, alpha: float) -> list[str]:
    """How to read the table of a sweep run until decided; then each claim's own notes."""
    m = max(1, len(rows))
    notes = [
        f"run until decided: {looks} look(s) ({seeds_per_look}), {batch} seed(s) a round, at most {max_seeds} an arm. "
        f"Every paired claim is judged at every look by the safe t-test's e-process E on its per-seed differences "
        f"(right-Haar prior on the scale, half-normal on the standardized effect; Pérez-Ortiz, Lardy, de Heide & "
        f"Grünwald 2024, Ann. Statist.) and decided at the first look where E reaches m/α = {m}/{alpha:g} "
        f"(Bonferroni over the {m} rows): anytime-valid, however many looks were taken.",
        "decided = the look that decided the row; looks = the looks at which its seeds grew, up to it; seeds = shared "
        "seeds there; effect and its 95% CI at that look (paired claims: Student's t over shared seeds, mean ± "
        "t(0.975, n−1)·sd/√n; the last look when undecided; the interval is not anytime-valid, but an e-value that "
        "decides lies beyond its t: a decided row's interval agrees with it); p = 1/E (anytime-valid, E's running "
        "maximum), p (Bonferroni) = m/E, of the e-process the verdict is about: the one against the claim for "
        "'contradicted' and 'leans against' rows (of the two, the one with the smaller p), the one for it otherwise.",
    ]
    if any(not row.sequential and row.verdict.judged for row in rows):
        notes.append("outcome claims (collapse rate, time to collapse, alert order) are unpaired: judged once, at the "
                     "last look, by their own test at α/m (p twice its one-sided p, p (Bonferroni) m·p; held to its 95% "
                     "CI); that look's seeds were chosen by the paired claims.")
    for row in rows:
        if row.verdict.notes:
            where = f" ({row.verdict.group})" if row.verdict.group else ""
            notes.append(f"{row.verdict.claim_id}{where}: {row.verdict.notes}")
    return notes


def sequential_records(rows: Sequence[SequentialVerdict]) -> list[dict]:
    """JSON-ready dicts: every number of the verdict, the decision's look, looks, e-values and level."""
    records = verdicts_as_records([row.verdict for row in rows])
    for record, row in zip(records, rows):
        record.update(verdict=sequential_verdict_text(row), decided_at=row.decided_at, looks=row.looks,
                      e_for=row.e_for, e_against=row.e_against, level=row.level, sequential=row.sequential)
    return records
