"""`sweep --until-decided` (`cancelctl.launch.until_decided`): the rounds it plans from the verdicts,
its record on disk, the sweep grown by seeds — and, with the real lab on the debug executor, a run
to the end and one interrupted after it recorded a round, then resumed from what is on disk."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from sweep_files import UNTIL_DECIDED_CLAIMS as CLAIMS, write_sweep

from cancelctl.errors import ArgumentError, SpecError, WorkdirStateError
from cancelctl.jobs.outcome import read_attempts
from cancelctl.launch import until_decided
from cancelctl.launch.until_decided import (
    BUDGET_SPENT,
    DECIDED,
    next_round,
    planned_with_rounds,
    run_until_decided,
)
from cancelctl.report.sweep_report import judge_until_decided
from cancelctl.seed_rounds import SeedRounds, load_seed_rounds, save_seed_rounds
from cancelctl.spec.expand import load_sweep, with_seeds
from cancelctl.stats.sequential_verdicts import SequentialVerdict
from cancelctl.stats.verdicts import Verdict
from cancelctl.workdir import sweep_paths



def _row(claim: str, arm: str, versus: str, n: int, *, decided: int | None = None, group: str = "",
         kind: str = "mean", effect: float = 0.1) -> SequentialVerdict:
    v = Verdict(claim, "src", "s", "metric", "key", "key", "higher", arm, versus, group,
                "supported" if decided else "inconclusive", n_seeds=n, effect=effect, sd=1.0, kind=kind)
    return SequentialVerdict(v, 1, decided, sequential=kind == "mean")


def _rounds(seeds=(0, 1, 2), batch=2, max_seeds=6, rounds=None) -> SeedRounds:
    return SeedRounds("s", list(seeds), batch, max_seeds, 0.05, rounds or [])


def test_a_round_adds_the_next_seeds_to_both_arms_of_every_undecided_claim():
    rows = [_row("a", "dfpo", "gspo", 3), _row("b", "symclip", "grpo", 3, decided=1), _row("c", "dfpo", "dfpo", 3)]
    added, why = next_round(rows, _rounds(), batch=2, max_seeds=6)
    assert added == {("dfpo", ""): [3, 4], ("gspo", ""): [3, 4]} and why == ""
    # decided claims and outcome claims ask for nothing: every paired claim decided
    rows = [_row("a", "dfpo", "gspo", 3, decided=2), _row("o", "dfpo", "gspo", 3, kind="collapse_rate")]
    assert next_round(rows, _rounds(), 2, 6) == ({}, DECIDED)


def test_the_budget_caps_a_round_and_then_ends_the_rounds():
    rounds = _rounds(rounds=[{("dfpo", ""): [3, 4], ("gspo", ""): [3, 4]}])  # 5 seeds each now
    added, _ = next_round([_row("a", "dfpo", "gspo", 5)], rounds, batch=2, max_seeds=6)
    assert added == {("dfpo", ""): [5], ("gspo", ""): [5]}
    full = rounds.with_round(added)
    assert next_round([_row("a", "dfpo", "gspo", 6)], full, batch=2, max_seeds=6) == ({}, BUDGET_SPENT)
    # new seeds continue after every seed in use, whichever arms had them
    assert next_round([_row("z", "grpo", "symclip", 3)], full, 2, 12)[0] == {("grpo", ""): [6, 7], ("symclip", ""): [6, 7]}
    # per comparison group
    grouped = next_round([_row("a", "dfpo", "gspo", 3, group="G=8")], _rounds(), 1, 6)[0]
    assert grouped == {("dfpo", "G=8"): [3], ("gspo", "G=8"): [3]}


def test_the_record_round_trips_and_a_damaged_one_is_refused(tmp_path):
    rounds = _rounds().with_round({("dfpo", "G=8"): [3, 4]}).with_round({("dfpo", "G=8"): [5]})
    path = tmp_path / "seed_rounds.json"
    save_seed_rounds(path, rounds)
    again = load_seed_rounds(path)
    assert again == rounds and again.n_looks == 3
    assert again.seeds_at(1, "dfpo", "G=8") == {0, 1, 2} and again.seeds_at(3, "dfpo", "G=8") == {0, 1, 2, 3, 4, 5}
    assert again.seeds_at(3, "gspo", "G=8") == {0, 1, 2} and again.next_seed() == 6
    assert load_seed_rounds(tmp_path / "none.json") is None
    path.write_text('{"version": 1, "sweep": "s"}')
    with pytest.raises(WorkdirStateError, match="seed_rounds.json: unreadable record"):
        load_seed_rounds(path)


def test_a_sweep_grows_by_seeds_with_their_own_run_ids(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path, "grow", seeds=(0, 1)))
    grown = with_seeds(sweep, {("gspo", ""): [2, 3, 1]})  # seed 1 is there already
    new = grown.runs[len(sweep.runs):]
    assert [(r.arm, r.seed) for r in new] == [("gspo", 2), ("gspo", 3)]
    assert len({r.run_id for r in grown.runs}) == len(grown.runs)
    first = next(r for r in sweep.runs if r.arm == "gspo")
    assert new[0].spec.model_dump(exclude={"seed"}) == first.spec.model_dump(exclude={"seed"}) and new[0].spec.seed == 2
    with pytest.raises(SpecError, match="no arm and group nope"):
        with_seeds(sweep, {("nope", ""): [2]})


def test_arguments_are_checked_before_anything_runs(tmp_path, workdir):
    def judge(_):
        raise AssertionError("nothing should be judged")

    no_claims = load_sweep(write_sweep(tmp_path, "plain", seeds=(0, 1)))
    with pytest.raises(SpecError, match="needs claims"):
        run_until_decided(no_claims, workdir=workdir, judge=judge, max_seeds=4)
    one_seed = load_sweep(write_sweep(tmp_path, "one", seeds=(0,), claims=CLAIMS))
    with pytest.raises(SpecError, match="at least 2 seeds"):
        run_until_decided(one_seed, workdir=workdir, judge=judge, max_seeds=4)
    sweep = load_sweep(write_sweep(tmp_path, "args", seeds=(0, 1, 2), claims=CLAIMS))
    with pytest.raises(ArgumentError, match="below the sweep file's 3 seeds"):
        run_until_decided(sweep, workdir=workdir, judge=judge, max_seeds=2)
    assert not (workdir / "sweeps" / "args").exists()


def _starts(workdir: Path, sweep: str) -> dict[str, int]:
    runs = sweep_paths(workdir, sweep).runs_dir
    return {d.name.split("__")[0]: sum(a["event"] == "start" for a in read_attempts(d)) for d in runs.iterdir()}


def _lab_sweep(tmp_path: Path, name: str):
    return load_sweep(write_sweep(tmp_path, name, seeds=(0, 1, 2), steps=2, claims=CLAIMS, baseline="grpo"))


def _judge(workdir: Path, name: str):
    return lambda rounds: judge_until_decided(workdir, name, rounds)


def test_lab_rounds_run_until_every_claim_is_decided_or_the_budget_is_spent(tmp_path, workdir):
    """3 seeds, 1 more a round, at most 5: "tokens" (E = 13.8 at 3 seeds, 54 at 4: bar 2/0.05 = 40)
    is decided at look 2; "score" never (reward 0 everywhere) and keeps gspo and grpo growing to 5."""
    sweep = _lab_sweep(tmp_path, "until")
    result = run_until_decided(sweep, workdir=workdir, judge=_judge(workdir, sweep.name), max_seeds=5, batch=1,
                               executor="debug")
    assert result.stopped == BUDGET_SPENT and result.exit_code == 0
    assert [len(launch.submitted) for launch in result.launches] == [6, 2, 2]
    assert result.rounds.n_looks == 3 and result.rounds.rounds[-1] == {("gspo", ""): [4], ("grpo", ""): [4]}
    tokens, score = result.verdicts
    assert (tokens.verdict.status, tokens.decided_at, tokens.verdict.n_seeds) == ("supported", 2, 4)
    assert (score.verdict.status, score.decided_at, score.verdict.n_seeds, score.looks) == ("inconclusive", None, 5, 3)
    assert set(_starts(workdir, sweep.name).values()) == {1}  # every run ran once
    # the record is what a later call, a plain sweep and the report start from
    assert load_seed_rounds(sweep_paths(workdir, sweep.name).seed_rounds) == result.rounds
    assert len(planned_with_rounds(sweep, workdir).runs) == 10
    again = run_until_decided(sweep, workdir=workdir, judge=_judge(workdir, sweep.name), max_seeds=5, batch=1,
                              executor="debug")
    assert again.stopped == BUDGET_SPENT and [launch.submitted for launch in again.launches] == [[]]


def test_an_interrupted_until_decided_resumes_from_the_record_and_the_runs_on_disk(tmp_path, workdir, monkeypatch):
    """Killed right after recording round 1 (its runs never submitted): the rerun loads the record,
    submits round 1's runs, judges from the run folders and ends where an uninterrupted call ends;
    no run is run twice."""
    sweep = _lab_sweep(tmp_path, "resume")
    launches = []
    real_launch = until_decided.launch_sweep

    def launch_then_die(*args, **kwargs):
        if launches:  # the second launch: round 1 is recorded, nothing of it submitted
            raise KeyboardInterrupt
        launches.append(1)
        return real_launch(*args, **kwargs)

    monkeypatch.setattr(until_decided, "launch_sweep", launch_then_die)
    with pytest.raises(KeyboardInterrupt):
        run_until_decided(sweep, workdir=workdir, judge=_judge(workdir, sweep.name), max_seeds=4, batch=1,
                          executor="debug")
    record = json.loads(sweep_paths(workdir, sweep.name).seed_rounds.read_text())
    assert len(record["rounds"]) == 1 and len(_starts(workdir, sweep.name)) == 6
    monkeypatch.setattr(until_decided, "launch_sweep", real_launch)

    result = run_until_decided(sweep, workdir=workdir, judge=_judge(workdir, sweep.name), max_seeds=4, batch=1,
                               executor="debug")
    assert result.stopped == BUDGET_SPENT
    assert [len(launch.submitted) for launch in result.launches] == [2]  # round 1's two runs, then the budget
    assert [len(launch.skipped_finished) for launch in result.launches] == [6]
    tokens, score = result.verdicts
    assert tokens.decided_at == 2 and score.verdict.n_seeds == 4 and math.isfinite(score.e_for)
    assert set(_starts(workdir, sweep.name).values()) == {1} and len(_starts(workdir, sweep.name)) == 8
