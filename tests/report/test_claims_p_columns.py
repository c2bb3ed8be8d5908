"""A claims row's p and Holm p are those of the test its verdict is about (`Verdict.shown_p`), and
every label of the row reads off them: 'after Holm' is p < α ≤ Holm p, 'leans against' shows the
contradicting test, a decided row's Holm p is below α. The rule is said under every rendering."""

from __future__ import annotations

import html
from dataclasses import replace

import numpy as np
import pytest
from report_frames import report_for
from rich.console import Console
from test_claims_table import CLAIMS

from cancelctl.report.claims import P_RULE, verdict_rows
from cancelctl.report.render_html import render_html
from cancelctl.report.render_markdown import render_markdown
from cancelctl.report.render_terminal import print_report
from cancelctl.stats.evidence import paired_evidence
from cancelctl.stats.options import ComparisonOptions
from cancelctl.stats.verdicts import Verdict, _with_holm

ALPHA = 0.05


def row(**numbers) -> Verdict:
    return Verdict("c", "src", "s", "m", "k", "k", "higher", "a", "b", "", "inconclusive", n_seeds=8, kind="mean",
                   seeds_needed=21, sd=1.0, **numbers)


def test_a_row_leaning_against_shows_the_contradicting_tests_p():
    """The row seen: 'inconclusive after Holm, leans against' beside p 1.000, Holm 1.000 (the predicted
    direction's p), while the label came from the contradicting test (0.030, Holm 0.122)."""
    [shown] = verdict_rows([row(effect=-0.8, ci_lo=-1.5, ci_hi=-0.1, distance=-0.8, p=1.0, p_holm=1.0,
                                p_against=0.030, p_against_holm=0.122)])
    assert shown["verdict"] == "inconclusive after Holm, leans against; ~21 seeds needed"
    assert (shown["p"], shown["p (Holm)"]) == ("0.030", "0.122")
    [toward] = verdict_rows([row(effect=0.8, ci_lo=0.1, ci_hi=1.5, distance=0.8, p=0.030, p_holm=0.122,
                                 p_against=1.0, p_against_holm=1.0)])
    assert toward["verdict"] == "inconclusive after Holm; ~21 seeds needed"
    assert (toward["p"], toward["p (Holm)"]) == ("0.030", "0.122")


def label_problems(v: Verdict, shown: dict[str, str]) -> list[str]:
    """What in a row's label its own p, Holm p and effect columns do not bear out."""
    text, p, holm = shown["verdict"], float(shown["p"].lstrip("<")), float(shown["p (Holm)"].lstrip("<"))
    problems = []
    if text.startswith(("supported", "contradicted")) and not holm < ALPHA:
        problems.append("decided with Holm p ≥ α")
    if text.startswith("contradicted") or "leans against" in text:
        if not v.distance < 0:
            problems.append("against the claim with the effect on its side")
    if "after Holm" in text and not p < ALPHA <= holm:
        problems.append("'after Holm' without p < α ≤ Holm p")
    if text.startswith("inconclusive") and "after Holm" not in text and "disagree" not in text and p < ALPHA:
        problems.append("plain 'inconclusive' with p < α")
    if text.startswith("inconclusive") and "leans against" not in text and v.distance < 0:
        problems.append("effect against the claim, label silent")
    return problems


@pytest.mark.parametrize("direction", ["higher", "lower", "not_lower", "similar"])
def test_every_label_is_borne_out_by_its_own_rows_numbers(direction):
    """300 rows of random paired effects (some for the claim, some against, most small) judged as one
    report: each row's label checked against the p, Holm p and effect the row itself shows."""
    rng = np.random.default_rng(6)
    rows = []
    for i in range(300):
        n = int(rng.integers(4, 9))
        x, v = rng.normal(rng.normal(0, 0.8), 1.0, n), np.zeros(n)
        ev = paired_evidence(x, v, direction, margin=0.3)
        rows.append(Verdict(f"c{i}", "src", "s", "m", "k", "k", direction, "a", "b", "", "inconclusive", n_seeds=n,
                            kind="mean", effect=ev.effect, ci_lo=ev.ci_lo, ci_hi=ev.ci_hi, sd=ev.sd,
                            distance=ev.distance, p=ev.p_for, p_against=ev.p_against, margin=0.3))
    judged = _with_holm(rows, ComparisonOptions())
    shown = verdict_rows(judged)
    labels = {r["verdict"].split(";")[0].split(", ~")[0] for r in shown}
    assert "inconclusive after Holm, leans against" in labels, labels  # the row seen
    bad = {v.claim_id: label_problems(v, r) for v, r in zip(judged, shown) if label_problems(v, r)}
    assert not bad, bad


def test_the_rule_is_stated_under_the_claims_table_in_every_rendering(tmp_path):
    report = report_for(tmp_path, claims=CLAIMS, plots=False)
    claims = report.table("claims")
    assert any(P_RULE in note for note in claims.notes)
    assert P_RULE in render_markdown(report)
    assert html.escape(P_RULE) in render_html(report)
    console = Console(record=True, width=4000)
    print_report(report, console)
    assert P_RULE in console.export_text()


@pytest.mark.parametrize("p,p_against,distance,against", [
    (0.2, 1.0, 0.5, False), (1.0, 0.2, -0.5, True), (1.0, 1.0, -0.1, True), (1.0, 1.0, 0.0, False),
    (float("nan"), float("nan"), -1.0, True),
])
def test_leans_against_is_the_test_with_the_smaller_p_else_the_effect(p, p_against, distance, against):
    v = replace(row(), p=p, p_against=p_against, distance=distance, p_holm=p, p_against_holm=p_against)
    assert v.leans_against is against
    assert v.shown_p == ((p_against, p_against) if against else (p, p))


def test_a_p_just_below_alpha_is_not_printed_as_alpha():
    """A supported row's Holm p of 0.04996 was printed "0.050" beside "supported"."""
    [shown] = verdict_rows([replace(row(effect=1.7, ci_lo=1.1, ci_hi=2.4, distance=1.7, p=0.0002, p_holm=0.04996,
                                        p_against=1.0, p_against_holm=1.0), status="supported")])
    assert shown["verdict"] == "supported" and shown["p (Holm)"] == "0.04996"
    [above] = verdict_rows([row(distance=0.5, p=0.05004, p_holm=0.3, p_against=1.0, p_against_holm=1.0)])
    assert above["p"] == "0.050" and above["verdict"] == "inconclusive, ~21 seeds needed"  # not below α: as it was
    [plain] = verdict_rows([row(distance=0.5, p=0.0412, p_holm=0.3, p_against=1.0, p_against_holm=1.0)])
    assert plain["p"] == "0.041"
