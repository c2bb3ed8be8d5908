"""The figures behind `sweep --until-decided`: simulated sweeps, no lab runs.

1. False "supported" under true nulls, over every look: the safe t-test's e-process (decided at
   the first look E ≥ 1/α, `cancelctl.stats.sequential`) vs fixed-n testing repeated at every look
   — the one-sided paired t-test and the report's own bootstrap-t (`paired_bootstrap_test`) — for
   one claim at α and for a sweep of 8 claims (Bonferroni α/8 on e-values; Holm at every look for
   the fixed-n tests, as `report` does), with Wilson 95% intervals on the rates. Differences with
   the lab's spread (D-P1-steps' sd, 43.3 steps), and heavy-tailed (t, 3 df) and skewed (centred
   lognormal, skewness ±0.78 and ±1.75) ones as robustness checks: the test assumes normal
   differences, and a long tail against the claim's direction makes every t-based test, this one
   included, reject too often at a few seeds.
2. Seeds used at the effect sizes the shipped lab claims observed (README Science; lab-claims-dfpo's
   claims table on seeds 20–24 for effect and sd, the others' sd derived from their 95% CI), both
   designs at α/8, the sequential one looking at 5, 7, 9, … seeds: (a) its mean seeds at the
   smallest budget giving 80% power vs the seeds a fixed design told the true effect needs for 80%
   power (`seeds_for_power`); (b) both planned for 80% power at |δ| = 0.5, as one must before
   knowing the effect: power and mean seeds at each observed effect; (c) power and mean seeds at the
   12-seed budget of `--max-seeds 12`.
3. The prior variance g: power by 12 seeds at those effects for g from 0.25 to 10 (the default, 2,
   is chosen here).
Usage: python benchmarks/bench_sequential.py [--sweeps 4000] [--boot-sweeps 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import stats

from cancelctl.stats.paired import holm_adjust, paired_bootstrap_test, seeds_for_power
from cancelctl.stats.rates import wilson_interval
from cancelctl.stats.sequential import PRIOR_VARIANCE, log_e_value

ALPHA = 0.05
CLAIMS = 8  # lab-claims-dfpo's claims: the Bonferroni family of a sweep
LAB_SD = 43.3  # D-P1-steps, dfpo − gspo steps to κ, seeds 20–24
LOOKS = {"3, 5, 7, 9, 11": [3, 5, 7, 9, 11], "5, 7, 9, 11, 12 (--batch 2 --max-seeds 12)": [5, 7, 9, 11, 12]}

# (claim, effect = arm − versus, sd of the per-seed differences, n, where the sd comes from)
LAB_EFFECTS = [
    ("D-P1-steps", 31.0, 43.32, 5, "table"),
    ("D-P2-jitter", 0.000252, 0.01845, 5, "table"),
    ("D-P3-final", -0.0308, 0.05477, 5, "table"),
    ("D-weight-dispersion", -0.003052, 0.0001729, 5, "table"),
    ("D-high-freq-energy", 0.00269, 0.004819, 5, "table"),
    ("D-grpo-fix", -0.0408, 0.1145, 5, "table"),
    ("H-delta0-growth", 4.75e-5, (1.09e-4 - 1.86e-5), 8, "CI"),
    ("H-delta0-J", -0.11, (-0.0649 + 0.159), 8, "CI"),
    ("H-delta3-final", -0.0854, (-0.0146 + 0.175), 8, "CI"),
    ("C-reward-balanced", 0.093, (0.182 - 0.014), 5, "CI"),
    ("C-positive-only-energy", -0.019, (-0.012 + 0.025), 5, "CI"),
    ("T-tis", 4.7e-6, (1.3e-5 + 2.8e-6), 5, "CI"),
]


def sd_of(width_or_sd: float, n: int, source: str) -> float:
    """The sd of the differences; from a 95% CI's width w as √n·w / (2 t_{0.975, n−1}) (the t interval's
    width; the report's bootstrap interval is of about that width)."""
    return width_or_sd if source == "table" else math.sqrt(n) * width_or_sd / (2 * stats.t.ppf(0.975, n - 1))


def t_at(d: np.ndarray, looks: list[int]) -> np.ndarray:
    """t statistics of d[..., :n] for each look n (last axis: looks)."""
    return np.stack([d[..., :n].mean(-1) / (d[..., :n].std(-1, ddof=1) / math.sqrt(n)) for n in looks], axis=-1)


def rate(hits: np.ndarray) -> str:
    k, n = int(hits.sum()), hits.size
    lo, hi = wilson_interval(k, n)
    return f"{k / n:.4f} [{lo:.4f}, {hi:.4f}]"


def false_positives(rng: np.random.Generator, sweeps: int, boot_sweeps: int) -> None:
    print(f"1. False 'supported' under true nulls, any look (rate [Wilson 95%]); α = {ALPHA}")
    draws = {"normal, lab sd": lambda size: rng.normal(0.0, LAB_SD, size), "t 3 df": lambda size: rng.standard_t(3, size)}
    for sigma in (0.25, 0.5):  # centred lognormal: skewness 0.78 and 1.75, away from and towards the claim
        skew = float(stats.lognorm(sigma).stats("s"))
        draws[f"skew {skew:+.2f} (lognormal)"] = lambda size, s=sigma: rng.lognormal(0.0, s, size) - math.exp(s * s / 2)
        draws[f"skew {-skew:+.2f} (lognormal)"] = lambda size, s=sigma: math.exp(s * s / 2) - rng.lognormal(0.0, s, size)
    for label, looks in LOOKS.items():
        print(f"  looks at {label} seeds")
        for name, draw in draws.items():
            one = draw((sweeps, looks[-1]))
            t = t_at(one, looks)
            seq = (log_e_value(t, np.array(looks), 1) >= math.log(1 / ALPHA)).any(-1)
            naive = (stats.t.sf(t, np.array(looks) - 1) < ALPHA).any(-1)
            family = draw((sweeps, CLAIMS, looks[-1]))
            tf = t_at(family, looks)  # sweeps × claims × looks
            seq_f = (log_e_value(tf, np.array(looks), 1) >= math.log(CLAIMS / ALPHA)).any((-1, -2))
            p = stats.t.sf(tf, np.array(looks) - 1)
            holm = np.stack([np.apply_along_axis(holm_adjust, 1, p[..., i]) for i in range(len(looks))], -1)
            naive_f = (holm < ALPHA).any((-1, -2))
            print(f"    {name:32s} 1 claim: sequential {rate(seq)}  repeated t-test {rate(naive)}")
            print(f"    {'':32s} {CLAIMS} claims: sequential {rate(seq_f)}  repeated t-test + Holm {rate(naive_f)}")
        if boot_sweeps:
            start = time.perf_counter()
            d = rng.normal(0.0, LAB_SD, (boot_sweeps, looks[-1]))
            hits = np.zeros(boot_sweeps, bool)
            for i in range(boot_sweeps):
                for n in looks:
                    if paired_bootstrap_test(d[i, :n], np.zeros(n), n_boot=999, seed=i, alternative="greater").p < ALPHA:
                        hits[i] = True
                        break
            print(f"    {'normal, lab sd':32s} 1 claim: repeated bootstrap-t (the report's test, 999 resamples) "
                  f"{rate(hits)}  [{boot_sweeps} sweeps, {time.perf_counter() - start:.0f} s]")


def crossing_seeds(rng: np.random.Generator, effect: float, sweeps: int, looks: np.ndarray, bar: float,
                   g: float = PRIOR_VARIANCE) -> np.ndarray:
    """Seeds at which each simulated claim is first decided in the right direction (inf: never by the
    last look); standardized effect, wrong-way decisions count as never."""
    d = rng.normal(effect, 1.0, (sweeps, int(looks[-1])))
    csum, csq = np.cumsum(d, 1), np.cumsum(d * d, 1)
    n = looks.astype(float)
    mean = csum[:, looks - 1] / n
    sd = np.sqrt(np.maximum(csq[:, looks - 1] - n * mean**2, 0.0) / (n - 1))
    t = mean / (sd / np.sqrt(n))
    right = log_e_value(t, n, 1, g) >= math.log(bar)
    wrong = log_e_value(t, n, -1, g) >= math.log(bar)
    first_right = np.where(right.any(1), right.argmax(1), len(looks))
    first_wrong = np.where(wrong.any(1), wrong.argmax(1), len(looks))
    index = np.where(first_right <= first_wrong, first_right, len(looks))
    return np.where(index < len(looks), n[np.minimum(index, len(looks) - 1)], np.inf)


def seeds_used(rng: np.random.Generator, sweeps: int, planned_delta: float = 0.5) -> None:
    level, bar = ALPHA / CLAIMS, CLAIMS / ALPHA
    deltas = [(claim, abs(effect) / sd_of(width, n, source)) for claim, effect, width, n, source in LAB_EFFECTS]
    print(f"\n2. Seeds at the lab claims' observed effects (|δ| = |effect|/sd), one-sided at α/{CLAIMS} = {level:.4f};"
          " the sequential design looks at 5, 7, 9, ... seeds")
    print("  a. 80% power at the true |δ| (a fixed design told the effect)")
    print(f"  {'claim':24s} {'|δ|':>6s} {'fixed n':>8s} {'seq budget':>10s} {'seq mean seeds':>14s} {'ratio':>6s}")
    ratios = []
    for claim, delta in deltas:
        fixed = seeds_for_power(delta, 1.0, alpha=level, power=0.8, max_n=100_000)
        budget, used = _budget_for(rng, delta, sweeps, bar, cap=int(min(max(12, 4 * (fixed or 0)), 1500)))
        ratio = used / fixed if fixed and budget else math.nan
        ratios += [ratio] if math.isfinite(ratio) else []
        print(f"  {claim:24s} {delta:6.2f} {fixed or '>1e5':>8} {budget or '—':>10} "
              f"{f'{used:.1f}' if budget else '—':>14s} {f'{ratio:.2f}' if math.isfinite(ratio) else '—':>6s}")
    print(f"  mean seeds / fixed n: median {np.median(ratios):.2f} (range {min(ratios):.2f}–{max(ratios):.2f})")

    planned = seeds_for_power(planned_delta, 1.0, alpha=level, power=0.8)
    budget, _ = _budget_for(rng, planned_delta, sweeps, bar, cap=4 * planned)
    print(f"  b. both planned for 80% power at |δ| = {planned_delta} (the effect is not known before): fixed n = {planned}, "
          f"sequential budget {budget}")
    print(f"  {'claim':24s} {'|δ|':>6s} {'fixed power':>11s} {'seq power':>9s} {'seq mean seeds':>14s} {'vs fixed n':>10s}")
    for claim, delta in deltas:
        crossed = crossing_seeds(rng, delta, sweeps, _looks(budget), bar)
        fixed_power = float(stats.nct.sf(stats.t.ppf(1 - level, planned - 1), planned - 1, math.sqrt(planned) * delta))
        used = float(np.minimum(crossed, budget).mean())
        print(f"  {claim:24s} {delta:6.2f} {fixed_power:11.3f} {np.mean(crossed <= budget):9.3f} {used:14.1f} "
              f"{used / planned:10.2f}")

    print("  c. at the budget of --max-seeds 12 (looks 5, 7, 9, 11, 12)")
    print(f"  {'claim':24s} {'|δ|':>6s} {'seq power':>9s} {'seq mean seeds':>14s} {'fixed-12 power':>14s}")
    for claim, delta in deltas:
        crossed = crossing_seeds(rng, delta, sweeps, _looks(12), bar)
        fixed12 = float(stats.nct.sf(stats.t.ppf(1 - level, 11), 11, math.sqrt(12) * delta))
        print(f"  {claim:24s} {delta:6.2f} {np.mean(crossed <= 12):9.3f} {np.minimum(crossed, 12).mean():14.1f} "
              f"{fixed12:14.3f}")


def _looks(cap: int) -> np.ndarray:
    looks = np.arange(5, cap + 1, 2)
    return looks if looks[-1] == cap else np.append(looks, cap)


def _budget_for(rng: np.random.Generator, delta: float, sweeps: int, bar: float, cap: int) -> tuple[int | None, float]:
    """The smallest budget (a look) at which the sequential design reaches 80% power, and its mean seeds."""
    looks = _looks(cap)
    crossed = crossing_seeds(rng, delta, sweeps, looks, bar)
    for candidate in looks:
        if np.mean(crossed <= candidate) >= 0.8:
            return int(candidate), float(np.minimum(crossed, candidate).mean())
    return None, math.nan


def prior_variance(rng: np.random.Generator, sweeps: int) -> None:
    bar = CLAIMS / ALPHA
    looks = np.array([5, 7, 9, 11, 12])
    deltas = sorted({round(abs(e) / sd_of(w, n, s), 2) for _, e, w, n, s in LAB_EFFECTS if abs(e) / sd_of(w, n, s) > 0.1})
    print(f"\n3. Power by 12 seeds (looks 5, 7, 9, 11, 12; α/{CLAIMS}) by prior variance g, at the lab's |δ|")
    print("  g      " + " ".join(f"{d:>6.2f}" for d in deltas))
    for g in (0.25, 0.5, 1.0, 2.0, 4.0, 10.0):
        powers = [float(np.mean(crossing_seeds(rng, d, sweeps, looks, bar, g) <= 12)) for d in deltas]
        print(f"  {g:<6g} " + " ".join(f"{p:6.3f}" for p in powers) + ("   (default)" if g == PRIOR_VARIANCE else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=4000, help="simulated sweeps per figure (≥ 2000)")
    parser.add_argument("--boot-sweeps", type=int, default=1000, help="sweeps for the repeated bootstrap-t (0: skip)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    false_positives(rng, args.sweeps, args.boot_sweeps)
    seeds_used(rng, args.sweeps)
    prior_variance(rng, args.sweeps)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
