"""The report's rliable comparisons on synthetic sweeps with planted effects: P(arm > baseline) and its
interval per group × benchmark, the IQM from 4 runs, the performance profiles (runs pooled over
benchmarks) and the intervals of accuracies kept inside [0, 1]."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from report_frames import report_for, synthetic_sweep
from scipy import stats

from cancelctl.stats.improvement import improvement_interval

ACC = "val-core/aime25/acc/mean_at_4"


def last_scores(metrics: pd.DataFrame, key: str, prefix: str) -> np.ndarray:
    points = metrics[(metrics["key"] == key) & metrics["run_id"].str.startswith(prefix)]
    return points.sort_values(["run_id", "step"]).groupby("run_id")["value"].last().to_numpy()


def test_probability_of_improvement_finds_the_planted_order(tmp_path):
    """dfpo's planted accuracy (0.66) is above gspo's (0.60), grpo's (0.58) below: every dfpo run beats
    every gspo run (P = 1, an interval with width); grpo's runs mostly lose (P < 1/2: the seed effect,
    sd 0.02, mixes runs of different seeds)."""
    runs, metrics = synthetic_sweep(steps=40, seeds=(0, 1, 2, 3))
    report = report_for(tmp_path, runs, metrics, plots=False)
    data = report.table("improvement").data.set_index(["group", "arm"])
    for group in ("rollout.G=4", "rollout.G=8"):
        dfpo, grpo = data.loc[(group, "dfpo")], data.loc[(group, "grpo")]
        assert dfpo["p_improvement"] == 1.0 and 0.5 < dfpo["p_improvement_lo"] < 1.0 == dfpo["p_improvement_hi"]
        assert grpo["p_improvement_lo"] <= grpo["p_improvement"] < 0.5 < grpo["p_improvement_hi"] < 1.0
        assert np.isnan(data.loc[(group, "gspo"), "p_improvement"])
    g = "rollout.G=4"
    expected = improvement_interval(last_scores(metrics, ACC, "dfpo-G4-"), last_scores(metrics, ACC, "gspo-G4-"))
    row = data.loc[(g, "dfpo")]
    assert (row["p_improvement"], row["p_improvement_lo"], row["p_improvement_hi"]) == pytest.approx(tuple(expected))
    shown = report.table("improvement").display
    assert list(shown.columns) == ["group", "benchmark", "arm", "n", "IQM [95% CI]", "P(arm > gspo) [95% CI]"]


def test_iqm_from_four_runs_and_not_below(tmp_path):
    runs, metrics = synthetic_sweep(steps=40, seeds=(0, 1, 2, 3))
    data = report_for(tmp_path / "four", runs, metrics, plots=False).table("improvement").data
    row = data.set_index(["group", "arm"]).loc[("rollout.G=8", "grpo")]
    assert row["iqm"] == pytest.approx(stats.trim_mean(last_scores(metrics, ACC, "grpo-G8-"), 0.25))
    assert 0.0 <= row["iqm_lo"] <= row["iqm"] <= row["iqm_hi"] <= 1.0
    three = report_for(tmp_path / "three", plots=False).table("improvement")
    assert three.data["iqm"].isna().all()
    assert all(text.startswith("n/a: 3 runs") for text in three.display["IQM [95% CI]"])


def test_performance_profile_pools_benchmarks_and_is_plotted(tmp_path):
    runs, metrics = synthetic_sweep(steps=40)
    acc = metrics[metrics["key"] == ACC]
    second = acc.assign(key="val-core/gsm8k/acc/mean_at_4", value=acc["value"] + 0.1)
    report = report_for(tmp_path, runs, pd.concat([metrics, second]))
    profile = report.table("performance_profile").data
    assert set(profile["n_benchmarks"]) == {2} and set(profile["n_runs"]) == {3}
    first = profile[(profile["group"] == "rollout.G=4") & (profile["arm"] == "dfpo")]
    assert first["fraction"].iloc[0] == 1.0 and first["fraction"].iloc[-1] == 0.0
    assert np.all(np.diff(first["fraction"]) <= 0)  # a survival function
    assert np.all((first["lo"] <= first["fraction"]) & (first["fraction"] <= first["hi"]))
    # the fraction at τ counts (run, benchmark) scores above it
    scores = np.r_[last_scores(metrics, ACC, "dfpo-G4-"), last_scores(metrics, ACC, "dfpo-G4-") + 0.1]
    middle = first.iloc[len(first) // 2]
    assert middle["fraction"] == pytest.approx(np.mean(scores > middle["tau"]))
    assert "performance_profile" in report.plots and "performance_profile" in report.table("improvement").plots
    assert not report.table("performance_profile").shown
    assert len({row["benchmark"] for row in report.table("improvement").data.to_dict("records")}) == 2


def test_accuracy_intervals_stay_inside_0_1_near_the_bound(tmp_path):
    """Final accuracies near 1 with a seed spread (0.9–1.0 at 4 seeds): Student's t interval passes 1;
    the final scores' and the IQM's stay inside, the training reward's (not known bounded) is Student's."""
    runs, metrics = synthetic_sweep(steps=40, seeds=(0, 1, 2, 3))
    acc = metrics["key"] == ACC
    top = {0: 1.0, 1: 0.9, 2: 1.0, 3: 0.93}
    seeds = metrics["run_id"].str.extract(r"-s(\d+)$")[0].astype(int)
    metrics.loc[acc, "value"] = seeds[acc].map(top).to_numpy()
    report = report_for(tmp_path, runs, metrics, plots=False)
    final = report.table("final_scores").data
    assert (final["ci_hi"] <= 1.0).all() and (final["ci_lo"] >= 0.0).all()
    assert stats.t.ppf(0.975, 3) * np.std(list(top.values()), ddof=1) / 2 + np.mean(list(top.values())) > 1.0
    assert (final["ci_hi"] < 1.0).all()  # Wilson's: the upper end bends in below 1, not cut at it
    improvement = report.table("improvement").data
    assert (improvement["iqm_hi"] <= 1.0).all() and (improvement["iqm_lo"] >= 0.0).all()
    assert any("Wilson" in note for note in report.table("final_scores").notes)
    assert not any("Wilson" in note for note in report.table("jitter2").notes)
