"""How a paired effect changes along a grid axis ([D] Table 4: DFPO − GSPO per group size G): the
least-squares slope of the per-seed differences d = arm − versus over the axis values, one slope per
seed. Arrays in, numbers out; the claim and its verdict are `cancelctl.stats.verdicts`.

Decisions, stated once:
- The unit of inference is the seed, as for every paired claim. At each axis value x_j the runs of
  `arm` and `versus` are paired by seed (d_sj); each seed run at every axis value then gives one
  slope b_s = Σ_j w_j d_sj with w_j = (u_j − ū) / Σ_k (u_k − ū)² — the ordinary least-squares slope
  of its differences on u = the axis values (scale linear) or log2 of them (scale log: G grows by
  doubling, so the slope is "per doubling"). The slopes of different seeds are independent, so the
  claim is the one-sample test of mean(b_s) over seeds, with the existing paired machinery
  (`evidence.paired_evidence` against 0: paired t-test, Student's t CI, seeds needed).
- Runs of one seed number at two axis values are different runs. Nothing requires them to be
  related: b_s is a fixed contrast of the seed's own differences, so whether seed s at G = 4 and at
  G = 8 share anything (a warm start, a data order) or not, the b_s of different seeds stay
  independent and the test stays valid; what they share cancels inside the contrast and narrows it.
- Only seeds run at every axis value count (complete cases): with the same u for every seed the
  weights are the same, so mean(b_s) is also the least-squares slope of the mean effects on u (and
  of the pooled regression of every d_sj on u, whose seed-clustered error is in effect sd(b_s)/√n). A seed missing at one value would
  need other weights (a different, noisier estimate) and is left out, and the verdict says so.
- Two axis values are allowed: the slope is then (d at x_2 − d at x_1) / (u_2 − u_1), the
  difference of the effects, which is all two values can say; three or more make it a fitted trend
  (a straight line in u: a curved trend is summarised by its least-squares line, not tested for
  curvature).
- Invariances (tested): adding the same constant to d at every axis value leaves the slope as it
  is; reversing the axis (u → −u) flips its sign; an affine u → a·u + c divides it by a; on the log
  scale multiplying every axis value by a constant leaves it as it is (a shift of log2); scaling the
  metric by k scales the slope by k.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

SCALES = ("linear", "log")


def axis_coordinates(values: Sequence[float] | np.ndarray, scale: str = "linear") -> np.ndarray:
    """The regressor u of the slope: the axis values (linear) or log2 of them (log, values > 0)."""
    x = np.asarray(values, dtype=float)
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"axis values must be finite numbers, got {list(values)}")
    if scale == "log":
        if np.any(x <= 0):
            raise ValueError(f"scale log needs axis values > 0, got {list(values)}")
        return np.log2(x)
    return x


def slope_weights(values: Sequence[float] | np.ndarray, scale: str = "linear") -> np.ndarray:
    """w with slope = w · d for differences d at `values`: w_j = (u_j − ū) / Σ (u − ū)²."""
    u = axis_coordinates(values, scale)
    centred = u - u.mean()
    spread = float(centred @ centred)
    if u.size < 2 or spread == 0.0:
        raise ValueError(f"a slope needs at least 2 distinct axis values, got {list(values)}")
    return centred / spread


def seed_slopes(
    differences: Mapping[float, pd.Series], scale: str = "linear"
) -> tuple[pd.Series, list]:
    """Per-seed least-squares slopes of d over the axis.

    differences: axis value -> Series (index: seed) of that value's paired differences. Returns the
    slopes of the seeds present at every value (index: seed, sorted) and the seeds left out because
    some value lacks them.
    """
    values = sorted(differences)
    table = pd.DataFrame({v: differences[v] for v in values})
    complete = table.dropna()
    left_out = sorted(set(table.index) - set(complete.index))
    weights = slope_weights(values, scale)
    slopes = pd.Series(complete.to_numpy(float) @ weights, index=complete.index, dtype=float).sort_index()
    return slopes, left_out
