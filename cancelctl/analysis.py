"""Statistics for sweep reports: small pure functions, arrays in, numbers out (rliable style).

Sources: [D] = shared/papers/000_*.txt (DFPO), SPEC.md "Reports". Where a paper leaves a choice open
the decision is stated in the docstring. Nothing here plots, prints or touches MLflow.

The bootstrap resamples seeds. With the 3–5 seeds of a typical RL sweep the textbook percentile
interval and the re-centred mean test are anti-conservative (Colas et al. 2018, "How many random
seeds?"), so the interval uses expanded percentile levels and the test is studentized; both choices
are measured in tests/test_analysis.py. Reports show n next to every interval.

Length: small independent statistics functions (rliable style), each with its own tests; splitting
them would only scatter the equations the report cites.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pandas as pd
from scipy import stats  # a dependency of mlflow; used for the t quantile only

SeedLike = int | np.random.Generator | None

# compute axis name -> cumulative metric key logged by every backend (SPEC "Per-step metrics")
COMPUTE_KEYS = {
    "tokens": "compute/gen_tokens_cum",
    "updates": "compute/update_steps_cum",
    "hours": "compute/hours_cum",
}
# below this many shared seeds a paired test has nothing to resample (see paired_bootstrap_test)
MIN_PAIRED_SEEDS = 3
COMPUTE_LABELS = {"tokens": "generated tokens", "updates": "optimizer update steps", "hours": "GPU-hours"}


# ---------------------------------------------------------------- intervals and tests


@dataclass(frozen=True)
class Interval:
    """Mean and percentile-bootstrap interval; unpacks as (mean, lo, hi).

    `degenerate` flags n == 1: there is no spread to resample, so lo == hi == mean and the interval
    must not be read as certainty.
    """

    mean: float
    lo: float
    hi: float
    n: int

    @property
    def degenerate(self) -> bool:
        return self.n < 2

    def __iter__(self) -> Iterator[float]:
        return iter((self.mean, self.lo, self.hi))


@dataclass(frozen=True)
class PairedTest:
    """Mean paired difference (x − baseline) and its two-sided bootstrap p-value over n shared seeds.

    p is NaN below `MIN_PAIRED_SEEDS` shared seeds (too few pairs to test).
    """

    delta: float
    p: float
    n: int


def _finite_1d(values: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError(f"{what}: no values")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what}: values must be finite (drop missing runs before calling)")
    return arr


def expanded_alpha(alpha: float, n: int) -> float:
    """Tail level for the expanded percentile interval (Hesterberg 2015, "What teachers should know
    about the bootstrap", Am. Stat. 69(4)): Φ(−√(n/(n−1)) · t_{1−α, n−1}).

    The plain percentile interval is too narrow for small n (resampled means have variance
    s²(n−1)/n² and normal, not t, tails): at n = 10 normal seeds it covers ~90% for a nominal 95%.
    Widening the quantile levels this way restores ~94.5% at n = 10. For n ≤ 5 no percentile
    interval can reach 95%: the resampled means never leave [min, max] of the seeds.
    """
    t_quantile = stats.t.ppf(1.0 - alpha, n - 1)
    return float(stats.norm.cdf(-np.sqrt(n / (n - 1)) * t_quantile))


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    n_boot: int = 10_000,
    seed: SeedLike = 0,
    method: str = "expanded",
) -> Interval:
    """Mean over seeds with a percentile-bootstrap confidence interval [D Table 1: mean ± 95% CI].

    Resamples the seeds with replacement `n_boot` times and takes quantiles of the resampled means:
    at (1−c)/2 and (1+c)/2 for `method="percentile"` (Efron's interval, as rliable), or at the
    expanded levels of `expanded_alpha` for `method="expanded"` (default; see there why).
    n == 1 gives lo == hi == the value, flagged by `Interval.degenerate`.
    """
    arr = _finite_1d(values, "bootstrap_ci")
    mean = float(arr.mean())
    if arr.size == 1:
        return Interval(mean, mean, mean, 1)
    alpha = (1.0 - confidence) / 2.0
    if method == "expanded":
        alpha = expanded_alpha(alpha, arr.size)
    elif method != "percentile":
        raise ValueError(f"method must be 'expanded' or 'percentile', got {method!r}")
    rng = np.random.default_rng(seed)
    resampled_means = arr[rng.integers(0, arr.size, size=(n_boot, arr.size))].mean(axis=1)
    lo, hi = np.quantile(resampled_means, [alpha, 1.0 - alpha])
    return Interval(mean, float(lo), float(hi), int(arr.size))



def paired_bootstrap_test(
    x: Sequence[float] | np.ndarray,
    baseline: Sequence[float] | np.ndarray,
    n_boot: int = 10_000,
    seed: SeedLike = 0,
    alternative: str = "two-sided",
) -> PairedTest:
    """Paired bootstrap test over shared seeds [D Table 1: "paired bootstrap test"], two-sided.

    `x[i]` and `baseline[i]` must come from the same seed. The per-seed differences d are resampled
    jointly (one index per seed, so the pairing is kept) and the studentized mean is bootstrapped
    (bootstrap-t; Efron & Tibshirani 1993, §16.4, test of a mean):
    t = mean(d) / (sd(d)/√n), t* = (mean(d*) − mean(d)) / (sd(d*)/√n),
    p = (1 + #{|t*| ≥ |t|}) / (1 + #resamples). Resamples whose seeds are all the same index have
    sd = 0 and carry no t; they are left out.

    Why studentized: the plain re-centred mean bootstrap rejects a true null ~14% of the time at
    5 seeds and ~8% at 10 (nominal 5%); bootstrap-t stays at or under 5% from 3 seeds up.
    p is NaN below 3 shared seeds (with 2, every usable resample reproduces the data). If every seed
    shows the same difference, p is 1 when it is 0 and 1/(1 + n_boot) otherwise.

    `alternative="greater"` / `"less"`: one-sided, H1 mean(x − baseline) > 0 / < 0, counting
    t* ≥ t / t* ≤ t (a directional claim is tested one-sided; see cancelctl.verdicts).
    """
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")
    xs = _finite_1d(x, "paired_bootstrap_test x")
    base = _finite_1d(baseline, "paired_bootstrap_test baseline")
    if xs.size != base.size:
        raise ValueError(f"paired_bootstrap_test: {xs.size} values vs {base.size} baseline values; pair by seed first")
    diffs = xs - base
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
    cdf (the exact power of the t-test for normal differences). The bootstrap-t test of
    `paired_bootstrap_test` rejects at about the t-test's rate from 4 seeds up (tests/test_verdicts.py),
    so this is the planning number for it. None when effect is 0 or not finite, or more than
    `max_n` seeds would be needed; 2 when sd is 0 and effect is not.
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


# ---------------------------------------------------------------- curve statistics


def moving_average(values: Sequence[float] | np.ndarray, window: int = 1) -> np.ndarray:
    """Trailing (causal) moving average; the first window−1 points average what exists so far.

    Causal so that a threshold crossing never uses rewards logged after the crossing step.
    """
    arr = np.asarray(values, dtype=float)
    if window < 1:
        raise ValueError("window must be >= 1")
    if window == 1 or arr.size == 0:
        return arr.copy()
    csum = np.cumsum(arr)
    out = csum.copy()
    out[window:] = csum[window:] - csum[:-window]
    counts = np.minimum(np.arange(1, arr.size + 1), window)
    return out / counts


def first_crossing(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    threshold: float,
    smooth_window: int = 1,
) -> float | None:
    """x at the first point (in x order) where y, optionally smoothed, is ≥ threshold; None if never.

    No interpolation between logged points: the answer is a compute that was actually logged.
    Points where y is NaN are skipped.
    """
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    if xs.shape != ys.shape:
        raise ValueError(f"x and y differ in shape: {xs.shape} vs {ys.shape}")
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], moving_average(ys[order], smooth_window)
    hits = np.flatnonzero(ys >= threshold)
    return float(xs[hits[0]]) if hits.size else None


def compute_at_reward(
    compute: Sequence[float] | np.ndarray,
    reward: Sequence[float] | np.ndarray,
    kappa: float,
    smooth_window: int = 1,
) -> float | None:
    """Compute@Reward=κ [D Table 2, SPEC "Reports"]: the cumulative compute at which the training
    reward first reaches κ; None when it never does (never a number for "not reached").

    Decision: the default `smooth_window=1` applies no smoothing, as [D] defines it ("first
    reaches"). A noisy curve can then cross early on one lucky batch; pass a window (trailing mean,
    see `moving_average`) to ask "first reaches κ on average over the last w steps" instead.
    """
    return first_crossing(compute, reward, kappa, smooth_window)


def steps_to_threshold(
    steps: Sequence[float] | np.ndarray,
    score: Sequence[float] | np.ndarray,
    kappa: float,
    smooth_window: int = 1,
) -> int | None:
    """Steps(Score ≥ κ) [D eq. 19]: the first step where the score reaches κ; None if never."""
    hit = first_crossing(steps, score, kappa, smooth_window)
    return None if hit is None else int(hit)


def ratio_to_baseline(value: float, baseline: float) -> float:
    """value / baseline; NaN (shown as "—"/"n/a") when the baseline is missing, 0 or not finite."""
    if baseline is None or not np.isfinite(baseline) or baseline == 0:
        return float("nan")
    return float(value) / float(baseline)


def jitter2(curve: Sequence[float] | np.ndarray) -> float:
    """Second-order difference jitter [D eq. 20]: mean over t of |m_{t+2} − 2 m_{t+1} + m_t|.

    The curve is taken in logged order and assumed evenly spaced (one point per step). Needs ≥ 3
    points.
    """
    m = _finite_1d(curve, "jitter2")
    if m.size < 3:
        raise ValueError(f"jitter2 needs at least 3 points, got {m.size}")
    return float(np.mean(np.abs(m[2:] - 2.0 * m[1:-1] + m[:-2])))


def slope(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Least-squares slope of y on x (used for the growth of mismatch/rho_std per step [H §2]).

    Needs ≥ 2 distinct x.
    """
    xs = _finite_1d(x, "slope x")
    ys = _finite_1d(y, "slope y")
    if xs.size != ys.size:
        raise ValueError(f"slope: {xs.size} x vs {ys.size} y")
    dx = xs - xs.mean()
    denom = float(dx @ dx)
    if xs.size < 2 or denom == 0.0:
        raise ValueError("slope needs at least 2 distinct x values")
    return float(dx @ (ys - ys.mean()) / denom)


def late_minus_early(values: Sequence[float] | np.ndarray, fraction: float = 0.25) -> float:
    """Mean of the last `fraction` of a curve minus the mean of its first `fraction` (each end
    ⌈fraction·T⌉ points, in logged order): the growth of a per-step metric without assuming it is
    linear, the complement of `slope`. Needs ≥ 2 points.
    """
    m = _finite_1d(values, "late_minus_early")
    if m.size < 2:
        raise ValueError(f"late_minus_early needs at least 2 points, got {m.size}")
    if not 0.0 < fraction <= 0.5:
        raise ValueError(f"fraction must be in (0, 0.5], got {fraction}")
    k = int(np.ceil(fraction * m.size))
    return float(m[-k:].mean() - m[:k].mean())


def band_on_grid(
    curves: Sequence[tuple[np.ndarray, np.ndarray]],
    n_grid: int = 100,
    confidence: float = 0.95,
    n_boot: int = 1_000,
    seed: SeedLike = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean curve across seeds with a pointwise bootstrap band, on a common x grid.

    Each seed's (x, y) is linearly interpolated onto `n_grid` points spanning the x range that every
    seed covers (no extrapolation). The same resampled seed sets are used at every grid point, so
    the band is as smooth as the curves. Returns (grid, mean, lo, hi); with one seed lo == hi == mean.
    """
    usable = [(np.asarray(x, float), np.asarray(y, float)) for x, y in curves]
    usable = [(x[np.isfinite(x) & np.isfinite(y)], y[np.isfinite(x) & np.isfinite(y)]) for x, y in usable]
    usable = [(x[np.argsort(x, kind="stable")], y[np.argsort(x, kind="stable")]) for x, y in usable if x.size]
    if not usable:
        raise ValueError("band_on_grid: no finite points")
    start = max(float(x[0]) for x, _ in usable)
    stop = min(float(x[-1]) for x, _ in usable)
    if stop < start:
        raise ValueError("band_on_grid: the seeds' x ranges do not overlap")
    grid = np.linspace(start, stop, n_grid) if stop > start else np.array([start])
    values = np.stack([np.interp(grid, x, y) for x, y in usable])  # seeds × grid
    mean = values.mean(axis=0)
    if len(usable) == 1:
        return grid, mean, mean.copy(), mean.copy()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(usable), size=(n_boot, len(usable)))
    resampled = values[idx].mean(axis=1)  # n_boot × grid
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(resampled, [alpha, 1.0 - alpha], axis=0)
    return grid, mean, lo, hi


# ---------------------------------------------------------------- tidy-frame helpers


def split_by_key(metrics: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The tidy metrics frame split once per key, each part sorted by (run_id, step).

    Non-finite values (NaN, ±inf: a diverged step) are dropped here, so every statistic downstream
    sees finite numbers. Splitting once is what keeps a 100-run × 20-key × 500-step report fast.
    """
    finite = np.isfinite(metrics["value"].to_numpy(dtype=float))
    clean = metrics.loc[finite, ["run_id", "step", "key", "value"]]
    clean = clean.sort_values(["key", "run_id", "step"], kind="stable")
    return {str(key): part.drop(columns="key").reset_index(drop=True) for key, part in clean.groupby("key", sort=False)}


def last_values(series: pd.DataFrame) -> pd.Series:
    """run_id -> value at the run's last logged step (frame: run_id, step, value)."""
    return series.sort_values("step", kind="stable").groupby("run_id")["value"].last()


def on_compute_axis(metric: pd.DataFrame, compute: pd.DataFrame) -> pd.DataFrame:
    """Attach the cumulative compute to every point of a metric (frames: run_id, step, value).

    A metric point at step s gets the compute logged at step s; if compute was not logged at s, the
    next logged compute (never the previous one: an arm is never credited with less compute than it
    had spent). Returns run_id, step, compute, value; points with no compute after them are dropped.
    """
    left = metric.sort_values("step", kind="stable")
    right = compute.rename(columns={"value": "compute"}).sort_values("step", kind="stable")
    merged = pd.merge_asof(left, right, on="step", by="run_id", direction="forward")
    merged = merged.dropna(subset=["compute"])
    return merged[["run_id", "step", "compute", "value"]].sort_values(["run_id", "step"], kind="stable")


# ---------------------------------------------------------------- compute-matched check


@dataclass(frozen=True)
class ComputeViolation:
    """Arms of one comparison group that differ in logged compute [D §5 compute-matched protocol]."""

    group: str
    field: str  # "gen_tokens_total" | "update_steps" | "G"
    values: dict[str, str]  # arm -> its number(s), as shown
    detail: str

    def __str__(self) -> str:
        where = f"group {self.group!r}" if self.group else "sweep"
        numbers = ", ".join(f"{arm}={value}" for arm, value in self.values.items())
        return f"{where}: {self.field} {self.detail}: {numbers}"


def compute_totals(runs: pd.DataFrame, metrics: pd.DataFrame | dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per run: total generated tokens, update steps and G, from logged compute (NaN if not logged).

    Tokens are the last `compute/gen_tokens_cum`, else the sum of per-step `compute/gen_tokens`.
    """
    by_key = metrics if isinstance(metrics, dict) else split_by_key(metrics)
    out = runs[["run_id", "arm", "group", "seed", "G"]].copy().set_index("run_id")
    if "compute/gen_tokens_cum" in by_key:
        tokens = last_values(by_key["compute/gen_tokens_cum"])
    elif "compute/gen_tokens" in by_key:
        tokens = by_key["compute/gen_tokens"].groupby("run_id")["value"].sum()
    else:
        tokens = pd.Series(dtype=float)
    out["gen_tokens_total"] = tokens.reindex(out.index).astype(float)
    updates = pd.Series(dtype=float)
    if "compute/update_steps_cum" in by_key:
        updates = last_values(by_key["compute/update_steps_cum"])
    out["update_steps"] = updates.reindex(out.index).astype(float)
    return out.reset_index()


def _span(values: pd.Series, fmt) -> str:
    lo, hi = values.min(), values.max()
    return fmt(lo) if lo == hi else f"{fmt(lo)}–{fmt(hi)}"


def check_compute_matched(
    runs: pd.DataFrame,
    metrics: pd.DataFrame | dict[str, pd.DataFrame],
    tol: float = 0.10,
) -> list[ComputeViolation]:
    """Within each comparison group, do the arms match on logged compute? [D §5, SPEC "Reports"]

    - update steps and G must be identical across every run of the group (they are set by the
      spec; a difference means a different config or a run that stopped early);
    - total generated tokens: the arms' mean totals may differ by at most `tol` relative to the
      largest. Decision: a tolerance rather than equality, because with a step budget the token
      count follows each arm's response lengths; [D] matches tokens, so the spread is reported.
    Fields that were not logged are not checked (see `compute_totals` for the raw numbers).
    """
    totals = compute_totals(runs, metrics)
    violations: list[ComputeViolation] = []
    for group, part in totals.groupby("group", sort=True):
        if part["arm"].nunique() < 2:
            continue
        for field, fmt in (("update_steps", lambda v: f"{v:,.0f}"), ("G", lambda v: f"{v:,.0f}")):
            known = part.dropna(subset=[field])
            if known[field].nunique() > 1:
                values = {arm: _span(p[field], fmt) for arm, p in known.groupby("arm", sort=True)}
                violations.append(ComputeViolation(str(group), field, values, "differ across runs"))
        known = part.dropna(subset=["gen_tokens_total"])
        arm_means = known.groupby("arm", sort=True)["gen_tokens_total"].mean()
        if len(arm_means) > 1 and arm_means.max() > 0:
            spread = float((arm_means.max() - arm_means.min()) / arm_means.max())
            if spread > tol:
                values = {arm: f"{v:,.0f}" for arm, v in arm_means.items()}
                detail = f"(arm mean over seeds) differ by {spread:.1%} > tol {tol:.1%}"
                violations.append(ComputeViolation(str(group), "gen_tokens_total", values, detail))
    return violations
