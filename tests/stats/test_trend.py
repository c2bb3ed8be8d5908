"""Trend claims along a grid axis ([D] Table 4): the per-seed slope of arm − versus recovers a planted
trend and obeys its invariances; verdicts from fixed frames are supported / contradicted /
inconclusive as planted, join the report's Holm family, and say what is missing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cancelctl.report.claims import claims_notes, verdict_rows
from cancelctl.spec.claims import ClaimSpec
from cancelctl.stats.trend import axis_coordinates, seed_slopes, slope_weights
from cancelctl.stats.verdicts import judge_claims

EVAL = "val-core/lab/acc/mean_at_4"
G = (2, 4, 8, 16)


def table(d: np.ndarray, values=G) -> dict[float, pd.Series]:
    """seeds × values array -> the mapping seed_slopes takes."""
    return {v: pd.Series(d[:, j], index=range(d.shape[0])) for j, v in enumerate(values)}


# ---------------------------------------------------------------- the statistic on arrays

finite = st.floats(-5, 5, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(slope=finite, offsets=st.lists(finite, min_size=2, max_size=6), scale=st.sampled_from(["linear", "log"]))
def test_a_planted_linear_trend_is_recovered_exactly_per_seed(slope, offsets, scale):
    """d_sj = a_s + b·u_j: every seed's slope is b whatever its own offset a_s."""
    u = axis_coordinates(G, scale)
    d = np.array(offsets)[:, None] + slope * u[None, :]
    slopes, left_out = seed_slopes(table(d), scale)
    assert left_out == [] and list(slopes.index) == list(range(len(offsets)))
    np.testing.assert_allclose(slopes.to_numpy(), slope, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(d=st.lists(st.lists(finite, min_size=4, max_size=4), min_size=2, max_size=5),
       shift=finite, k=st.floats(0.1, 10), a=st.floats(0.1, 10), c=finite)
def test_invariances(d, shift, k, a, c):
    d = np.array(d)
    linear = seed_slopes(table(d), "linear")[0].to_numpy()
    log = seed_slopes(table(d), "log")[0].to_numpy()
    # a constant effect at every axis value does not change how it changes
    np.testing.assert_allclose(seed_slopes(table(d + shift), "linear")[0], linear, atol=1e-9)
    # the axis reversed: the slope flips sign
    np.testing.assert_allclose(seed_slopes(table(d, [-v for v in G]), "linear")[0], -linear, atol=1e-9)
    # an affine change of axis units (u -> a·u + c) divides the slope by a
    np.testing.assert_allclose(seed_slopes(table(d, [a * v + c for v in G]), "linear")[0], linear / a, atol=1e-9)
    # on the log scale only ratios of the axis values matter: G·a gives the same slope per doubling
    np.testing.assert_allclose(seed_slopes(table(d, [a * v for v in G]), "log")[0], log, atol=1e-9)
    # the metric in other units (×k): the slope in those units
    np.testing.assert_allclose(seed_slopes(table(k * d), "log")[0], k * log, atol=1e-9)


def test_mean_slope_is_the_least_squares_slope_of_the_mean_effects_and_of_the_pooled_fit():
    rng = np.random.default_rng(3)
    d = rng.normal(size=(5, 4))
    slopes, _ = seed_slopes(table(d), "log")
    u = np.log2(G)
    assert slopes.mean() == pytest.approx(np.polyfit(u, d.mean(axis=0), 1)[0])
    assert slopes.mean() == pytest.approx(np.polyfit(np.tile(u, 5), d.ravel(), 1)[0])


def test_two_values_give_the_difference_of_effects_over_the_step():
    d = np.array([[0.1, 0.4], [0.2, 0.1]])
    slopes, _ = seed_slopes(table(d, (4, 8)), "linear")
    np.testing.assert_allclose(slopes, [(0.4 - 0.1) / 4, (0.1 - 0.2) / 4])
    np.testing.assert_allclose(seed_slopes(table(d, (4, 8)), "log")[0], [0.3, -0.1])  # one doubling
    np.testing.assert_allclose(slope_weights((4, 8), "log"), [-1.0, 1.0])


def test_seeds_missing_at_a_value_are_left_out():
    diffs = {4: pd.Series({0: 0.1, 1: 0.2, 2: 0.3}), 8: pd.Series({0: 0.3, 2: 0.5, 3: 0.0})}
    slopes, left_out = seed_slopes(diffs, "log")
    assert list(slopes.index) == [0, 2] and left_out == [1, 3]
    np.testing.assert_allclose(slopes, [0.2, 0.2])


def test_no_trend_gives_alpha_false_supported_even_with_seeds_shared_across_values():
    """600 null sweeps of 5 seeds × 4 values: a constant gain plus a per-seed effect shared by every
    axis value (strongly correlated within a seed) plus noise; "supported" at about α."""
    from cancelctl.stats.evidence import decide, paired_evidence

    rng = np.random.default_rng(7)
    sweeps, seeds = 600, 5
    d = 0.2 + rng.normal(0, 1.0, size=(sweeps, seeds, 1)) + rng.normal(0, 0.3, size=(sweeps, seeds, len(G)))
    supported = 0
    for i in range(sweeps):
        slopes, _ = seed_slopes(table(d[i]), "log")
        ev = paired_evidence(slopes.to_numpy(), np.zeros(seeds), "higher")
        supported += decide(ev.p_for, ev.p_against) == "supported"
    rate = supported / sweeps
    assert rate <= 0.05 + 3.5 * np.sqrt(0.05 * 0.95 / sweeps)


@pytest.mark.parametrize("values,scale,message", [
    ((4, 4), "linear", "at least 2 distinct"),
    ((4,), "linear", "at least 2 distinct"),
    ((0, 4), "log", "> 0"),
    ((4, 8), "sqrt", "scale must be"),
    ((4, float("nan")), "linear", "finite"),
])
def test_bad_axes_are_refused(values, scale, message):
    with pytest.raises(ValueError, match=message):
        slope_weights(values, scale)


# ---------------------------------------------------------------- verdicts from fixed frames


def claim(**kw) -> ClaimSpec:
    data = dict(id="grows", source="[D] Table 4", statement="b's gain over a grows with G", arm="b", versus="a",
                direction="higher", metric={"kind": "final"}, along={"axis": "rollout.G", "scale": "log"})
    data.update(kw)
    return ClaimSpec.model_validate(data)


def frames(gain, seeds: int = 6, values=G, noise: float = 0.01, seed: int = 0, lrs=(None,)):
    """A sweep over rollout.G (and optionally an lr axis): a's final score per seed is 0.5 + a seed
    effect shared by both arms at every G; b's is a's plus gain(G) plus noise."""
    rng = np.random.default_rng(seed)
    runs, points = [], []
    for lr in lrs:
        for g in values:
            group = f"rollout.G={g}" + (f",algorithm.lr={lr:g}" if lr is not None else "")
            for s in range(seeds):
                seed_effect = 0.05 * np.sin(s + 1)
                for arm in ("a", "b"):
                    rid = f"{arm}-{group}-s{s}"
                    row = {"run_id": rid, "arm": arm, "group": group, "seed": s, "G": g, "axis.rollout.G": g}
                    if lr is not None:
                        row["axis.algorithm.lr"] = lr
                    runs.append(row)
                    value = 0.5 + seed_effect + (gain(g) + rng.normal(0, noise) if arm == "b" else 0.0)
                    for step in range(3):
                        points.append((rid, step, EVAL, value))
                        points.append((rid, step, "compute/gen_tokens_cum", 1000.0 * (step + 1)))
                        points.append((rid, step, "compute/update_steps_cum", 2.0 * (step + 1)))
    return pd.DataFrame(runs), pd.DataFrame(points, columns=["run_id", "step", "key", "value"])


def test_a_growing_gain_is_supported_and_its_opposite_contradicted():
    runs, metrics = frames(lambda g: 0.03 * np.log2(g))
    up, down, flat = judge_claims([claim(), claim(id="shrinks", direction="lower"),
                                   claim(id="flat", direction="similar", margin=0.01)], runs, metrics)
    assert (up.status, down.status, flat.status) == ("supported", "contradicted", "contradicted")
    assert up.effect == pytest.approx(0.03, abs=0.005) and up.ci_lo <= up.effect <= up.ci_hi and up.ci_lo > 0
    assert up.n_seeds == 6 and up.axis == "rollout.G" and up.group == "rollout.G in {2, 4, 8, 16}"
    assert up.metric == f"final of {EVAL}: slope of arm − versus per doubling of rollout.G"
    assert [v for v, _ in up.axis_effects] == list(G)
    assert up.axis_effects[-1][1] == pytest.approx(0.12, abs=0.01)
    assert up.arm_mean - up.versus_mean == pytest.approx(up.effect)  # each arm's own slope; a's is ~0
    assert up.p_holm >= up.p


def test_a_constant_gain_is_no_trend():
    """b beats a by 0.1 at every G: per group "higher" is supported, the trend is not."""
    runs, metrics = frames(lambda g: 0.1, noise=0.02, seed=1)
    per_group = judge_claims([claim(along=None)], runs, metrics)
    assert [v.status for v in per_group] == ["supported"] * 4
    [trend] = judge_claims([claim()], runs, metrics)
    assert trend.status == "inconclusive" and abs(trend.effect) < 0.01
    [flat] = judge_claims([claim(direction="similar", margin=0.02)], runs, metrics)
    assert flat.status == "supported" and flat.margin == 0.02


def test_trend_rows_join_the_reports_holm_family():
    runs, metrics = frames(lambda g: 0.03 * np.log2(g))
    verdicts = judge_claims([claim(), claim(id="per-group", along=None)], runs, metrics)
    assert len(verdicts) == 1 + len(G)
    p = np.array([v.p for v in verdicts])
    order = np.argsort(p)
    expected = np.maximum.accumulate(np.minimum(1.0, (len(p) - np.arange(len(p))) * p[order]))
    np.testing.assert_allclose([verdicts[i].p_holm for i in order], expected)


def test_one_row_per_point_of_the_other_axes():
    runs, metrics = frames(lambda g: 0.03 * np.log2(g), values=(4, 8, 16), lrs=(1e-3, 2e-3))
    verdicts = judge_claims([claim()], runs, metrics)
    assert [v.group for v in verdicts] == ["algorithm.lr=0.001,rollout.G in {4, 8, 16}",
                                           "algorithm.lr=0.002,rollout.G in {4, 8, 16}"]
    assert all(v.status == "supported" for v in verdicts)


def test_three_seeds_show_the_numbers_but_no_verdict():
    """The lab demo's case: 3 seeds at G 4 and 8 — the slope and CI are shown, the verdict needs 4."""
    runs, metrics = frames(lambda g: 0.03 * np.log2(g), seeds=3, values=(4, 8))
    [v] = judge_claims([claim()], runs, metrics)
    assert v.status == "cannot judge" and "3 seeds paired at every rollout.G" in v.reason
    assert v.effect == pytest.approx(0.03, abs=0.02) and np.isfinite(v.ci_lo)


def test_a_seed_missing_at_one_value_is_left_out_and_said():
    runs, metrics = frames(lambda g: 0.03 * np.log2(g))
    gone = runs["run_id"] == "b-rollout.G=8-s5"
    [v] = judge_claims([claim()], runs[~gone], metrics)
    assert v.n_seeds == 5 and "seed(s) 5 not paired at every rollout.G: left out" in v.notes
    assert "arm − versus at rollout.G=2: " in v.notes


def test_missing_inputs_are_named():
    runs, metrics = frames(lambda g: 0.03 * np.log2(g))
    [no_axis] = judge_claims([claim()], runs.drop(columns="axis.rollout.G"), metrics)
    assert no_axis.status == "cannot judge" and "no run carries a rollout.G value" in no_axis.reason
    no_arm = runs[~((runs["arm"] == "b") & (runs["G"] == 8))]
    [v] = judge_claims([claim()], no_arm, metrics)
    assert v.reason == "at rollout.G=8: arm 'b' has no runs in this group"
    [one] = judge_claims([claim()], runs[runs["G"] == 4], metrics)
    assert "needs ≥ 2 distinct numeric values" in one.reason
    [not_logged] = judge_claims([claim(metric={"kind": "mean", "key": "hacking/J"})], runs, metrics)
    assert "not logged: hacking/J" in not_logged.reason


def test_the_report_row_and_notes():
    runs, metrics = frames(lambda g: 0.03 * np.log2(g))
    verdicts = judge_claims([claim()], runs, metrics)
    [row] = verdict_rows(verdicts)
    assert row["verdict"] == "supported" and row["n"] == "6" and row["effect [95% CI]"].startswith("+0.0")
    assert row["group"] == "rollout.G in {2, 4, 8, 16}" and "per doubling of rollout.G" in row["metric"]
    notes = claims_notes(verdicts)
    assert any(n.startswith("trend claims (along an axis)") for n in notes)
    assert any(n.startswith("grows (rollout.G in {2, 4, 8, 16}): arm − versus at rollout.G=2: ") for n in notes)
