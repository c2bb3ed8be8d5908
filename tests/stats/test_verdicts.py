"""Verdicts: planted effects are found, null effects are not (at the stated rates), Holm controls the
family-wise error, the seeds-needed number delivers its power, missing inputs are named."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from cancelctl.report.claims import verdict_rows, verdict_text, verdicts_as_records
from cancelctl.spec.claims import ClaimSpec
from cancelctl.stats.curves import late_minus_early
from cancelctl.stats.evidence import decide, paired_evidence
from cancelctl.stats.paired import holm_adjust, paired_bootstrap_test, seeds_for_power
from cancelctl.stats.options import ComparisonOptions
from cancelctl.stats.verdicts import judge_claims

EVAL = "val-core/lab/acc/mean_at_4"
ALPHA = 0.05


def binomial_band(rate: float, n: int, z: float = 3.5) -> tuple[float, float]:
    half = z * np.sqrt(rate * (1 - rate) / n)
    return rate - half, rate + half


def null_pairs(rng, sweeps: int, seeds: int) -> np.ndarray:
    return rng.normal(size=(sweeps, seeds))


# ---------------------------------------------------------------- statistics on arrays


def test_one_sided_null_gives_half_alpha_false_supported():
    """2000 null sweeps of 5 seeds: "supported" (higher) about 2.5% of the time, "contradicted" too —
    each side at α/2, one tail of the 95% interval shown beside the verdict."""
    rng = np.random.default_rng(11)
    d = null_pairs(rng, 2000, 5)
    verdicts = [paired_evidence(row, np.zeros(5), "higher") for row in d]
    supported = np.mean([decide(v.p_for, v.p_against) == "supported" for v in verdicts])
    contradicted = np.mean([decide(v.p_for, v.p_against) == "contradicted" for v in verdicts])
    lo, hi = binomial_band(ALPHA / 2, len(d))
    assert lo <= supported <= hi
    assert lo <= contradicted <= hi


def test_three_seeds_would_be_anti_conservative():
    """Why a verdict needed 4 seeds with the bootstrap-t it used: at 3 it rejects a true null far above α."""
    rng = np.random.default_rng(12)
    d = null_pairs(rng, 1200, 3)
    p = [paired_bootstrap_test(row, np.zeros(3), n_boot=400, seed=i, alternative="greater").p for i, row in enumerate(d)]
    assert np.mean(np.array(p) < ALPHA) > binomial_band(ALPHA, len(d))[1]


@pytest.mark.parametrize("direction,effect", [("not_higher", 0.5), ("not_lower", -0.5), ("similar", 0.5)])
def test_margin_claims_at_the_boundary_are_rarely_supported(direction, effect):
    """True difference exactly at the margin (0.5): "supported" at most α (TOST: below α)."""
    rng = np.random.default_rng(13)
    d = effect + null_pairs(rng, 400, 6)
    supported = np.mean([
        paired_evidence(row, np.zeros(6), direction, margin=0.5).p_for < ALPHA
        for i, row in enumerate(d)
    ])
    assert supported <= binomial_band(ALPHA, len(d))[1]


def test_planted_effects_are_found():
    rng = np.random.default_rng(14)
    base = rng.normal(size=8)
    up = base + 2.0 + rng.normal(0, 0.5, size=8)
    assert decide(*_ps(paired_evidence(up, base, "higher"))) == "supported"
    assert decide(*_ps(paired_evidence(up, base, "lower"))) == "contradicted"
    same = base + rng.normal(0, 0.05, size=8)
    assert decide(*_ps(paired_evidence(same, base, "similar", margin=0.5))) == "supported"
    assert decide(*_ps(paired_evidence(up, base, "similar", margin=0.5))) == "contradicted"
    assert decide(*_ps(paired_evidence(same, base, "not_higher", margin=0.5))) == "supported"
    assert decide(*_ps(paired_evidence(up, base, "not_higher", margin=0.5))) == "contradicted"
    ev = paired_evidence(up, base, "higher")
    assert ev.ci_lo <= ev.effect <= ev.ci_hi and ev.ci_lo > 0


def _ps(ev):
    return ev.p_for, ev.p_against


def test_holm_hand_example_and_nan():
    adjusted = holm_adjust([0.01, 0.04, np.nan, 0.03])
    assert adjusted[0] == pytest.approx(0.03) and adjusted[3] == pytest.approx(0.06)
    assert adjusted[1] == pytest.approx(0.06) and np.isnan(adjusted[2])


def test_holm_controls_family_wise_error():
    """500 reports of 6 null claims (5 seeds): any false "supported" in ≤ 5% of reports with Holm,
    ~1 − 0.95^6 ≈ 26% without."""
    rng = np.random.default_rng(15)
    reports, claims, seeds = 500, 6, 5
    d = rng.normal(size=(reports, claims, seeds))
    p = np.array([
        [paired_bootstrap_test(d[r, c], np.zeros(seeds), n_boot=300, seed=c, alternative="greater").p
         for c in range(claims)]
        for r in range(reports)
    ])
    raw_fwer = np.mean((p < ALPHA).any(axis=1))
    holm_fwer = np.mean([(holm_adjust(row) < ALPHA).any() for row in p])
    assert holm_fwer <= binomial_band(ALPHA, reports)[1]
    assert raw_fwer > 0.15


def test_holm_keeps_a_strong_effect():
    p = np.array([1e-4, 0.5, 0.7, 0.9])
    assert holm_adjust(p)[0] < ALPHA


# ---------------------------------------------------------------- seeds needed


def test_seeds_for_power_textbook_values():
    # one-sample t-test, Cohen's d = 0.5, power 0.8: 27 one-sided at 5%, 34 two-sided (G*Power)
    assert seeds_for_power(0.5, 1.0, alpha=0.05) == 27
    assert seeds_for_power(-0.5, 1.0, alpha=0.025) == 34
    assert seeds_for_power(0.0, 1.0) is None
    assert seeds_for_power(1e-6, 1.0, max_n=100) is None


@pytest.mark.parametrize("effect", [0.6, 1.2])
def test_seeds_for_power_delivers_its_power(effect):
    """Simulated t-test power is ≥ 80% at the returned n and < 80% one seed fewer."""
    n = seeds_for_power(effect, 1.0)
    rng = np.random.default_rng(16)

    def power(k: int) -> float:
        x = rng.normal(effect, 1.0, size=(20_000, k))
        return float(np.mean(stats.ttest_1samp(x, 0.0, axis=1, alternative="greater").pvalue < ALPHA))

    assert power(n) >= 0.8 - 0.012
    assert power(n - 1) < 0.8 + 0.012


def test_seeds_for_power_fits_the_bootstrap_test():
    """The planning number is for a t-test; the bootstrap-t the verdicts used gets ~80% there too."""
    effect, sd = 1.0, 1.0
    n = seeds_for_power(effect, sd)
    rng = np.random.default_rng(17)
    x = rng.normal(effect, sd, size=(600, n))
    hits = np.mean([
        paired_bootstrap_test(row, np.zeros(n), n_boot=400, seed=i, alternative="greater").p < ALPHA
        for i, row in enumerate(x)
    ])
    assert 0.8 - 0.08 <= hits


# ---------------------------------------------------------------- frames in: judge_claims


def claim(**kw) -> ClaimSpec:
    data = dict(id="c", source="[D] §4.5", statement="b beats a", arm="b", versus="a", direction="higher",
                metric={"kind": "final"})
    data.update(kw)
    return ClaimSpec.model_validate(data)


def sweep_frames(effects: dict[str, float], seeds: int = 6, groups=(4, 8), steps: int = 20, seed: int = 0,
                 updates: dict[str, int] | None = None, extra_keys: bool = True):
    """Runs and metrics of a synthetic sweep: per arm a planted shift of the eval score, of the
    mismatch slope and of the reward (steps to κ)."""
    rng = np.random.default_rng(seed)
    runs, points = [], []
    t = np.arange(steps)
    for g in groups:
        for arm, eff in effects.items():
            for s in range(seeds):
                rid = f"{arm}-G{g}-s{s}"
                runs.append({"run_id": rid, "arm": arm, "group": f"G={g}", "seed": s, "G": g, "axis.rollout.G": g})
                noise = rng.normal(0, 0.02, size=steps)
                series = {
                    EVAL: 0.5 + eff + noise,
                    "critic/score/mean": np.minimum(1.0, (0.05 + 0.02 * eff) * t) + noise,
                    "compute/update_steps_cum": (t + 1) * (updates or {}).get(arm, 2),
                    "compute/gen_tokens_cum": (t + 1) * 1000.0,
                }
                if extra_keys:
                    series["mismatch/rho_std"] = 0.01 + 0.001 * (1 + 5 * eff) * t + noise / 10
                    for k in range(4):
                        series[f"cancel/energy_b{k}"] = np.full(steps, 0.25 + (eff if k == 3 else 0))
                    series["cancel/flip_pos"] = 0.45 + noise
                    series["cancel/flip_neg"] = 0.46 + noise
                for key, values in series.items():
                    points += [(rid, int(i), key, float(v)) for i, v in zip(t, values)]
    return pd.DataFrame(runs), pd.DataFrame(points, columns=["run_id", "step", "key", "value"])


def test_judge_claims_finds_planted_effects_per_group():
    runs, metrics = sweep_frames({"a": 0.0, "b": 0.2})
    claims = [
        claim(id="final-up"),
        claim(id="final-down", direction="lower"),
        claim(id="growth", metric={"kind": "slope", "key": "mismatch/rho_std"}),
        claim(id="growth-lme", metric={"kind": "late_minus_early", "key": "mismatch/rho_std"}),
        claim(id="energy", metric={"kind": "mean", "key": "cancel/energy_b{last}"}),
        # κ 0.9: b reaches it ~1.5 steps sooner; at κ 0.5 the planted gain is under a step and G=8's
        # interval crosses 0 — the bootstrap-t called that "supported"
        claim(id="faster", direction="lower", metric={"kind": "steps_to_kappa", "kappa": 0.9}),
        claim(id="flip", arm="a", versus="a", direction="similar", margin=0.05,
              metric={"kind": "mean", "key": "cancel/flip_pos", "versus_key": "cancel/flip_neg"}),
    ]
    verdicts = judge_claims(claims, runs, metrics)
    by = {(v.claim_id, v.group): v for v in verdicts}
    assert len(verdicts) == 2 * len(claims)
    for group in ("G=4", "G=8"):
        assert by["final-up", group].status == "supported"
        assert by["final-up", group].effect == pytest.approx(0.2, abs=0.03)
        assert by["final-down", group].status == "contradicted"
        assert by["growth", group].status == "supported"
        assert by["growth-lme", group].status == "supported"
        assert by["energy", group].key == "cancel/energy_b3" and by["energy", group].status == "supported"
        assert by["faster", group].status == "supported"
        assert by["flip", group].status == "supported" and by["flip", group].effect == pytest.approx(-0.01)
    assert [v.group for v in verdicts[:2]] == ["G=4", "G=8"]
    # Holm over all judged rows: adjusted ≥ raw, and the JSON carries every number
    assert all(v.p_holm >= v.p for v in verdicts)
    records = json.loads(json.dumps(verdicts_as_records(verdicts), allow_nan=False))
    assert {"effect", "ci_lo", "ci_hi", "p", "p_holm", "seeds_needed", "verdict", "source"} <= set(records[0])
    rows = {(r["claim"], r["group"]): r for r in verdict_rows(verdicts)}
    assert rows["energy", "G=4"]["metric"] == "mean of cancel/energy_b3"
    down = by["final-down", "G=4"]
    assert rows["final-down", "G=4"]["verdict"] == "contradicted"
    assert rows["final-down", "G=4"]["p (Holm)"] == f"{down.p_against_holm:.3f}" or down.p_against_holm < 0.001
    assert rows["flip", "G=8"]["predicted"] == "similar (±0.05)"


def test_eval_glob_gives_one_verdict_per_benchmark():
    runs, metrics = sweep_frames({"a": 0.0, "b": 0.2}, groups=(4,), extra_keys=False)
    second = metrics[metrics["key"] == EVAL].assign(key="val-core/other/acc/mean_at_4")
    verdicts = judge_claims([claim()], runs, pd.concat([metrics, second]))
    assert sorted(v.key for v in verdicts) == [EVAL, "val-core/other/acc/mean_at_4"]


def test_null_sweeps_rarely_supported_through_frames():
    """End to end on frames: 12 null sweeps, each 2 groups → false "supported" stays near α."""
    supported = 0
    for i in range(12):
        runs, metrics = sweep_frames({"a": 0.0, "b": 0.0}, seeds=5, steps=3, seed=100 + i, extra_keys=False)
        verdicts = judge_claims([claim()], runs, metrics)
        supported += sum(v.status == "supported" for v in verdicts)
    assert supported / 24 <= binomial_band(ALPHA, 24)[1]


def test_inconclusive_says_how_many_seeds():
    runs, metrics = sweep_frames({"a": 0.0, "b": 0.01}, seeds=4, groups=(4,), extra_keys=False)
    [v] = judge_claims([claim()], runs, metrics)
    assert v.status == "inconclusive" and v.seeds_needed is not None and v.seeds_needed > 4
    [mirror] = judge_claims([claim(direction="lower")], runs, metrics)
    assert mirror.status == "inconclusive" and mirror.seeds_needed == v.seeds_needed
    # the same data, opposite predictions: the one the observed effect points against says so
    leaning, against = (v, mirror) if v.distance > 0 else (mirror, v)
    assert verdict_text(leaning) == f"inconclusive, ~{v.seeds_needed} seeds needed"
    assert verdict_text(against) == f"inconclusive, leans against; ~{v.seeds_needed} seeds needed"


def test_missing_inputs_are_named():
    runs, metrics = sweep_frames({"a": 0.0, "b": 0.2}, groups=(4,), extra_keys=False)
    [not_logged] = judge_claims([claim(metric={"kind": "mean", "key": "hacking/J"})], runs, metrics)
    assert not_logged.status == "cannot judge" and "not logged: hacking/J" in not_logged.reason
    no_arm = judge_claims([claim()], runs[runs["arm"] != "b"], metrics)
    assert "arm 'b' has no runs" in no_arm[0].reason
    no_kappa = judge_claims([claim(metric={"kind": "steps_to_kappa"})], runs, metrics)
    assert "no κ" in no_kappa[0].reason
    never = judge_claims([claim(metric={"kind": "steps_to_kappa", "kappa": 5.0})], runs, metrics)
    assert "never reached κ" in never[0].reason
    few = judge_claims([claim()], runs[runs["seed"] < 3], metrics)
    assert few[0].status == "cannot judge" and "3 shared seeds" in few[0].reason
    assert few[0].effect == pytest.approx(0.2, abs=0.05)  # the numbers are still shown


def test_unmatched_compute_is_not_judged_unless_allowed():
    runs, metrics = sweep_frames({"a": 0.0, "b": 0.2}, groups=(4,), updates={"a": 2, "b": 4}, extra_keys=False)
    [v] = judge_claims([claim()], runs, metrics)
    assert v.status == "cannot judge" and "not compute-matched" in v.reason and not v.compute_matched
    [forced] = judge_claims([claim()], runs, metrics, ComparisonOptions(allow_unmatched=True))
    assert forced.status == "supported" and "NOT compute-matched" in forced.notes
    assert verdict_text(forced) == "supported (NOT compute-matched)"  # the cell a reader sees says it too


# ---------------------------------------------------------------- the analysis additions they use


def test_late_minus_early_hand_computed():
    assert late_minus_early(np.arange(8.0), 0.25) == pytest.approx(6.0)  # (6+7)/2 − (0+1)/2
    assert late_minus_early([1.0, 3.0, 2.0], 0.5) == pytest.approx(0.5)  # ⌈1.5⌉ = 2 points each end
    with pytest.raises(ValueError, match="at least 2"):
        late_minus_early([1.0])


def test_one_sided_tests_mirror_each_other():
    rng = np.random.default_rng(18)
    x, base = rng.normal(0.3, 1, size=6), np.zeros(6)
    greater = paired_bootstrap_test(x, base, n_boot=2000, alternative="greater").p
    less = paired_bootstrap_test(x, base, n_boot=2000, alternative="less").p
    assert greater + less == pytest.approx(1.0, abs=0.01)
    constant = paired_bootstrap_test([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], n_boot=99, alternative="less")
    assert constant.p == 1.0
    with pytest.raises(ValueError, match="alternative"):
        paired_bootstrap_test(x, base, alternative="bigger")
