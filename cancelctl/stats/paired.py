"""Paired tests over shared seeds [D Table 1: "paired bootstrap test"], Holm's adjustment across a
family of tests, and the number of seeds a paired test needs for a given power.

The report's paired test is Student's paired t-test (`paired_t_test`): the inversion of the report's
95% interval (`intervals.student_t_ci`), so a p-value and the interval printed beside it always say
the same thing, and exact for normal differences at every n ≥ 2. The bootstrap-t
(`paired_bootstrap_test`) it replaced stays to compare with: at 4–5 seeds of a discrete metric
(steps to κ, whole steps) its resampled t is degenerate — with differences {−10, −10, 0, 0} no
resample is as extreme as the data, so p = 1/(1 + resamples) while the t interval is [−14.2, +4.2]
(tests/stats/test_verdicts.py measures both).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats  # a dependency of mlflow; used for the t and noncentral-t distributions only

from cancelctl.stats.samples import SeedLike, finite_1d

# below this many shared seeds the bootstrap-t has nothing to resample (see paired_bootstrap_test)
MIN_PAIRED_SEEDS = 3
# below this many the t-test has no degrees of freedom (ν = n − 1)
MIN_T_SEEDS = 2


@dataclass(frozen=True)
class PairedTest:
    """Mean paired difference (x − baseline) and its p-value over n shared seeds; NaN where the test
    has too few pairs (`MIN_T_SEEDS` for the t-test, `MIN_PAIRED_SEEDS` for the bootstrap-t)."""

    delta: float
    p: float
    n: int


def _paired_differences(x, baseline, alternative: str, test: str) -> np.ndarray:
    """x − baseline, seed by seed, after checking the alternative and that both sides pair up."""
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")
    xs = finite_1d(x, f"{test} x")
    base = finite_1d(baseline, f"{test} baseline")
    if xs.size != base.size:
        raise ValueError(f"{test}: {xs.size} values vs {base.size} baseline values; pair by seed first")
    return xs - base


def paired_t_test(
    x: Sequence[float] | np.ndarray,
    baseline: Sequence[float] | np.ndarray,
    alternative: str = "two-sided",
    shift: float = 0.0,
) -> PairedTest:
    """Student's paired t-test over shared seeds (Student 1908), of mean(x − baseline) against `shift`.

    `x[i]` and `baseline[i]` must come from the same seed. With d = x − baseline over n seeds:
    t = (mean(d) − shift) / (sd(d)/√n), ν = n − 1; p = P(T_ν ≥ t) for `alternative="greater"`
    (H1: mean > shift), P(T_ν ≤ t) for "less", 2·P(T_ν ≥ |t|) two-sided. It is the test the report's
    interval inverts: two-sided p < 1 − c exactly when the c interval of `student_t_ci` (mean ±
    `t_half_width`) leaves out `shift`, and one-sided p < (1 − c)/2 exactly when it lies wholly on
    that side.

    p is NaN below `MIN_T_SEEDS` pairs. Differences all equal (sd 0, tested exactly: np.std can give
    ~1e-17 for them) give t = ±inf: p = 0 on the side of their mean (its interval is that one point),
    1 on the other side and when the mean is `shift`.
    """
    diffs = _paired_differences(x, baseline, alternative, "paired_t_test")
    n = diffs.size
    delta = float(diffs.mean())
    if n < MIN_T_SEEDS:
        return PairedTest(delta, float("nan"), n)
    centered = delta - float(shift)
    if np.ptp(diffs) == 0.0:
        if centered == 0.0:
            return PairedTest(delta, 1.0, n)
        t = float(np.copysign(np.inf, centered))
    else:
        t = centered / (float(diffs.std(ddof=1)) / np.sqrt(n))
    nu = n - 1
    if alternative == "greater":
        p = float(stats.t.sf(t, nu))
    elif alternative == "less":
        p = float(stats.t.cdf(t, nu))
    else:
        p = float(2.0 * stats.t.sf(abs(t), nu))
    return PairedTest(delta, min(p, 1.0), n)


def paired_bootstrap_test(
    x: Sequence[float] | np.ndarray,
    baseline: Sequence[float] | np.ndarray,
    n_boot: int = 10_000,
    seed: SeedLike = 0,
    alternative: str = "two-sided",
) -> PairedTest:
    """Paired bootstrap test over shared seeds [D Table 1: "paired bootstrap test"], two-sided; kept
    to compare with `paired_t_test`, which the report uses (see the module docstring).

    `x[i]` and `baseline[i]` must come from the same seed. The per-seed differences d are resampled
    jointly (one index per seed, so the pairing is kept) and the studentized mean is bootstrapped
    (bootstrap-t; Efron & Tibshirani 1993, §16.4, test of a mean):
    t = mean(d) / (sd(d)/√n), t* = (mean(d*) − mean(d)) / (sd(d*)/√n),
    p = (1 + #{|t*| ≥ |t|}) / (1 + #resamples). Resamples whose seeds are all the same index have
    sd = 0 and carry no t; they are left out.

    Why studentized: the plain re-centred mean bootstrap rejects a true null well above the nominal
    5% at 5 and even at 10 seeds (its resampled means have normal, not t, tails: `intervals.expanded_alpha`);
    the studentized one comes much closer (at 3 seeds it is still too liberal: tests/stats/test_verdicts.py).
    p is NaN below 3 shared seeds (with 2, every usable resample reproduces the data). If every seed
    shows the same difference, p is 1 when it is 0 and 1/(1 + n_boot) otherwise.

    `alternative="greater"` / `"less"`: one-sided, H1 mean(x − baseline) > 0 / < 0, counting
    t* ≥ t / t* ≤ t (a directional claim is tested one-sided; see cancelctl.stats.verdicts).
    """
    diffs = _paired_differences(x, baseline, alternative, "paired_bootstrap_test")
    n = diffs.size
    delta = float(diffs.mean())
    if n < MIN_PAIRED_SEEDS:
        return PairedTest(delta, float("nan"), n)
    # "all differences equal" is tested exactly (max == min): their sd can come out 0 or ~1e-17
    # depending on the CPU's summation order, and a ~1e-17 sd would make t any huge number.
    if np.ptp(diffs) == 0.0:
        agrees = {"two-sided": delta != 0.0, "greater": delta > 0.0, "less": delta < 0.0}[alternative]
        return PairedTest(delta, 1.0 / (1.0 + n_boot) if agrees else 1.0, n)
    t_observed = delta / (float(diffs.std(ddof=1)) / np.sqrt(n))
    rng = np.random.default_rng(seed)
    resampled = diffs[rng.integers(0, n, size=(n_boot, n))]
    usable = np.ptp(resampled, axis=1) > 0.0  # exactly: not every drawn seed the same difference
    resampled = resampled[usable]
    t_star = (resampled.mean(axis=1) - delta) / (resampled.std(axis=1, ddof=1) / np.sqrt(n))
    if alternative == "greater":
        extreme = t_star >= t_observed
    elif alternative == "less":
        extreme = t_star <= t_observed
    else:
        extreme = np.abs(t_star) >= abs(t_observed)
    p = (1.0 + float(np.sum(extreme))) / (1.0 + float(usable.sum()))
    return PairedTest(delta, min(p, 1.0), n)


def holm_adjust(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979): rejecting where adjusted p < α keeps the
    family-wise error rate ≤ α for any dependence between the tests.

    Sorted ascending, p_(i) becomes max_{j ≤ i} min(1, (m − j + 1) p_(j)). NaN entries (tests that
    were not run) stay NaN and do not count in m.
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = finite.size
    if m == 0:
        return out
    order = finite[np.argsort(p[finite], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


def seeds_for_power(
    effect: float, sd: float, alpha: float = 0.05, power: float = 0.8, max_n: int = 10_000
) -> int | None:
    """Smallest number of paired seeds at which a one-sided paired t-test at level `alpha` has
    `power` against a true mean difference `effect` with per-seed difference sd `sd`.

    Power at n seeds is 1 − F_nct(t_{1−α, n−1}; n − 1, √n |effect| / sd), F_nct the noncentral-t
    cdf (the exact power of the t-test for normal differences): the planning number of
    `paired_t_test` (a verdict's one-sided test is at α/2: see `cancelctl.stats.evidence`). None
    when effect is 0 or not finite, or more than `max_n` seeds would be needed; 2 when sd is 0 and
    effect is not.
    """
    if not np.isfinite(effect) or effect == 0.0 or not np.isfinite(sd):
        return None
    if sd == 0.0:
        return 2
    standardized = abs(effect) / sd

    def achieved(n: int) -> float:
        return float(stats.nct.sf(stats.t.ppf(1.0 - alpha, n - 1), n - 1, np.sqrt(n) * standardized))

    # power rises with n: double until enough, then bisect (a few cdf calls, not max_n)
    lo, hi = 1, 2
    while achieved(hi) < power:
        if hi >= max_n:
            return None
        lo, hi = hi, min(2 * hi, max_n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if achieved(mid) >= power else (mid, hi)
    return hi
