"""No false verdict: a verdict never contradicts the 95% interval shown beside it (docs/claims.md#claims).

Every claim of every shipped sweep file (experiments/*.yaml) is judged on synthetic frames with
planted effects of several sizes — continuous metrics and whole-step ones (steps to κ logged every
10 steps, the lab's discrete case), outcome claims from random collapses — fixed-n and at looks of
a sweep run until decided; every supported row's interval must lie wholly inside the range the claim
predicts and every contradicted row's wholly outside it. The oracle below is written out here, not
taken from `cancelctl.stats.evidence`. Then the false "supported" rate at 4–5 seeds of a discrete
metric with no effect, which must stay at or below α.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import yaml
from project_paths import EXPERIMENTS

from cancelctl.spec.claims import ClaimSpec
from cancelctl.stats.evidence import decide, paired_evidence
from cancelctl.stats.frames import split_by_key
from cancelctl.stats.sequential_verdicts import judge_looks
from cancelctl.stats.verdicts import judge_claims

ALPHA = 0.05
STEPS = 100
KAPPA = 0.5
EVAL = "val-core/lab/acc/mean_at_4"
AXIS = "rollout.G"


def shipped_claims() -> dict[str, list[ClaimSpec]]:
    files = {}
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        claims = yaml.safe_load(path.read_text()).get("claims") or []
        if claims:
            files[path.name] = [ClaimSpec.model_validate(c) for c in claims]
    return files


def disagreement(v) -> str:
    """Why the row's verdict and its 95% interval disagree ('' when they agree)."""
    if v.status not in ("supported", "contradicted"):
        return ""
    center = 0.5 if v.kind == "alert_order" else 0.0  # an alert order's effect is a share, against 1/2
    m = v.margin if math.isfinite(v.margin) else 0.0
    inside = {  # (lower, upper) of the effect the claim predicts, open
        "higher": (center, math.inf), "lower": (-math.inf, center), "not_higher": (-math.inf, m),
        "not_lower": (-m, math.inf), "similar": (-m, m),
    }[v.direction]
    lo, hi = v.ci_lo, v.ci_hi
    if v.status == "supported":
        agrees = inside[0] < lo and hi < inside[1]
    else:
        agrees = hi < inside[0] or lo > inside[1]
    if agrees:
        return ""
    return (f"{v.claim_id} ({v.group}, {v.kind}, {v.direction}): {v.status} with effect {v.effect:+.4g} "
            f"[{lo:+.4g}, {hi:+.4g}], n {v.n_seeds}, p {v.p:.3g}/{v.p_against:.3g}, Holm {v.p_holm:.3g}/{v.p_against_holm:.3g}")


def sweep_frames(claims: list[ClaimSpec], seeds: int, rng: np.random.Generator, every: int) -> tuple:
    """runs, metrics and alerts for the claims' arms: per arm and metric a planted effect (none, small
    or large, either way), seeds shared by the arms of a seed, points every `every` steps."""
    arms = sorted({a for c in claims for a in c.arms} | {c.versus for c in claims if c.versus})
    along = any(c.along is not None for c in claims)
    gs = (4, 8) if along else (4,)
    effect = {(arm, what): rng.choice([0.0, 0.0, 0.5, 2.0]) * rng.choice([-1, 1])
              for arm in arms for what in ("reward", "eval", "slope", "level", "collapse")}
    steps = np.arange(every, STEPS + 1, every)
    runs, points, alerts = [], [], []
    for g in gs:
        for seed in range(seeds):
            shared = np.random.default_rng(seed + 100 * g).normal(0, 1)  # the seed's own luck, every arm
            for arm in arms:
                run_id = f"{arm}-G{g}-s{seed}"
                runs.append({"run_id": run_id, "arm": arm, "group": f"{AXIS}={g}" if along else "", "seed": seed,
                             "G": g, f"axis.{AXIS}": g})
                noise = rng.normal(0, 1, steps.size)
                rate = 0.01 * (1 + 0.1 * effect[arm, "reward"]) * (1 + 0.02 * shared) * (1 + 0.01 * g)
                level = effect[arm, "level"]
                series = {
                    "critic/score/mean": np.minimum(1.0, rate * steps) + 0.01 * noise,
                    EVAL: 0.5 + 0.02 * effect[arm, "eval"] + 0.01 * shared + 0.01 * noise,
                    "mismatch/rho_std": 0.01 + (1e-3 + 2e-4 * effect[arm, "slope"]) * steps + 5e-3 * noise,
                    "hacking/J": 0.5 + 2e-4 * effect[arm, "slope"] * steps + 0.02 * noise,
                    "dfpo/weight_dispersion": 0.2 + 0.01 * level + 0.01 * shared + 0.005 * noise,
                    "cancel/flip_pos": 0.15 + 0.01 * level + 0.01 * noise,
                    "cancel/flip_neg": 0.15 + 0.01 * noise,
                    "actor/entropy": 1.0 + 0.01 * noise,
                    **{f"cancel/energy_b{b}": 0.25 + (0.01 * level if b == 3 else 0.0) + 0.005 * noise for b in range(4)},
                    "compute/gen_tokens_cum": 1000.0 * steps,
                    "compute/update_steps_cum": 2.0 * steps,
                    "compute/hours_cum": 0.01 * steps,
                }
                for key, values in series.items():
                    points += [(run_id, int(s), key, float(v)) for s, v in zip(steps, values)]
                if rng.random() < 0.5 + 0.22 * effect[arm, "collapse"]:  # a collapse, often after a mismatch alert
                    at = int(rng.integers(20, STEPS))
                    alerts.append((run_id, str(rng.choice(["entropy_collapse", "reward_collapse"])), at, "warn"))
                    if rng.random() < 0.8:
                        alerts.append((run_id, "mismatch_growth", int(rng.integers(5, at)), "warn"))
    return (pd.DataFrame(runs), pd.DataFrame(points, columns=["run_id", "step", "key", "value"]),
            pd.DataFrame(alerts, columns=["run_id", "rule", "step", "action"]))


@pytest.mark.parametrize("name", sorted(shipped_claims()))
def test_every_shipped_claims_verdict_agrees_with_its_interval(name):
    """Fixed-n verdicts and the verdicts of a sweep run until decided (looks at 4, 6 and 8 seeds),
    over random effects, for every claim of `name`; at least some rows must be decided."""
    claims = shipped_claims()[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    problems, decided = [], 0
    for trial in range(2):
        runs, metrics, alerts = sweep_frames(claims, 8, rng, every=10 if trial % 2 else 1)
        metrics = split_by_key(metrics)  # once for the three looks
        per_look = [judge_claims(claims, runs[runs["seed"] < n], metrics, kappa=KAPPA, alerts=alerts, stops={})
                    for n in (4, 6, 8)]
        rows = [v for look in per_look for v in look] + [row.verdict for row in judge_looks(per_look)]
        decided += sum(v.status in ("supported", "contradicted") for v in rows)
        problems += [why for why in map(disagreement, rows) if why]
    assert problems == []
    assert decided >= 5  # the check is not empty


def steps_sweep(steps_to_kappa: dict[str, list[int]]) -> tuple:
    """Reward curves that reach κ exactly at the given (logged) step, logged every 10 steps."""
    runs, points = [], []
    for arm, crossings in steps_to_kappa.items():
        for seed, cross in enumerate(crossings):
            run_id = f"{arm}-s{seed}"
            runs.append({"run_id": run_id, "arm": arm, "group": "", "seed": seed, "G": 8})
            for step in range(10, 101, 10):
                points += [(run_id, step, "critic/score/mean", 1.0 if step >= cross else 0.0),
                           (run_id, step, "compute/gen_tokens_cum", 1000.0 * step),
                           (run_id, step, "compute/update_steps_cum", 2.0 * step)]
    return pd.DataFrame(runs), pd.DataFrame(points, columns=["run_id", "step", "key", "value"])


def test_the_lab_demos_whole_step_case_is_not_supported():
    """The case found in a lab run: D-P1-steps at G = 8 on four seeds, steps to κ 10 apart — differences
    {−10, −10, 0, 0}, effect −5.0 [−14.2, +4.2]. The bootstrap-t read it "supported", p < 0.001 (no
    resample of two values is as extreme as the data); its interval crosses 0."""
    [claim] = [c for c in shipped_claims()["lab-claims-dfpo.yaml"] if c.id == "D-P1-steps"]
    runs, metrics = steps_sweep({"dfpo-min-replace": [20, 20, 30, 30], "gspo": [30, 30, 30, 30]})
    [v] = judge_claims([claim], runs, metrics, kappa=KAPPA)
    assert (v.effect, round(v.ci_lo, 1), round(v.ci_hi, 1)) == (-5.0, -14.2, 4.2)
    assert v.status == "inconclusive" and disagreement(v) == ""
    assert v.p == pytest.approx(2 * 0.0908, abs=1e-3)  # the paired t's, doubled: the interval's own test


def test_readmes_delta0_growth_is_not_supported_with_an_interval_that_reaches_0():
    """README's example row: H-delta0-growth, +4.75e-05 [−1.63e−06, +9.67e−05] on 8 seeds, was
    "supported" (Holm 0.013): differences with that mean and that interval."""
    n, mean, lo = 8, 4.75e-5, -1.63e-6
    sd = (mean - lo) / 2.3646243 * math.sqrt(n)  # half width = t(0.975, 7) · sd/√n
    z = np.array([-1.5, -1.0, -0.5, -0.1, 0.1, 0.5, 1.0, 1.5])
    d = mean + sd * z / z.std(ddof=1)
    ev = paired_evidence(d, np.zeros(n), "higher")
    assert ev.ci_lo == pytest.approx(lo, rel=1e-4) and ev.ci_lo < 0
    assert ev.p_for > ALPHA and decide(ev.p_for, ev.p_against) == "inconclusive"


# ---------------------------------------------------------------- the false "supported" rate, discrete


def discrete_null(rng: np.random.Generator, kind: str, reps: int, n: int) -> np.ndarray:
    """reps × (arm, versus) × n seeds of steps to κ with no effect: whole steps on a 10-step log grid."""
    if kind == "two values":
        return 10 * rng.integers(2, 4, size=(reps, 2, n))
    if kind == "three values":
        return 10 * rng.integers(2, 5, size=(reps, 2, n))
    return 10 * rng.poisson(3, size=(reps, 2, n))  # a long right tail of late crossings


@pytest.mark.parametrize("n", [4, 5])
@pytest.mark.parametrize("kind", ["two values", "three values", "poisson"])
def test_false_supported_rate_with_a_discrete_metric_stays_at_or_below_alpha(kind, n):
    """2,000 null claims "lower" (steps to κ) per case: the verdict's false "supported" rate, with its
    Wilson 95% upper bound, at or below α = 0.05. Measured here: 0.25%, 0.85%, 1.7% at 4 seeds (two
    values, three values, Poisson) and 1.25%, 2.35%, 2.1% at 5 (each side at α/2); the bootstrap-t
    verdict it replaced: 14.0%, 12.7%, 7.3% at 4 seeds and 6.7%, 6.5%, 4.8% at 5."""
    rng = np.random.default_rng(35 * n + len(kind))
    reps = 2000
    draws = discrete_null(rng, kind, reps, n)
    verdicts = [paired_evidence(arm, versus, "lower") for arm, versus in draws]
    supported = sum(decide(ev.p_for, ev.p_against) == "supported" for ev in verdicts)
    rate = supported / reps
    z = 1.96
    upper = (rate + z * z / (2 * reps) + z * math.sqrt(rate * (1 - rate) / reps + z * z / (4 * reps * reps))) / (1 + z * z / reps)
    print(f"{kind}, {n} seeds: false supported {supported}/{reps} = {rate:.4f} (Wilson upper {upper:.4f})")
    assert upper <= ALPHA


def test_a_row_decided_alone_but_not_after_holm_says_so():
    """An interval wholly on one side beside a bare "leans against" reads as a contradiction;
    the cell says its own test decided and Holm across the report's claims did not."""
    from cancelctl.report.claims import verdict_text
    from cancelctl.stats.verdicts import Verdict

    base = Verdict("c", "src", "s", "m", "k", "k", "higher", "a", "b", "", "inconclusive", n_seeds=8, kind="mean",
                   seeds_needed=21, sd=1.0)
    assert verdict_text(replace(base, p=0.04, p_holm=0.3, p_against=1.0, p_against_holm=1.0, distance=0.5)) \
        == "inconclusive after Holm; ~21 seeds needed"
    assert verdict_text(replace(base, p=1.0, p_holm=1.0, p_against=0.01, p_against_holm=0.08, distance=-0.5)) \
        == "inconclusive after Holm, leans against; ~21 seeds needed"
    assert verdict_text(replace(base, p=0.3, p_holm=1.0, p_against=1.0, p_against_holm=1.0, distance=0.5)) \
        == "inconclusive, ~21 seeds needed"


def test_an_outcome_verdict_its_interval_does_not_back_stays_inconclusive():
    """A time to collapse's log-rank is not its interval's inversion (the restricted-mean difference):
    a decision its 95% interval does not back is not printed; the cell and the note say why (shown on
    rows built by hand, a rate's among them: `agreeing` holds any kind)."""
    from cancelctl.report.claims import verdict_text
    from cancelctl.stats.verdicts import Verdict, agreeing

    rate = Verdict("c", "src", "s", "m", "k", "k", "higher", "a", "b", "", "supported", kind="collapse_rate",
                   n_seeds=6, n_versus=6, effect=0.5, ci_lo=-0.02, ci_hi=0.8, distance=0.5, p=0.01, p_holm=0.02,
                   p_against=1.0, p_against_holm=1.0)
    held = agreeing(rate)
    assert held.status == "inconclusive" and "reaches the claim's boundary" in held.notes
    assert verdict_text(held) == "inconclusive (test and 95% CI disagree)"
    backed = replace(rate, ci_lo=0.1)
    assert agreeing(backed) == backed
    order = replace(rate, kind="alert_order", effect=0.9, ci_lo=0.45, ci_hi=1.0)  # a share, against 1/2
    assert agreeing(order).status == "inconclusive" and agreeing(replace(order, ci_lo=0.55)).status == "supported"
