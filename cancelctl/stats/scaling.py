"""Compute-scaling fits [ScaleRL: Khatri et al. 2025, "The Art of Scaling Reinforcement Learning
Compute for LLMs", arXiv 2510.13786; docs/statistics.md#compute-scaling-fit]: the sigmoidal compute–performance curve

    R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B)                                    (ScaleRL eq. 1)

fitted to one run's reward against its cumulative compute C. A is the asymptote (the reward the
recipe tends to with unlimited compute), B > 0 the efficiency (how steeply the reward rises on log
compute), C_mid the compute at which half of the rise A − R0 is reached, R0 the reward at the start.
ScaleRL compares recipes by A and B: most design choices move B, few move A.

Decisions, stated once:
- R0 is not fitted: it is the first logged reward (the initial policy's, before any update) or the one
  given. With the earliest compute left out, nothing in the fitted points pins R0 down.
- The earliest compute is left out: points with C < `EARLY_FRACTION` (10%) of the run's last compute.
  ScaleRL fits its 16k GPU-hour runs after the first ~1.5k GPU-hours (≈ 9%): the very early regime
  (format learning, warm-up) is noisy and is not what the sigmoid describes.
- Bounded least squares (`scipy.optimize.least_squares`, trust-region reflective) in (A, B, ln C_mid)
  on compute in units of the last compute, from a start read off the curve: A the mean of its top
  (the last quarter of the fitted points), C_mid where the curve (a trailing mean) first crosses
  halfway from R0 to that, B = 1.
- A fit that cannot be made raises `ComputeCurveError` (a ValueError) with the reason: too few points,
  no rise (the late reward not above R0, or the fitted points' least-squares slope on log compute not
  significantly > 0, one-sided at `RISE_ALPHA`: a flat noisy curve would otherwise give a "rise" of its
  noise), non-finite or negative input, no convergence, or a parameter the points do not identify — a fit ending on a bound (A more than `ASYMPTOTE_SPAN` times the logged rise above R0:
  the curve has not bent over; B outside `EFFICIENCY_BOUNDS`; C_mid more than `MIDPOINT_SPAN` beyond
  the fitted compute) is not a number to average.
- Across seeds (the report, the claims): fit each run, then Student's t over the per-seed parameters
  (`intervals.student_t_ci`, the tables' interval); C_mid on log scale (a geometric mean, its interval
  positive), as it is fitted. Coverage simulated in tests/stats/test_scaling.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares  # scipy: a declared dependency (pyproject)
from scipy.special import expit
from scipy.stats import linregress

from cancelctl.stats.intervals import Interval, student_t_ci

# the earliest compute left out of a fit: C < this fraction of the run's last compute (ScaleRL: ~1.5k of 16k GPU-hours)
EARLY_FRACTION = 0.10
# fewer fitted points than this is no fit (3 parameters, and a residual to judge them by)
MIN_POINTS = 6
# A − R0 at most this multiple of the largest logged rise above R0: beyond it the asymptote is a guess
ASYMPTOTE_SPAN = 4.0
EFFICIENCY_BOUNDS = (0.05, 20.0)
# C_mid within [first fitted compute / span, last compute · span]
MIDPOINT_SPAN = 100.0
PARAMETERS = ("asymptote", "efficiency", "midpoint")
# a fit that stops this close to a bound (a fraction of the bounds' range, per parameter) ended on it
BOUND_TOL = 1e-3
# the fitted points must rise: the slope of the reward on log compute, one-sided, at this level
RISE_ALPHA = 0.05


class ComputeCurveError(ValueError):
    """A compute-scaling fit that cannot be made; `reason` says why (also the message)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def sigmoid_reward(
    compute: Sequence[float] | np.ndarray | float, r0: float, asymptote: float, efficiency: float, midpoint: float
) -> np.ndarray:
    """R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B) (ScaleRL eq. 1); R(0) = R0."""
    c = np.asarray(compute, dtype=float)
    with np.errstate(divide="ignore", over="ignore"):
        # (C_mid/C)^B as exp(B·(ln C_mid − ln C)): C = 0 gives +inf, so R = R0
        ratio = np.exp(efficiency * (math.log(midpoint) - np.log(c)))
    return r0 + (asymptote - r0) / (1.0 + ratio)


@dataclass(frozen=True)
class ComputeCurve:
    """One run's fitted compute–performance curve; call it on compute for the fitted reward."""

    asymptote: float  # A
    efficiency: float  # B
    midpoint: float  # C_mid, in the compute's units
    r0: float  # R0
    n_points: int = 0  # points fitted (after the earliest compute was left out)
    rmse: float = math.nan  # root mean square residual over them

    def __call__(self, compute: Sequence[float] | np.ndarray | float) -> np.ndarray:
        return sigmoid_reward(compute, self.r0, self.asymptote, self.efficiency, self.midpoint)


def fit_compute_curve(
    compute: Sequence[float] | np.ndarray,
    reward: Sequence[float] | np.ndarray,
    *,
    r0: float | None = None,
    early_fraction: float = EARLY_FRACTION,
) -> ComputeCurve:
    """Fit ScaleRL's curve to one run's (cumulative compute, reward) points (any order).

    r0: the start reward; default the reward at the smallest compute. early_fraction: points below
    this fraction of the largest compute are left out of the fit (not of R0). Raises
    `ComputeCurveError` when no fit can be made (see the module docstring).
    """
    c, y = _points(compute, reward)
    order = np.argsort(c, kind="stable")
    c, y = c[order], y[order]
    start = float(y[0]) if r0 is None else float(r0)
    if not math.isfinite(start):
        raise ComputeCurveError(f"R0 must be finite, got {start}")
    c_last = float(c[-1])
    if c_last <= 0.0:
        raise ComputeCurveError("no compute: every point is at C = 0")
    keep = (c >= early_fraction * c_last) & (c > 0.0)  # R(0) = R0 by definition: no information
    c, y = c[keep], y[keep]
    if c.size < MIN_POINTS:
        raise ComputeCurveError(
            f"too few points: {c.size} after leaving out the earliest {early_fraction:.0%} of compute (need ≥ {MIN_POINTS})"
        )
    top = float(np.mean(y[-max(1, c.size // 4):]))  # the last quarter of the fitted points
    rise = float(y.max()) - start
    if top <= start or rise <= 0.0:
        raise ComputeCurveError(f"no rise: the curve's late mean {top:.4g} is not above R0 = {start:.4g}")
    trend = linregress(np.log(c), y, alternative="greater")
    if not trend.pvalue < RISE_ALPHA:
        raise ComputeCurveError(
            f"no rise over the fitted compute: the curve's slope on log compute is {trend.slope:+.3g} "
            f"± {trend.stderr:.2g} (one-sided p = {trend.pvalue:.2g}); a sigmoid fitted to it would fit the noise"
        )
    x = c / c_last  # compute in units of the last one: ln x ≤ 0, well scaled for any unit
    lower = np.array([start, EFFICIENCY_BOUNDS[0], math.log(float(x[0]) / MIDPOINT_SPAN)])
    upper = np.array([start + ASYMPTOTE_SPAN * rise, EFFICIENCY_BOUNDS[1], math.log(MIDPOINT_SPAN)])
    theta0 = np.clip(_start(x, y, start, top), lower + 1e-9 * (upper - lower), upper - 1e-9 * (upper - lower))

    log_x = np.log(x)

    def residuals(theta: np.ndarray) -> np.ndarray:
        return sigmoid_reward(x, start, theta[0], theta[1], math.exp(theta[2])) - y

    def jacobian(theta: np.ndarray) -> np.ndarray:
        # with s = 1 / (1 + exp(B (ln C_mid − ln x))): ∂R/∂A = s, ∂R/∂B = (A − R0) s(1 − s)(ln x − ln C_mid),
        # ∂R/∂ln C_mid = −(A − R0) s(1 − s) B
        asymptote, efficiency, log_mid = theta
        s = expit(efficiency * (log_x - log_mid))
        slope = (asymptote - start) * s * (1.0 - s)
        return np.column_stack([s, slope * (log_x - log_mid), -slope * efficiency])

    fit = least_squares(residuals, theta0, jac=jacobian, bounds=(lower, upper), method="trf", x_scale="jac")
    if fit.status <= 0 or not np.all(np.isfinite(fit.x)):
        raise ComputeCurveError(f"least squares did not converge: {fit.message}")
    # on a bound: least squares says so (active_mask), or it stopped within BOUND_TOL of the bounds' range
    near = BOUND_TOL * (upper - lower)
    at_lower = (fit.active_mask < 0) | (fit.x - lower <= near)
    at_upper = (fit.active_mask > 0) | (upper - fit.x <= near)
    for name, low, high in zip(PARAMETERS, at_lower, at_upper):
        if low or high:
            raise ComputeCurveError(_not_identified(name, -1 if low else 1))
    asymptote, efficiency, log_mid = (float(v) for v in fit.x)
    return ComputeCurve(
        asymptote=asymptote, efficiency=efficiency, midpoint=math.exp(log_mid) * c_last, r0=start,
        n_points=int(c.size), rmse=float(np.sqrt(np.mean(fit.fun**2))),
    )


def _points(compute, reward) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(compute, dtype=float).ravel()
    y = np.asarray(reward, dtype=float).ravel()
    if c.size != y.size:
        raise ComputeCurveError(f"compute and reward differ in length: {c.size} vs {y.size}")
    bad = int(np.sum(~(np.isfinite(c) & np.isfinite(y))))
    if bad:
        raise ComputeCurveError(f"non-finite values at {bad} point(s): drop them first")
    if c.size and float(c.min()) < 0.0:
        raise ComputeCurveError(f"negative compute ({float(c.min()):.4g}): cumulative compute is ≥ 0")
    if c.size == 0:
        raise ComputeCurveError(f"too few points: 0 (need ≥ {MIN_POINTS})")
    return c, y


def _start(x: np.ndarray, y: np.ndarray, r0: float, top: float) -> np.ndarray:
    """(A, B, ln C_mid) read off the curve: A its top, C_mid where a trailing mean of it first
    crosses halfway from R0 to A (the middle of the fitted compute if it never does), B = 1."""
    window = max(1, x.size // 10)
    smooth = np.convolve(y, np.ones(window) / window, mode="full")[: y.size]
    smooth[: window - 1] = np.cumsum(y[: window - 1]) / np.arange(1, window)
    crossed = np.flatnonzero(smooth >= r0 + 0.5 * (top - r0))
    mid = float(x[crossed[0]]) if crossed.size else float(np.sqrt(x[0] * x[-1]))
    return np.array([top, 1.0, math.log(mid)])


def _not_identified(name: str, side: int) -> str:
    if name == "asymptote" and side < 0:
        return "no rise: the fitted asymptote is R0"
    if name == "asymptote":
        return (f"not identified: the asymptote reached its bound (R0 + {ASYMPTOTE_SPAN:g}× the logged rise): the "
                "curve has not bent over within the logged compute")
    if name == "efficiency":
        bound = EFFICIENCY_BOUNDS[0] if side < 0 else EFFICIENCY_BOUNDS[1]
        shape = "no sigmoid rise (flat on log compute)" if side < 0 else "a step, not a curve"
        return f"not identified: the efficiency B reached its bound {bound:g} ({shape})"
    where = "before" if side < 0 else "after"
    return (f"not identified: the midpoint reached its bound, {MIDPOINT_SPAN:g}× {where} the fitted compute "
            "(the points show too little of the curve)")


def curve_intervals(curves: Sequence[ComputeCurve], confidence: float = 0.95) -> dict[str, Interval]:
    """Per parameter, the mean over seeds with Student's t interval (`student_t_ci`) of one fit per
    seed: asymptote, efficiency and r0 as they are; midpoint on log scale (geometric mean, its interval
    exp of the t interval of ln C_mid: positive, and the scale the fit works in)."""
    if not curves:
        raise ValueError("curve_intervals: no fits")
    out = {name: student_t_ci([getattr(c, name) for c in curves], confidence) for name in ("asymptote", "efficiency", "r0")}
    log_mid = student_t_ci([math.log(c.midpoint) for c in curves], confidence)
    out["midpoint"] = Interval(math.exp(log_mid.mean), math.exp(log_mid.lo), math.exp(log_mid.hi), log_mid.n)
    return out


def mean_curve(curves: Sequence[ComputeCurve]) -> ComputeCurve:
    """The curve of the parameters' means over seeds (C_mid's geometric mean, as `curve_intervals`):
    what the report's plot overlays for an arm."""
    if not curves:
        raise ValueError("mean_curve: no fits")
    return ComputeCurve(
        asymptote=float(np.mean([c.asymptote for c in curves])),
        efficiency=float(np.mean([c.efficiency for c in curves])),
        midpoint=float(np.exp(np.mean([math.log(c.midpoint) for c in curves]))),
        r0=float(np.mean([c.r0 for c in curves])),
    )
