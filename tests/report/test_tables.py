"""The tables' numbers on synthetic sweeps with planted effects, and that each number is the one
the function of `cancelctl.stats` named after its equation gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from report_frames import report_for, synthetic_sweep

from cancelctl.report.prepared import pass_at_k_keys
from cancelctl.stats import crossing, curves, intervals, paired
from cancelctl.stats.intervals import unit_interval_ci


def test_compute_at_reward_is_normalised_to_the_baseline(report):
    data = report.table("compute_at_reward").data.set_index(["group", "arm"])
    display = report.table("compute_at_reward").display
    assert (display.loc[display["arm"] == "gspo", "vs gspo"] == "1.00×").all()
    for group in ("rollout.G=4", "rollout.G=8"):
        assert data.loc[(group, "gspo"), "normalised"] == pytest.approx(1.0)
        # dfpo learns fastest (tau 20 vs 30): it needs less compute; grpo (tau 40) more
        assert data.loc[(group, "dfpo"), "normalised"] < 1.0 < data.loc[(group, "grpo"), "normalised"]
    per_run = report.table("compute_at_reward_runs").data
    assert len(per_run) == 18 and per_run["reached"].all()
    assert (per_run["compute_at_reward"] % (16 * 100 * 4) == 0).all()  # a logged compute, not interpolated


def test_default_kappa_is_stated(report):
    assert report.kappa is not None and 0.1 < report.kappa < 0.8
    assert "default" in report.kappa_note and f"{report.kappa:.4g}" in report.kappa_note
    assert report.kappa_note in (report.out_dir / "report.md").read_text()


def test_final_scores_find_the_planted_improvement(report):
    data = report.table("final_scores").data.set_index(["group", "arm"])
    for group in ("rollout.G=4", "rollout.G=8"):
        dfpo = data.loc[(group, "dfpo")]
        assert dfpo["delta_vs_baseline"] == pytest.approx(0.06, abs=0.01)
        assert dfpo["p_value"] < 0.05 and dfpo["n_paired"] == 3
        assert dfpo["ci_lo"] < dfpo["mean"] < dfpo["ci_hi"]
        assert np.isnan(data.loc[(group, "gspo"), "delta_vs_baseline"])


def test_eval_gain_is_each_runs_last_minus_first_evaluation(report, tmp_path):
    """The planted accuracy rises from step 10 to the end in every run: the gain is last − first per
    run (not a difference of arm means across groups), summarised over seeds like the final score."""
    runs, metrics = synthetic_sweep()
    evals = metrics[metrics["key"] == "val-core/aime25/acc/mean_at_4"].sort_values("step")
    per_run = evals.groupby("run_id")["value"].agg(lambda v: v.iloc[-1] - v.iloc[0])
    data = report.table("eval_gain").data.set_index(["group", "arm"])
    for group, g in (("rollout.G=4", 4), ("rollout.G=8", 8)):
        for arm in ("gspo", "dfpo", "grpo"):
            gains = per_run[[f"{arm}-G{g}-s{seed}" for seed in sorted(runs["seed"].unique())]].to_numpy()
            row = data.loc[(group, arm)]
            assert row["mean"] == pytest.approx(gains.mean()) and row["mean"] > 0.3
            assert row["ci_lo"] == pytest.approx(intervals.student_t_ci(gains).lo)
            firsts = evals[evals["run_id"].str.startswith(f"{arm}-G{g}-")].groupby("run_id")["value"].first()
            assert row["first_mean"] == pytest.approx(firsts.mean())
    # one evaluation per run: no gain to show, said so
    single = metrics[(metrics["key"] != "val-core/aime25/acc/mean_at_4") | (metrics["step"] == 100)]
    lone = report_for(tmp_path / "one-eval", runs, single).table("eval_gain")
    assert lone.data.empty and any("≥ 2 evaluations" in note for note in lone.notes)


def test_delta_per_g_has_one_column_per_G(report):
    display = report.table("delta_per_G").display
    assert list(display.columns) == ["benchmark", "arm", "G=4", "G=8"]
    assert set(display["arm"]) == {"dfpo", "grpo"}
    assert display.loc[display["arm"] == "dfpo", "G=4"].item().startswith("+0.06")


def test_jitter2_and_mechanisms(report):
    jitter = report.table("jitter2").data
    assert set(jitter["metric"]) == {"critic/score/mean", "actor/entropy"}
    mech = report.table("mechanisms").data.set_index(["group", "arm", "key"])
    energy = mech.xs("cancel/energy_b3", level="key")["mean"]
    assert energy.loc[("rollout.G=4", "dfpo")] == pytest.approx(0.15)
    assert energy.loc[("rollout.G=4", "gspo")] == pytest.approx(0.3)
    growth = mech.xs("mismatch/rho_std", level="key")["mean"]
    assert growth.to_numpy() == pytest.approx(0.001, abs=2e-4)


def test_the_template_boost_share_is_a_mechanism_row_where_logged_and_unnamed_where_not(report, tmp_path):
    """`cancel/boost_template` [C §3.2] is the lab's (only it knows its template tokens): a row where a
    backend logs it, no "not logged" note where none does."""
    assert "cancel/boost_template" not in set(report.table("mechanisms").data["key"])
    assert not any("boost_template" in note for note in report.table("mechanisms").notes)
    runs, metrics = synthetic_sweep()
    energy = metrics[metrics["key"] == "cancel/energy_b3"]
    boost = energy.assign(key="cancel/boost_template", value=energy["run_id"].str.startswith("grpo") * 0.5 + 0.1)
    mech = report_for(tmp_path, runs, pd.concat([metrics, boost]), plots=False).table("mechanisms")
    shares = mech.data.set_index(["group", "arm", "key"]).xs("cancel/boost_template", level="key")["mean"]
    assert shares.loc[("rollout.G=4", "grpo")] == pytest.approx(0.6)
    assert shares.loc[("rollout.G=8", "gspo")] == pytest.approx(0.1)
    assert "template share of boost (mean)" in mech.display.columns


def test_pass_at_k_table_only_where_logged_with_the_final_scores_statistics(report, tmp_path):
    """pass@k per group × benchmark × k × arm at the last evaluation, mean [95% CI], Δ and paired p as
    the final scores give them; the lab's unbiased pass_at_<k>, verl's best@k / maj@k (val-core at
    k = n, val-aux below; their /std left out); no table where none is logged."""
    assert "pass_at_k" not in {t.name for t in report.tables}
    runs, metrics = synthetic_sweep()
    acc = metrics[metrics["key"] == "val-core/aime25/acc/mean_at_4"]
    more = [
        acc.assign(key="val-core/aime25/acc/pass_at_4", value=acc["value"] + 0.2),
        acc.assign(key="val-core/aime25/acc/pass_at_1", value=acc["value"]),
        acc.assign(key="val-aux/gsm8k/acc/best_at_2/mean", value=acc["value"] + 0.1),
        acc.assign(key="val-core/gsm8k/acc/maj_at_4/mean", value=acc["value"] + 0.05),
        acc.assign(key="val-core/gsm8k/acc/best_at_4/std", value=0.01),
    ]
    built = report_for(tmp_path, runs, pd.concat([metrics, *more]), plots=False)
    table = built.table("pass_at_k")
    order = [t.name for t in built.tables]
    assert order.index("final_scores") + 1 == order.index("pass_at_k")
    data = table.data.set_index(["group", "benchmark", "measure", "k", "arm"])
    assert len(data) == 4 * 2 * 3  # 4 keys (not the /std) × 2 groups × 3 arms
    final = built.table("final_scores").data.set_index(["group", "arm"])
    for arm in ("gspo", "dfpo", "grpo"):
        row, base = data.loc[("rollout.G=4", "aime25", "pass", 4, arm)], final.loc[("rollout.G=4", arm)]
        assert row["mean"] == pytest.approx(base["mean"] + 0.2)
        # a score in [0, 1]: Wilson's score interval of its seeds, as the final scores' (not shift-invariant)
        last = acc[acc["run_id"].str.startswith(f"{arm}-G4-")].sort_values("step").groupby("run_id")["value"].last()
        shifted = unit_interval_ci(last.to_numpy() + 0.2)
        assert (row["ci_lo"], row["ci_hi"]) == pytest.approx((shifted.lo, shifted.hi))
        assert (base["ci_lo"], base["ci_hi"]) == pytest.approx(tuple(unit_interval_ci(last.to_numpy()))[1:])
        assert row["p_value"] == pytest.approx(base["p_value"], nan_ok=True)
    shown = table.display
    assert list(shown.columns[:5]) == ["group", "benchmark", "arm", "n", "estimate"]
    assert {"pass@1", "pass@4", "best@2", "maj@4"} == set(shown["estimate"])
    assert any("unbiased" in note for note in table.notes) and any("bootstrap" in note for note in table.notes)


def test_pass_keys_are_verl_0_9_1s_validation_keys_as_forwarded():
    """verl 0.9.1's `_val_metrics_update` over 4 samples of openai/gsm8k (acc, pred) logs these keys
    (run there once; '@' → '_at_' as the forwarder sanitises): best@k and maj@k means are pass@k-like,
    their std, worst@k and std@n are not; mean@n is the final score's."""
    logged = [
        "val-aux/openai/gsm8k/acc/best_at_2/mean", "val-aux/openai/gsm8k/acc/best_at_2/std",
        "val-aux/openai/gsm8k/acc/maj_at_2/mean", "val-aux/openai/gsm8k/acc/maj_at_2/std",
        "val-aux/openai/gsm8k/acc/std_at_4", "val-aux/openai/gsm8k/acc/worst_at_2/mean",
        "val-core/openai/gsm8k/acc/best_at_4/mean", "val-core/openai/gsm8k/acc/best_at_4/std",
        "val-core/openai/gsm8k/acc/maj_at_4/mean", "val-core/openai/gsm8k/acc/mean_at_4",
        "val-core/lab/acc/pass_at_2",
    ]
    found = [(p.benchmark, p.measure, p.k) for p in pass_at_k_keys(dict.fromkeys(logged))]
    assert found == [("lab", "pass", 2), ("openai/gsm8k", "best", 2), ("openai/gsm8k", "best", 4),
                     ("openai/gsm8k", "maj", 2), ("openai/gsm8k", "maj", 4)]


def test_not_reached_is_text_not_a_number(tmp_path):
    report = report_for(tmp_path, threshold=0.78, plots=False)
    table = report.table("compute_at_reward")
    assert report.kappa_note == "κ = 0.78 (given)"
    grpo = table.display[table.display["arm"] == "grpo"]
    # grpo tops out at 0.1 + 0.7·(1−e^{−2.5}) ≈ 0.74 (noise sd 0.01): no seed reaches 0.78
    assert grpo["mean (generated tokens)"].str.fullmatch(r"not reached \(0/3 seeds reached κ\)").all()
    assert (grpo["vs gspo"] == "not reached").all()
    assert table.data.loc[table.data["arm"] == "grpo", "mean"].isna().all()


def test_missing_keys_say_not_logged(tmp_path):
    runs, metrics = synthetic_sweep()
    keep = ~metrics["key"].str.match(r"(dfpo|mismatch|hacking|cancel)/|val-core/")
    report = report_for(tmp_path, runs, metrics[keep], plots=False)
    assert report.table("mechanisms").notes[0].startswith("not logged: dfpo/asym")
    assert report.table("final_scores").notes == ["not logged: val-core/<benchmark>/acc/mean_at_<k>"]
    assert (report.out_dir / "tables" / "final_scores.csv").read_text() == ""
    assert "not logged: dfpo/asym" in (report.out_dir / "report.md").read_text()
    assert report.table("compute_at_reward").data.shape[0] == 6  # the reward-based tables still work


def test_no_grid_single_seed_sweep(tmp_path):
    runs, metrics = synthetic_sweep()
    runs = runs[(runs["G"] == 4) & (runs["seed"] == 0)].drop(columns="axis.rollout.G").assign(group="")
    metrics = metrics[metrics["run_id"].isin(runs["run_id"])]
    report = report_for(tmp_path, runs, metrics, plots=False)
    final = report.table("final_scores").display
    assert "group" not in final.columns
    # t with 0 degrees of freedom: no interval, never a zero-width "0.0625 [0.0625, 0.0625]"
    assert final["mean [95% CI]"].str.endswith(" [n/a: 1 seed]").all()
    assert report.table("final_scores").data[["ci_lo", "ci_hi"]].isna().all().all()
    assert (final.loc[final["arm"] != "gspo", "p (paired)"] == "n/a (1 shared seed)").all()
    assert report.table("delta_per_G").notes == ["G is not a sweep axis (rollout.G): no table"]


# ---------------------------------------------------------------- each number is analysis' equation


def _curves(runs, metrics, key: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """run_id -> (steps, values) of one key, in step order."""
    part = metrics[metrics["key"] == key].sort_values(["run_id", "step"])
    return {r: (p["step"].to_numpy(float), p["value"].to_numpy(float)) for r, p in part.groupby("run_id")}


def test_threshold_tables_equal_analysis_on_a_planted_curve(tmp_path):
    runs, metrics = synthetic_sweep(steps=40)
    kappa, window = 0.55, 3
    built = report_for(tmp_path, runs, metrics, threshold=kappa, smooth_window=window, compute="tokens", plots=False)
    reward = _curves(runs, metrics, "critic/score/mean")
    tokens = _curves(runs, metrics, "compute/gen_tokens_cum")
    per_run = built.table("compute_at_reward_runs").data.set_index("run_id")["compute_at_reward"]
    steps = built.table("steps_to_threshold_runs").data.set_index("run_id")["steps_to_threshold"]
    reached = 0
    for run_id, (step, value) in reward.items():
        expected = crossing.compute_at_reward(tokens[run_id][1], value, kappa, window)
        expected_steps = crossing.steps_to_threshold(step, value, kappa, window)
        if expected is None:
            assert np.isnan(per_run[run_id]) and np.isnan(steps[run_id])
        else:
            reached += 1
            assert per_run[run_id] == expected and steps[run_id] == expected_steps
    assert 0 < reached < len(reward)  # the planted curves: dfpo/gspo reach 0.55 within 40 steps, grpo does not


def test_jitter2_and_paired_test_equal_analysis(tmp_path):
    runs, metrics = synthetic_sweep(steps=40)
    built = report_for(tmp_path, runs, metrics, plots=False)
    reward = _curves(runs, metrics, "critic/score/mean")
    meta = runs.set_index("run_id")
    table = built.table("jitter2").data
    row = table[(table["metric"] == "critic/score/mean") & (table["group"] == "rollout.G=8") & (table["arm"] == "dfpo")]
    seeds = {arm: [curves.jitter2(reward[f"{arm}-G8-s{s}"][1]) for s in sorted(meta["seed"].unique())]
             for arm in ("dfpo", "gspo")}
    interval = intervals.student_t_ci(seeds["dfpo"])
    test = paired.paired_t_test(seeds["dfpo"], seeds["gspo"])
    assert row[["mean", "ci_lo", "ci_hi", "n_seeds"]].iloc[0].tolist() == [interval.mean, interval.lo, interval.hi, 3]
    assert row[["delta_vs_baseline", "p_value", "n_paired"]].iloc[0].tolist() == [test.delta, test.p, test.n]
    assert row["ratio_vs_baseline"].item() == pytest.approx(interval.mean / np.mean(seeds["gspo"]))


@pytest.mark.parametrize(
    "module, equation, table, column",
    [
        (crossing, "compute_at_reward", "compute_at_reward_runs", "compute_at_reward"),
        (crossing, "steps_to_threshold", "steps_to_threshold_runs", "steps_to_threshold"),
        (curves, "jitter2", "jitter2", "mean"),
    ],
)
def test_tables_call_the_equation_functions(module, equation, table, column, tmp_path, monkeypatch):
    """Replace one of the stats equations by a planted constant: the table must show that constant,
    so the table's number is that function's, not a copy of its formula."""
    calls = []

    def planted(*args, **kwargs):
        calls.append(args)
        return 123

    monkeypatch.setattr(module, equation, planted)
    runs, metrics = synthetic_sweep(steps=20)
    built = report_for(tmp_path, runs, metrics, threshold=0.5, plots=False)
    values = built.table(table).data[column]
    assert len(calls) >= len(runs) and len(values) and (values == 123).all()


@pytest.mark.parametrize("kappa", [-5.0, 5.0])
def test_a_threshold_no_curve_can_cross_is_refused_exit_2(tmp_path, kappa):
    """κ below every reward (each run 'reaches' it at its first point) or above every reward (none
    ever does) makes the threshold tables say nothing true: --kappa refuses it."""
    from cancelctl.errors import ArgumentError

    with pytest.raises(ArgumentError) as caught:
        report_for(tmp_path, threshold=kappa, plots=False)
    assert caught.value.exit_code == 2 and "every value of critic/score/mean in this sweep" in str(caught.value)
    assert not (tmp_path / "synthetic").exists()


def test_a_flat_baseline_sets_no_threshold(tmp_path):
    """A baseline whose training reward never rises (the tiny lab's reward is 0 throughout) gave κ = 0,
    its first value, and every run "reached" it at step 1 (1.00× everywhere): no κ, and each
    threshold table says why, as the scaling table says "no rise"."""
    runs, metrics = synthetic_sweep()
    flat = metrics["run_id"].str.startswith("gspo") & (metrics["key"] == "critic/score/mean")
    metrics.loc[flat, "value"] = 0.0
    report = report_for(tmp_path, runs, metrics, plots=False)
    assert report.kappa is None
    assert report.kappa_note.startswith("no κ: no rise: the baseline's seed-mean critic/score/mean never goes above")
    assert "no threshold can be set" in report.kappa_note
    for name in ("compute_at_reward", "steps_to_threshold"):
        table = report.table(name)
        assert table.display.empty and table.notes == [report.kappa_note]
    assert "no threshold can be set" in (report.out_dir / "report.md").read_text()


def test_a_group_whose_baseline_is_flat_is_left_out_of_the_default_threshold(tmp_path):
    runs, metrics = synthetic_sweep()
    flat = metrics["run_id"].str.startswith("gspo-G4") & (metrics["key"] == "critic/score/mean")
    metrics.loc[flat, "value"] = 0.0
    report = report_for(tmp_path, runs, metrics, plots=False)
    assert report.kappa is not None and report.kappa > 0.1
    assert "groups left out, no rise" in report.kappa_note and "rollout.G=4 (flat at 0)" in report.kappa_note
    display = report.table("compute_at_reward").display
    assert (display.loc[(display["group"] == "rollout.G=4") & (display["arm"] == "dfpo"), "vs gspo"]
            == "n/a (baseline not reached)").all()
