"""The claims table of a sweep run until decided: every claim judged at every recorded look by the
e-process, with the look that decided it, its looks and seeds, and the test — on the synthetic sweep
(dfpo's high-frequency energy share 0.15 vs gspo's 0.30 in every seed: all differences equal)."""

from __future__ import annotations

import math

from report_frames import report_for, synthetic_sweep
from test_claims_table import CLAIMS

from cancelctl.seed_rounds import SeedRounds
from cancelctl.stats.sequential import max_e_value

G4, G8 = "rollout.G=4", "rollout.G=8"
# look 1: seeds 0–3 everywhere; looks 2 and 3 add seeds to dfpo and gspo at G=4 only
ROUNDS = SeedRounds("synthetic", [0, 1, 2, 3], 2, 8, 0.05, [
    {("dfpo", G4): [4, 5], ("gspo", G4): [4, 5]},
    {("dfpo", G4): [6, 7], ("gspo", G4): [6, 7]},
])


def test_each_claim_is_decided_at_the_look_its_e_value_crosses(tmp_path):
    runs, metrics = synthetic_sweep(seeds=tuple(range(8)))
    report = report_for(tmp_path, runs, metrics, claims=CLAIMS, seed_rounds=ROUNDS)
    table = report.table("claims")
    assert table.title == "Claims (run until decided)"
    data = table.data.set_index(["claim_id", "group"])
    # 6 rows: the bar is 6/0.05 = 120 — not reachable at 4 seeds (E ≤ 54), reached at 6 (E ≤ 1219)
    assert max_e_value(4) < 120 < max_e_value(6)
    energy = data.loc[("energy", G4)]
    assert (energy["status"], energy["decided_at"], energy["looks"], energy["n_seeds"]) == ("supported", 2, 2, 6)
    assert energy["test"] == "safe t-test (e-process)" and energy["level"] == 0.05 / 6
    assert data.loc[("energy-wrong", G4), "status"] == "contradicted"
    at_g8 = data.loc[("energy", G8)]  # G=8 never got seeds beyond look 1
    assert (at_g8["status"], at_g8["looks"], at_g8["n_seeds"]) == ("inconclusive", 1, 4)
    assert at_g8["decided_at"] is None or math.isnan(at_g8["decided_at"])
    assert "not logged" in data.loc[("dispersion", G4), "verdict"]
    shown = table.display.set_index(["claim", "group"])
    assert shown.loc[("energy", G4), "decided"] == "look 2" and shown.loc[("energy", G4), "seeds"] == "6"
    assert shown.loc[("energy", G8), "decided"] == "no" and shown.loc[("dispersion", G4), "decided"] == "—"
    assert shown.loc[("energy", G4), "p"] == "<0.001" and energy["p"] == 1 / max_e_value(6)  # 1/1219
    assert "look 1: seeds 0–3; look 2: +4, 5 (2 arm(s)); look 3: +6, 7 (2 arm(s))" in table.notes[0]
    assert "m/α = 6/0.05" in table.notes[0]
    # one interval everywhere, named under the table: Student's t, as every other table (it said "bootstrap")
    assert "95% CI at that look (paired claims: Student's t over shared seeds" in table.notes[1]
    assert not any("bootstrap" in note for note in table.notes)
    assert "Claims (run until decided)" in (tmp_path / "synthetic" / "report.md").read_text()


def test_budget_spent_is_said_where_an_arm_reached_max_seeds(tmp_path):
    runs, metrics = synthetic_sweep(seeds=tuple(range(8)))
    capped = SeedRounds("synthetic", [0, 1, 2, 3], 2, 4, 0.05, [])  # the file's 4 seeds are the budget
    shown = report_for(tmp_path, runs, metrics, claims=CLAIMS, seed_rounds=capped).table("claims").display
    assert set(shown.loc[shown["claim"] == "energy", "decided"]) == {"no (seed budget spent)"}


def test_without_rounds_the_claims_table_is_the_fixed_n_one(tmp_path):
    runs, metrics = synthetic_sweep(seeds=tuple(range(8)))
    table = report_for(tmp_path, runs, metrics, claims=CLAIMS).table("claims")
    assert table.title == "Claims" and "decided" not in table.display.columns
    assert set(table.data["test"]) == {"paired t"}



def test_a_round_being_submitted_is_not_a_spent_budget():
    """`sweep --until-decided` judges look 1, records look 2 (reaching --max-seeds) and submits it:
    look 1's undecided rows are not "decided no (seed budget spent)" while that round runs (once,
    `budget_spent` read the new look's seeds beside the old look's verdicts)."""
    from cancelctl.report.sequential_claims import budget_spent
    from cancelctl.stats.sequential_verdicts import judge_looks
    from cancelctl.stats.verdicts import judge_claims

    runs, metrics = synthetic_sweep(seeds=tuple(range(8)))
    rows = judge_looks([judge_claims(CLAIMS, runs[runs["seed"] < 4], metrics)])  # look 1, as the sweep judged it
    [energy] = [r for r in rows if (r.verdict.claim_id, r.verdict.group) == ("energy", G8)]
    assert energy.decided_at is None
    recorded = SeedRounds("synthetic", [0, 1, 2, 3], 2, 6, 0.05, [{("dfpo", G8): [4, 5], ("gspo", G8): [4, 5]}])
    assert not any(budget_spent(rows, recorded))  # look 1 had 4 of 6 seeds; look 2 is on its way
    at_look_2 = judge_looks([judge_claims(CLAIMS, runs[runs["seed"] < n], metrics) for n in (4, 6)])
    spent = dict(zip([(r.verdict.claim_id, r.verdict.group) for r in at_look_2], budget_spent(at_look_2, recorded)))
    # judged at look 2: undecided rows at G=8 have spent it (6 of 6 seeds), at G=4 not (4 of 6)
    assert spent[("dispersion", G8)] is True and spent[("dispersion", G4)] is False
