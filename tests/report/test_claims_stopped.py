"""Claims on a stand-in sweep where a monitor rule stopped one arm in most seeds (fake run folders with
the monitor's alerts.jsonl / stopped.json, fixed metric frames, no training): the report judges the
claims from every run, stopped ones included, and says per claim what it did with them — the runs
that show the effect are not the ones the claims lose."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from report_frames import report_for
from rich.console import Console

from cancelctl.fileio import atomic_write_json
from cancelctl.jobs.monitor import ALERTS_JSONL, STOPPED_JSON, Alert
from cancelctl.report.alerts import read_sweep_alerts
from cancelctl.spec.claims import ClaimSpec
from cancelctl.workdir import sweep_paths

SWEEP = "stand-in"
STEPS = 100
SEEDS = range(6)
STOPPED_AT = {0: 40, 1: 48, 2: 55, 3: 62, 5: 80}  # delta-0's seeds the entropy rule stopped (5 of 6)
EVAL_KEY = "val-core/lab/acc/mean_at_4"

CLAIMS = [ClaimSpec.model_validate({"source": "[H]", "statement": "s", **c}) for c in (
    {"id": "growth", "metric": {"kind": "slope", "key": "mismatch/rho_std"}, "direction": "higher",
     "arm": "delta-0", "versus": "gspo"},
    {"id": "final", "metric": {"kind": "final"}, "direction": "lower", "arm": "delta-0", "versus": "gspo"},
    {"id": "collapse", "metric": {"kind": "collapse_rate", "rule": "entropy_collapse"}, "direction": "higher",
     "arm": "delta-0", "versus": "sigma"},
    {"id": "time", "metric": {"kind": "time_to_collapse", "rule": "entropy_collapse"}, "direction": "lower",
     "arm": "delta-0", "versus": "sigma"},
    {"id": "order", "metric": {"kind": "alert_order", "rule": "entropy_collapse", "first": "mismatch_growth"},
     "direction": "higher", "arm": ["delta-0", "sigma"]},
)]


def stand_in(workdir):
    """3 arms × 6 seeds × 100 steps as collect returns them; delta-0's mismatch grows 4× faster and its
    entropy collapses, and in the run folders the monitor warned (mismatch_growth) and then stopped
    (entropy_collapse) 5 of its 6 runs, whose points end at the stop."""
    rng = np.random.default_rng(0)
    runs, rows = [], []
    for arm in ("gspo", "delta-0", "sigma"):
        for seed in SEEDS:
            run_id, name = f"{arm}-{seed}".replace(".", ""), f"{arm}-s{seed}"
            stop = STOPPED_AT.get(seed) if arm == "delta-0" else None
            end = stop or STEPS
            runs.append({"run_id": run_id, "name": name, "arm": arm, "group": "", "seed": seed, "G": 4,
                         "state": "FINISHED", "budget_steps": STEPS})
            steps = np.arange(1, end + 1)
            growth = 0.002 if arm == "delta-0" else 0.0005
            series = {
                "critic/score/mean": 0.3 + 0.002 * steps + rng.normal(0, 0.01, end),
                "actor/entropy": (0.2 if arm == "delta-0" else 1.0) * np.ones(end),
                "mismatch/rho_std": 0.005 + growth * steps + rng.normal(0, 0.002, end),
                "compute/gen_tokens_cum": 1_000.0 * steps,
                "compute/update_steps_cum": 4.0 * steps,
            }
            for key, values in series.items():
                rows += [(run_id, int(s), key, float(v)) for s, v in zip(steps, values)]
            rows += [(run_id, s, EVAL_KEY, 0.5 + 0.001 * s + rng.normal(0, 0.01)) for s in range(10, end + 1, 10)]
            folder = sweep_paths(workdir, SWEEP).runs_dir / f"{name}__{run_id}"
            folder.mkdir(parents=True)
            atomic_write_json(folder / "run.json", {"run_id": run_id, "name": name,
                                                    "run": {"run_id": run_id, "name": name, "arm": arm, "seed": seed}})
            atomic_write_json(folder / "result.json", {"metrics": {}})
            if stop is not None:
                warn = Alert("mismatch_growth", stop - 15, "mismatch/rho_std", 0.1, 0.05, "warn", "grew")
                halt = Alert("entropy_collapse", stop, "actor/entropy", 0.005, 0.01, "stop", "collapsed")
                (folder / ALERTS_JSONL).write_text("".join(json.dumps(a.to_json()) + "\n" for a in (warn, halt)))
                atomic_write_json(folder / STOPPED_JSON, halt.to_json())
    return pd.DataFrame(runs), pd.DataFrame(rows, columns=["run_id", "step", "key", "value"])


@pytest.fixture(scope="module")
def stopped_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("stopped")
    runs, metrics = stand_in(root / "work")
    alerts = read_sweep_alerts(root / "work", SWEEP)
    assert len(alerts.stops) == len(STOPPED_AT)
    console = Console(record=True, width=240)
    report = report_for(root, runs, metrics, claims=CLAIMS, alerts=alerts, plots=False, console=console, sweep=SWEEP)
    report.console_text = console.export_text()
    return report


def verdicts(report) -> pd.DataFrame:
    return report.table("claims").data.set_index("claim_id")


def test_curve_claims_use_the_stopped_runs_up_to_their_stop(stopped_report):
    growth = verdicts(stopped_report).loc["growth"]
    assert growth["n_seeds"] == 6  # 1 without the stopped runs: "cannot judge: 1 shared seed(s)"
    assert growth["status"] == "supported" and growth["effect"] > 0.001
    assert "5 of 6 run(s) of 'delta-0' stopped by a monitor rule, used up to the stop" in growth["notes"]
    assert "seed 0 (entropy_collapse at step 40)" in growth["notes"]


def test_a_metric_a_stopped_run_cannot_have_is_said_per_claim_with_the_count(stopped_report):
    final = verdicts(stopped_report).loc["final"]
    assert final["status"] == "cannot judge" and final["n_seeds"] == 1
    assert final["reason"] == "1 shared seed(s); need ≥ 4; 5 stopped run(s) have no final value"
    assert "5 of 6 run(s) of 'delta-0' stopped by a monitor rule have no final value" in final["notes"]
    notes = stopped_report.table("claims").notes
    assert any(n.startswith("final: 5 of 6 run(s) of 'delta-0'") for n in notes)
    markdown = (stopped_report.out_dir / "report.md").read_text()
    assert "cannot judge: 1 shared seed(s); need ≥ 4; 5 stopped run(s) have no final value" in markdown
    assert "- final: 5 of 6 run(s) of 'delta-0' stopped" in markdown and "Claims" in stopped_report.console_text


def test_the_collapse_claims_are_judged_from_every_run(stopped_report):
    table = verdicts(stopped_report)
    collapse, time, order = table.loc["collapse"], table.loc["time"], table.loc["order"]
    assert collapse["status"] == "supported" and collapse["test"] == "exact score (unconditional)"
    assert (collapse["n_seeds"], collapse["n_versus"], collapse["effect"]) == (6, 6, pytest.approx(5 / 6))
    assert collapse["p_holm"] < 0.05
    assert time["status"] != "cannot judge" and time["test"] == "log-rank (exact permutation)"
    assert time["effect"] < -20 and time["p"] < 0.05  # delta-0 collapses sooner, in steps
    # 5 of 5 in order: its claim p (2/2⁵) cannot reach 0.05, nor its 95% interval leave out 1/2
    assert order["status"] == "cannot judge" and order["effect"] == 1.0 and order["n_seeds"] == 5
    assert "needs ≥ 6" in order["reason"] and "5 of 12 run(s) collapsed" in order["notes"]
    display = stopped_report.table("claims").display.set_index("claim")
    assert display.loc["collapse", "n"] == "6+6" and display.loc["order", "arm vs versus"] == "delta-0, sigma (within runs)"
    assert "5/6 vs 0/6" in display.loc["collapse", "metric"]


def test_holm_counts_the_outcome_claims(stopped_report):
    table = verdicts(stopped_report)
    judged = table[table["status"] != "cannot judge"]
    assert len(judged) == 3
    smallest = judged["p"].min()
    assert judged.loc[judged["p"] == smallest, "p_holm"].iloc[0] == pytest.approx(min(1.0, 3 * smallest))


def test_the_compute_matched_tables_still_leave_the_stopped_runs_out_and_say_so(stopped_report):
    assert any("5 run(s) stopped by a monitor rule are left out of the compute-matched tables" in n
               and "The claims use every run" in n for n in stopped_report.notes)
    finals = stopped_report.table("final_scores")
    assert finals.data.set_index("arm").loc["delta-0", "n_seeds"] == 1
    assert any("without the 5 run(s) a monitor rule stopped" in n for n in finals.notes)
    assert not any("without the" in n for n in stopped_report.table("claims").notes)


def test_include_stopped_brings_them_into_the_tables_and_leaves_the_claims_as_they_were(tmp_path, stopped_report):
    runs, metrics = stand_in(tmp_path / "work")
    alerts = read_sweep_alerts(tmp_path / "work", SWEEP)
    included = report_for(tmp_path, runs, metrics, claims=CLAIMS, alerts=alerts, plots=False, include_stopped=True,
                          allow_unmatched=True)
    assert included.table("final_scores").data.set_index("arm").loc["delta-0", "n_seeds"] == 6
    columns = ["status", "n_seeds", "effect"]
    pd.testing.assert_frame_equal(verdicts(included)[columns], verdicts(stopped_report)[columns])


def test_a_stopped_run_too_short_for_its_metric_is_left_out_with_the_count(tmp_path):
    runs, metrics = stand_in(tmp_path / "work")
    alerts = read_sweep_alerts(tmp_path / "work", SWEEP)
    # seed 0 of delta-0 logged one point of mismatch/rho_std before its stop: no slope
    cut = (metrics["run_id"] == "delta-0-0") & (metrics["key"] == "mismatch/rho_std") & (metrics["step"] > 1)
    report = report_for(tmp_path, runs, metrics.loc[~cut], claims=CLAIMS[:1], alerts=alerts, plots=False)
    growth = verdicts(report).loc["growth"]
    assert growth["n_seeds"] == 5 and growth["status"] != "cannot judge"
    assert "1 of them stopped too early for a slope value of mismatch/rho_std" in growth["notes"]


def test_steps_logged_after_the_monitor_stop_are_not_the_runs(tmp_path, stopped_report):
    """verl trains a few steps past the stop before the job's SIGTERM reaches it: steps 41-46 of a run
    the rule stopped at step 40, already in its metrics.jsonl, are rejected and named, and the claims
    read as without them."""
    runs, metrics = stand_in(tmp_path / "work")
    alerts = read_sweep_alerts(tmp_path / "work", SWEEP)
    late = [("delta-0-0", s, key, 9.0) for s in range(41, 47) for key in ("mismatch/rho_std", "actor/entropy")]
    metrics = pd.concat([metrics, pd.DataFrame(late, columns=metrics.columns)], ignore_index=True)
    report = report_for(tmp_path, runs, metrics, claims=CLAIMS, alerts=alerts, plots=False, sweep=SWEEP)
    rejected = report.table("rejected_points").data
    assert {(r.name, r.key, r.reason, r.points) for r in rejected.itertuples()} == {
        ("delta-0-s0", key, "after the monitor stop at step 40 (entropy_collapse)", 6)
        for key in ("mismatch/rho_std", "actor/entropy")}
    columns = ["status", "n_seeds", "effect"]
    pd.testing.assert_frame_equal(verdicts(report)[columns], verdicts(stopped_report)[columns])
