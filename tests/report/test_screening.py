"""Points a report cannot trust (cancelctl.report.screening) on a synthetic sweep whose runs know
their budget: non-finite values and out-of-budget steps rejected and named, finished runs whose
points end early named and left out (or said to be in)."""

from __future__ import annotations

import math

import pytest
from report_frames import report_for, synthetic_sweep

STEPS = 20
EVAL = "val-core/aime25/acc/mean_at_4"
SHORT_RUN = "grpo-G8-s1"


def budgeted_sweep():
    runs, metrics = synthetic_sweep(steps=STEPS)
    return runs.assign(budget_steps=STEPS), metrics


def final_mean(report, arm: str, group: str = "rollout.G=8") -> float:
    data = report.table("final_scores").data
    return float(data[(data["arm"] == arm) & (data["group"] == group)]["mean"].item())


def test_non_finite_and_out_of_budget_points_are_rejected_and_named(tmp_path):
    runs, metrics = budgeted_sweep()
    clean = report_for(tmp_path / "clean", runs, metrics, plots=False)
    at = (metrics["run_id"] == "dfpo-G8-s0") & (metrics["key"] == "critic/score/mean") & (metrics["step"] == 5)
    metrics.loc[at, "value"] = math.nan
    at = (metrics["run_id"] == "dfpo-G8-s1") & (metrics["key"] == "compute/gen_tokens_cum") & (metrics["step"] == 3)
    metrics.loc[at, "value"] = math.inf
    beyond = metrics[(metrics["run_id"] == "dfpo-G8-s2") & (metrics["key"] == EVAL) & (metrics["step"] == STEPS)]
    metrics.loc[len(metrics)] = ["dfpo-G8-s2", STEPS + 7, EVAL, 0.99]  # a step the run's budget never had
    assert not beyond.empty

    report = report_for(tmp_path / "bad", runs, metrics, plots=False)
    rejected = report.table("rejected_points").data
    rows = {(r.name, r.key, r.reason, r.steps) for r in rejected.itertuples()}
    assert rows == {
        ("dfpo-G8-s0", "critic/score/mean", "value NaN", "5"),
        ("dfpo-G8-s1", "compute/gen_tokens_cum", "value +inf", "3"),
        ("dfpo-G8-s2", EVAL, f"step beyond the budget of {STEPS} steps", str(STEPS + 7)),
    }
    assert any("3 point(s) rejected" in note for note in report.notes)
    assert final_mean(report, "dfpo") == pytest.approx(final_mean(clean, "dfpo"))  # 0.99 never averaged
    markdown = (report.out_dir / "report.md").read_text()
    assert "## Rejected points" in markdown and "value NaN" in markdown


def test_a_clean_sweep_has_no_rejected_points_table(tmp_path):
    runs, metrics = budgeted_sweep()
    report = report_for(tmp_path, runs, metrics, plots=False)
    assert "rejected_points" not in {t.name for t in report.tables}


def cut_short(metrics, run_id: str, last_step: int):
    """A run whose folder was deleted mid-run: its points after `last_step` reached neither copy."""
    return metrics[(metrics["run_id"] != run_id) | (metrics["step"] <= last_step)].reset_index(drop=True)


def test_a_finished_run_whose_points_end_early_is_named_and_left_out(tmp_path):
    runs, metrics = budgeted_sweep()
    metrics = cut_short(metrics, SHORT_RUN, 4)

    report = report_for(tmp_path, runs, metrics, plots=False)  # matched once the short run is out
    assert report.compute_matched
    compute = report.table("compute_match").data.set_index(["group", "arm"])
    assert compute.loc[("rollout.G=8", "grpo"), "n_runs"] == 2
    assert compute.loc[("rollout.G=8", "grpo"), "update_steps_min"] == 2 * STEPS
    note = next(n for n in report.notes if "end before their budget" in n)
    assert f"{SHORT_RUN} (last step 4 of {STEPS})" in note and "left out" in note


def test_include_unfinished_keeps_a_short_run_and_says_so(tmp_path):
    runs, metrics = budgeted_sweep()
    metrics = cut_short(metrics, SHORT_RUN, 4)
    report = report_for(tmp_path, runs, metrics, plots=False, include_unfinished=True, allow_unmatched=True)
    note = next(n for n in report.notes if "end before their budget" in n)
    assert "are included" in note and SHORT_RUN in note
    assert not report.compute_matched  # its 8 update steps vs 40: the tables say the group is not matched
    compute = report.table("compute_match").data.set_index(["group", "arm"])
    assert compute.loc[("rollout.G=8", "grpo"), "update_steps_min"] == 8


def test_a_run_without_a_known_budget_is_not_judged_short(tmp_path):
    runs, metrics = synthetic_sweep(steps=STEPS)  # no budget_steps column (frames from elsewhere)
    metrics = cut_short(metrics, SHORT_RUN, 4)
    report = report_for(tmp_path, runs, metrics, plots=False, allow_unmatched=True)
    assert not any("end before their budget" in n for n in report.notes)


def test_no_report_left_once_short_runs_are_out_names_them(tmp_path):
    from cancelctl.report.screening import ShortRunsError

    runs, metrics = budgeted_sweep()
    for run_id in runs.loc[runs["arm"] == "gspo", "run_id"]:
        metrics = cut_short(metrics, run_id, 4)
    with pytest.raises(ShortRunsError) as caught:
        report_for(tmp_path, runs, metrics, plots=False)
    message = str(caught.value)
    assert "baseline arm 'gspo' has no runs to report" in message and "gspo-G4-s0 (last step 4 of 20)" in message
    assert caught.value.exit_code == 2


def token_budget_sweep():
    """Every run on a token budget (20 steps' tokens); dfpo reaches it doing half the update steps."""
    runs, metrics = synthetic_sweep(steps=STEPS)
    budgets = {run_id: 16 * g * 100 * STEPS for run_id, g in zip(runs["run_id"], runs["G"], strict=True)}
    runs = runs.assign(budget_axis="gen_tokens", budget_amount=runs["run_id"].map(budgets))
    fewer = metrics["run_id"].str.startswith("dfpo") & (metrics["key"] == "compute/update_steps_cum")
    metrics.loc[fewer, "value"] = metrics.loc[fewer, "value"] / 2
    return runs, metrics


def test_a_token_budget_sweep_is_matched_on_tokens_and_a_run_short_of_its_tokens_is_named(tmp_path):
    runs, metrics = token_budget_sweep()
    report = report_for(tmp_path / "whole", runs, metrics, plots=False)
    assert report.compute_matched  # dfpo's fewer update steps are not a mismatch on a token budget
    assert any("on a generated-token budget" in n and "not compared" in n for n in report.table("compute_match").notes)
    report = report_for(tmp_path / "short", runs, cut_short(metrics, SHORT_RUN, 4), plots=False)
    note = next(n for n in report.notes if "end before their budget" in n)
    assert f"{SHORT_RUN} (compute/gen_tokens_cum 51,200 of 256,000)" in note and "left out" in note


def compute_budget_sweep(axis: str):
    """Every run on a compute budget it reaches at its last step (STEPS): gen_tokens or update_steps."""
    runs, metrics = synthetic_sweep(steps=STEPS)
    per_step = {"gen_tokens": runs["G"] * 16 * 100, "update_steps": runs["G"] * 0 + 2}[axis]
    return runs.assign(budget_axis=axis, budget_amount=per_step * STEPS), metrics


@pytest.mark.parametrize("axis", ["gen_tokens", "update_steps"])
def test_a_point_past_the_step_that_spent_a_compute_budget_is_rejected_not_the_final_score(tmp_path, axis):
    """A compute budget ends the run at the step whose cumulative compute reaches it (step 20 here):
    a point far past it in metrics.jsonl is not the run's and never its final score."""
    runs, metrics = compute_budget_sweep(axis)
    clean = report_for(tmp_path / "clean", runs, metrics, plots=False)
    metrics.loc[len(metrics)] = ["dfpo-G8-s2", 9_999, EVAL, 0.99]
    metrics.loc[len(metrics)] = ["dfpo-G8-s2", 9_999, f"compute/{axis}_cum", 1e12]  # compute logged with it too

    report = report_for(tmp_path / "bad", runs, metrics, plots=False)
    rejected = report.table("rejected_points").data
    amount = runs.set_index("run_id").loc["dfpo-G8-s2", "budget_amount"]
    reason = f"step beyond the run's end ({axis} budget {amount:,.0f} reached at step {STEPS})"
    assert {(r.name, r.key, r.reason, r.steps) for r in rejected.itertuples()} == {
        ("dfpo-G8-s2", EVAL, reason, "9999"), ("dfpo-G8-s2", f"compute/{axis}_cum", reason, "9999")}
    assert final_mean(report, "dfpo") == pytest.approx(final_mean(clean, "dfpo"))  # 0.99 never averaged
