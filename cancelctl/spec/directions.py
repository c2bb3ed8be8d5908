"""What each claim `direction` predicts for the effect arm − versus, as one table: the boundaries the
effect must lie beyond. Every reading of a direction comes from it: the predicted range an interval
is checked against (`stats.evidence.predicted_range`), the one-sided tests whose rejection supports
or contradicts a claim (`stats.evidence.paired_evidence`), and the e-values of the sequential test
(`stats.sequential.look_evidence`).

higher / lower are directional (one-sided test); not_higher / not_lower are non-inferiority claims
and similar an equivalence claim (TOST), each within a margin m that must be given: no number of
seeds can show "no difference at all".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower", "not_higher", "not_lower", "similar"]


@dataclass(frozen=True)
class Bound:
    """The effect lies above (side +1) or below (side −1) center + margins · m."""

    side: Literal[1, -1]
    margins: Literal[-1, 0, 1]

    def at(self, margin: float, center: float = 0.0) -> float:
        """The boundary's value; a bound at the center needs no margin (it may be NaN then)."""
        return center + self.margins * margin if self.margins else center


# the claim holds when the effect is beyond every bound of its direction
DIRECTIONS: dict[Direction, tuple[Bound, ...]] = {
    "higher": (Bound(1, 0),),  # effect > 0
    "lower": (Bound(-1, 0),),  # effect < 0
    "not_higher": (Bound(-1, 1),),  # non-inferiority, mirrored: effect < m
    "not_lower": (Bound(1, -1),),  # non-inferiority: effect > −m
    "similar": (Bound(1, -1), Bound(-1, 1)),  # TOST: −m < effect < m
}
# the directions judged within a margin
MARGIN_DIRECTIONS: tuple[Direction, ...] = tuple(d for d, bounds in DIRECTIONS.items() if any(b.margins for b in bounds))


def bounds_of(direction: str) -> tuple[Bound, ...]:
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}")
    return DIRECTIONS[direction]  # type: ignore[index]


def predicted_range(direction: str, margin: float = math.nan, center: float = 0.0) -> tuple[float, float]:
    """The open range of the effect a claim predicts, around `center` (0 for a difference, 1/2 for a
    share): higher (c, ∞), lower (−∞, c), not_higher (−∞, c + m), not_lower (c − m, ∞), similar
    (c − m, c + m)."""
    m = margin if math.isfinite(margin) else 0.0
    lo, hi = -math.inf, math.inf
    for bound in bounds_of(direction):
        if bound.side > 0:
            lo = max(lo, bound.at(m, center))
        else:
            hi = min(hi, bound.at(m, center))
    return lo, hi


def sign(direction: str) -> int:
    """+1 for higher, −1 for lower: the side of a one-sided (outcome) claim."""
    bounds = bounds_of(direction)
    if len(bounds) != 1 or bounds[0].margins:
        raise ValueError(f"direction {direction!r} is not one-sided without a margin")
    return bounds[0].side
