"""Time to an event over runs — steps to a run's collapse, a run that never collapsed censored at its
last step — and the comparison of two arms' times. Arrays in (time, event flag per run), numbers out.

- The test: the log-rank test (Mantel 1966, "Evaluation of survival data and two new rank order
  statistics arising in its consideration", Cancer Chemother. Rep. 50:163–170; the Mantel–Haenszel
  form of Peto & Peto 1972): at each step where a run collapses, the collapses in arm a against
  those expected from the runs at risk, Z = Σ(O − E)/√ΣV with the hypergeometric variance.
  With few runs (all C(n, n_a) relabellings ≤ `max_permutations`) its p-value is read off the exact
  permutation distribution of Z over those relabellings (Heinze, Gnant & Schemper 2003, "Exact
  log-rank tests for unequal follow-up", Biometrics 59:1151–1157): at 4 runs an arm the normal
  approximation is not to be trusted; beyond, the normal one.
- The effect shown: the difference of the restricted mean times to the event up to the horizon τ
  both arms were followed to (the area under the Kaplan–Meier curve, Kaplan & Meier 1958), with
  the Kaplan–Meier variance of each (Klein & Moeschberger 2003, "Survival Analysis", §4.5):
  "arm a collapsed N steps sooner, on average over the first τ steps".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
from scipy import stats  # the normal distribution only

CONFIDENCE = 0.95
MAX_PERMUTATIONS = 20_000


@dataclass(frozen=True)
class LogRank:
    """The log-rank comparison of arm a with arm b. z > 0: arm a has more events than expected, i.e.
    its events come sooner (a higher hazard)."""

    observed: float  # events in arm a
    expected: float  # ... expected if both arms had one hazard
    variance: float
    z: float
    p_sooner: float  # one-sided: arm a's events come sooner than arm b's
    p_later: float  # one-sided: later
    exact: bool  # p from the permutation distribution (else the normal approximation)

    @property
    def chi2(self) -> float:
        """The textbook log-rank statistic, (O − E)²/V, chi-square with 1 df under H0."""
        return self.z * self.z

    @property
    def log_hazard_ratio(self) -> float:
        """Peto's one-step estimate of log(hazard a / hazard b), (O − E)/V (Yusuf et al. 1985)."""
        return (self.observed - self.expected) / self.variance if self.variance > 0 else math.nan


def _as_runs(time: Sequence[float], event: Sequence[bool], what: str) -> tuple[np.ndarray, np.ndarray]:
    t, e = np.asarray(time, dtype=float).ravel(), np.asarray(event, dtype=bool).ravel()
    if t.size == 0 or t.size != e.size or not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError(f"{what}: one finite time ≥ 0 and one event flag per run")
    return t, e


def _scores(members: np.ndarray, at_risk: np.ndarray, events: np.ndarray) -> tuple[np.ndarray, ...]:
    """O, E and V of arm a for each row of `members` (runs × 1 if in arm a), given the pooled runs'
    at-risk and event indicators at each event time (runs × event times)."""
    n = at_risk.sum(axis=0)
    d = events.sum(axis=0)
    n_a = members @ at_risk
    d_a = members @ events
    share = n_a / n
    observed = d_a.sum(axis=1)
    expected = (d * share).sum(axis=1)
    variance = (d * share * (1 - share) * (n - d) / np.maximum(n - 1, 1)).sum(axis=1)
    return observed, expected, variance


def logrank_test(
    time_a: Sequence[float], event_a: Sequence[bool], time_b: Sequence[float], event_b: Sequence[bool],
    max_permutations: int = MAX_PERMUTATIONS,
) -> LogRank:
    """Log-rank test of arm a vs arm b (time per run; event True: the run had the event at that
    time, False: censored then). A run censored at a time where others have the event is at risk
    at that time (the usual convention)."""
    ta, ea = _as_runs(time_a, event_a, "logrank_test arm a")
    tb, eb = _as_runs(time_b, event_b, "logrank_test arm b")
    t, e = np.concatenate([ta, tb]), np.concatenate([ea, eb])
    event_times = np.unique(t[e])
    if event_times.size == 0:  # nobody had the event: nothing to compare
        return LogRank(0.0, 0.0, 0.0, 0.0, 1.0, 1.0, False)
    at_risk = (t[:, None] >= event_times[None, :]).astype(float)
    events = ((t[:, None] == event_times[None, :]) & e[:, None]).astype(float)

    def z_of(members: np.ndarray) -> tuple[np.ndarray, ...]:
        observed, expected, variance = _scores(members, at_risk, events)
        z = np.divide(observed - expected, np.sqrt(variance), out=np.zeros_like(observed), where=variance > 0)
        return observed, expected, variance, z

    own = np.zeros((1, t.size))
    own[0, : ta.size] = 1.0
    observed, expected, variance, z = (float(v[0]) for v in z_of(own))
    if math.comb(t.size, ta.size) <= max_permutations:
        relabellings = np.zeros((math.comb(t.size, ta.size), t.size))
        for row, chosen in enumerate(combinations(range(t.size), ta.size)):
            relabellings[row, list(chosen)] = 1.0
        z_all = z_of(relabellings)[3]
        tol = 1e-9 * max(1.0, abs(z))  # the same Z, summed in another order
        p_sooner, p_later = float(np.mean(z_all >= z - tol)), float(np.mean(z_all <= z + tol))
        return LogRank(observed, expected, variance, z, p_sooner, p_later, True)
    return LogRank(observed, expected, variance, z, float(stats.norm.sf(z)), float(stats.norm.cdf(z)), False)


@dataclass(frozen=True)
class RestrictedMean:
    """Mean time to the event up to `horizon` (the area under the Kaplan–Meier curve) and its variance."""

    mean: float
    variance: float
    horizon: float


def restricted_mean(time: Sequence[float], event: Sequence[bool], horizon: float) -> RestrictedMean:
    """∫₀^τ S(u) du with S the Kaplan–Meier estimate, and its variance
    Σ_j A_j² d_j / (Y_j (Y_j − d_j)) with A_j = ∫_{t_j}^τ S(u) du over event times t_j ≤ τ (Y_j at
    risk, d_j events) [Klein & Moeschberger 2003, §4.5]. A step where every run at risk has the
    event leaves S = 0 after it, so A_j = 0 there and the term is 0."""
    t, e = _as_runs(time, event, "restricted_mean")
    event_times = np.unique(t[e & (t <= horizon)])
    survival, s = [], 1.0
    at_risk = [(t >= u).sum() for u in event_times]
    died = [((t == u) & e).sum() for u in event_times]
    for y, d in zip(at_risk, died):
        s *= 1.0 - d / y
        survival.append(s)
    edges = np.concatenate([[0.0], event_times, [horizon]])
    levels = np.concatenate([[1.0], survival])  # S on [edges[i], edges[i+1])
    areas = levels * np.diff(edges)
    mean = float(areas.sum())
    variance = 0.0
    for j, (y, d) in enumerate(zip(at_risk, died)):
        after = float(areas[j + 1 :].sum())  # ∫ from t_j to τ
        if y > d and after > 0:
            variance += after * after * d / (y * (y - d))
    return RestrictedMean(mean, variance, float(horizon))


@dataclass(frozen=True)
class TimeComparison:
    """Arm a vs arm b: restricted mean times up to the common horizon, their difference (a − b; < 0:
    a's events come sooner) with its normal interval, and the log-rank test."""

    mean_a: float
    mean_b: float
    difference: float
    ci_lo: float
    ci_hi: float
    horizon: float
    logrank: LogRank


def compare_times(
    time_a: Sequence[float], event_a: Sequence[bool], time_b: Sequence[float], event_b: Sequence[bool],
    confidence: float = CONFIDENCE, max_permutations: int = MAX_PERMUTATIONS,
) -> TimeComparison:
    """Restricted mean difference and log-rank test; τ = the shorter of the two arms' longest follow-up."""
    horizon = min(float(np.max(time_a)), float(np.max(time_b)))
    a, b = restricted_mean(time_a, event_a, horizon), restricted_mean(time_b, event_b, horizon)
    half = float(stats.norm.ppf(0.5 + confidence / 2)) * math.sqrt(a.variance + b.variance)
    difference = a.mean - b.mean
    test = logrank_test(time_a, event_a, time_b, event_b, max_permutations)
    return TimeComparison(a.mean, b.mean, difference, difference - half, difference + half, horizon, test)


def runs_for_logrank(
    log_hazard_ratio: float, event_fraction: float, alpha: float = 0.05, power: float = 0.8, max_n: int = 100_000
) -> int | None:
    """Runs per arm for a one-sided log-rank test at level `alpha` to have `power` (Schoenfeld 1983,
    "Sample-size formula for the proportional-hazards regression model", Biometrics 39:499–503):
    events needed D = 4 (z_{1−α} + z_{1−β})² / (log HR)² with equal arms, runs = D / event fraction,
    shared by the two arms. None when the hazards look equal, nothing happened, or > max_n runs."""
    if not (np.isfinite(log_hazard_ratio) and log_hazard_ratio != 0 and 0 < event_fraction <= 1):
        return None
    z = float(stats.norm.ppf(1 - alpha) + stats.norm.ppf(power))
    events = 4 * z * z / log_hazard_ratio**2
    n = math.ceil(events / event_fraction / 2)
    return max(n, 2) if n <= max_n else None
