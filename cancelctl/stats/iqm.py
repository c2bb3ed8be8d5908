"""The interquartile mean (IQM) over runs, rliable's robust aggregate (Agarwal et al. 2021, arXiv
2108.13264, §4.2: the mean of the middle 50% of runs, `scipy.stats.trim_mean(·, 0.25)`), with the
Tukey–McLaughlin interval of a trimmed mean.

"Enough runs to trim": 25% trimming drops ⌊n/4⌋ runs from each end, so below `MIN_IQM_RUNS` = 4 runs
it drops none and the IQM is the mean (reported as such, not as an IQM). At exactly 4 it is the mean of
the middle two and its interval has 1 degree of freedom: honest, and wide.

Interval: rliable bootstraps the IQM (percentile), which at 4–5 runs never leaves the range of the
middle runs. The Tukey–McLaughlin interval (Tukey & McLaughlin 1963, Sankhyā A 25; Wilcox,
"Introduction to Robust Estimation and Hypothesis Testing", §4.4) is the trimmed mean's analogue of
Student's: IQM ± t_{(1+c)/2, h−1} · s_w / ((1 − 2γ)·√n), s_w the sd of the winsorized runs, h = n − 2g
the runs kept, γ = g/n. Simulated coverage (tests/stats/test_iqm.py): 92–95% for normal and t3 runs,
91–94% for skewed beta ones, at 4–20 runs. For a score in [0, 1] the interval is cut to [0, 1]: the
IQM of such scores lies there, so the cut never leaves it out of an interval that held it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats  # the t quantile

from cancelctl.stats.intervals import Interval
from cancelctl.stats.samples import finite_1d

TRIM = 0.25  # from each end: the interquartile mean [Agarwal et al. 2021, §4.2]
MIN_IQM_RUNS = 4  # the fewest runs at which 25% trimming drops a run from each end


def trimmed_count(n: int) -> int:
    """Runs dropped from each end: ⌊0.25·n⌋, as scipy.stats.trim_mean (and so rliable) drops them."""
    return int(TRIM * n)


def iqm_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95, unit_interval: bool = False) -> Interval:
    """IQM of the runs with its Tukey–McLaughlin interval (see the module docstring); with
    `unit_interval` the interval is cut to [0, 1]. Below `MIN_IQM_RUNS` runs: ValueError (nothing to
    trim; the mean and its interval are `intervals.student_t_ci`)."""
    arr = np.sort(finite_1d(values, "iqm_interval"))
    n = arr.size
    if n < MIN_IQM_RUNS:
        raise ValueError(f"iqm_interval: {n} runs, need >= {MIN_IQM_RUNS} to trim one from each end")
    g = trimmed_count(n)
    kept = n - 2 * g
    iqm = float(arr[g : n - g].mean())
    winsorized = np.clip(arr, arr[g], arr[n - g - 1])
    spread = 0.0 if np.ptp(winsorized) == 0.0 else float(winsorized.std(ddof=1))
    half = float(stats.t.ppf((1.0 + confidence) / 2.0, kept - 1)) * spread / ((1.0 - 2.0 * g / n) * np.sqrt(n))
    lo, hi = iqm - half, iqm + half
    if unit_interval:
        lo, hi = max(lo, 0.0), min(hi, 1.0)
    return Interval(iqm, lo, hi, n)
