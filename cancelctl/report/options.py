"""The report's settings in one frozen object, built once where `cancelctl report` (or a library caller)
reads its options and passed down: to `build_report`, the tables, the claims and the sequential claims.
What the report is about (the collected runs, metrics, claims, alerts) is `model.CollectedSweep`."""

from __future__ import annotations

from dataclasses import dataclass, field

from cancelctl.errors import ArgumentError, SpecError
from cancelctl.report.prepared import CANNOT
from cancelctl.spec.metric_keys import ComputeAxis
from cancelctl.spec.metric_keys import REWARD_KEY
from cancelctl.stats.frames import COMPUTE_KEYS
from cancelctl.stats.options import ComparisonOptions


@dataclass(frozen=True)
class ReportOptions:
    """baseline: the arm every other is compared against (None: the sweep file's, as launched —
    `report_sweep` fills it in); kappa: κ for Compute@Reward, steps to κ and the claims that name
    none (None: `thresholds.default_kappa`, stated in the report); compute: the compute axis;
    metric: the training reward key; smooth_window: the moving average a curve is read through
    before its crossing of κ; include_unfinished: use runs that have not FINISHED (and points that
    end short of their budget) as they are; include_stopped: use runs a monitor rule stopped in the
    compute-matched tables too (the claims always do); plots: draw the PNGs; claims_only: print the
    claims table, write nothing; compare: how arms are compared (`stats.options.ComparisonOptions`:
    compute-match tolerance and override, α, power, minimum seeds)."""

    baseline: str | None = None
    kappa: float | None = None
    compute: ComputeAxis = "tokens"
    metric: str = REWARD_KEY
    smooth_window: int = 1
    include_unfinished: bool = False
    include_stopped: bool = False
    plots: bool = True
    claims_only: bool = False
    compare: ComparisonOptions = field(default_factory=ComparisonOptions)

    def __post_init__(self) -> None:
        if self.compute not in COMPUTE_KEYS:
            raise ArgumentError(f"--compute must be one of {', '.join(COMPUTE_KEYS)}, got {self.compute!r}")
        if self.smooth_window < 1:
            raise SpecError(f"smooth_window must be >= 1, got {self.smooth_window}", title=CANNOT)

    @property
    def allow_unmatched(self) -> bool:
        return self.compare.allow_unmatched

    @property
    def token_tol(self) -> float:
        return self.compare.token_tol
