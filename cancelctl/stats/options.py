"""How arms are compared, in one frozen object (rliable's knobs, not a 14-parameter signature): the
compute-matched protocol's tolerance and its override, and the levels a claim's verdict is taken at.
Built once where a verb reads its options (`cancelctl.report.options.ReportOptions.compare`) and
handed down to the report's tables (`compute_match`) and to the verdicts (`verdicts.judge_claims`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cancelctl.stats.compute_match import TOKEN_TOL
from cancelctl.stats.evidence import ALPHA, MIN_VERDICT_SEEDS, POWER
from cancelctl.stats.paired import MIN_T_SEEDS


@dataclass(frozen=True)
class ComparisonOptions:
    """alpha: the family-wise level of each verdict kind (Holm across the report); power: what
    "seeds needed" plans for; min_seeds: shared seeds a verdict needs (≥ MIN_T_SEEDS, the paired
    t-test's least); allow_unmatched: judge and tabulate arms that are not compute-matched (saying
    so) instead of refusing; token_tol: the relative spread of generated tokens still compute-matched."""

    alpha: float = ALPHA
    power: float = POWER
    min_seeds: int = MIN_VERDICT_SEEDS
    allow_unmatched: bool = False
    token_tol: float = TOKEN_TOL

    def __post_init__(self) -> None:
        if self.min_seeds < MIN_T_SEEDS:
            raise ValueError(f"min_seeds must be >= {MIN_T_SEEDS} (a paired t-test needs them)")
        if not 0.0 < self.alpha < 1.0 or not 0.0 < self.power < 1.0:
            raise ValueError(f"alpha and power must lie in (0, 1), got {self.alpha} and {self.power}")
        if self.token_tol < 0.0:
            raise ValueError(f"token_tol must be >= 0, got {self.token_tol}")
