"""The direction table: each direction's predicted range, margins and one-sided sign, and the
tests built on it agree with the range (a supported effect lies inside it, a contradicted one outside)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cancelctl.spec.directions import DIRECTIONS, MARGIN_DIRECTIONS, predicted_range, sign
from cancelctl.stats.evidence import paired_evidence
from cancelctl.stats.sequential import look_evidence

INF = math.inf


def test_each_direction_predicts_its_range():
    m, c = 0.1, 0.5
    assert {d: predicted_range(d, m, c) for d in DIRECTIONS} == {
        "higher": (c, INF), "lower": (-INF, c), "not_higher": (-INF, c + m), "not_lower": (c - m, INF),
        "similar": (c - m, c + m),
    }
    assert MARGIN_DIRECTIONS == ("not_higher", "not_lower", "similar")
    assert predicted_range("higher", math.nan) == (0.0, INF)  # no margin needed at the center
    assert (sign("higher"), sign("lower")) == (1, -1)
    with pytest.raises(ValueError, match="not one-sided"):
        sign("similar")
    with pytest.raises(ValueError, match="unknown direction"):
        predicted_range("up")


@pytest.mark.parametrize("direction", sorted(DIRECTIONS))
@pytest.mark.parametrize("shift", [-1.0, -0.05, 0.0, 0.05, 1.0])
def test_the_tests_side_with_the_range(direction, shift):
    """Far inside the predicted range the claim's own test rejects, far outside the opposite one:
    distance > 0 exactly when the mean effect is inside the range, and the e-values grow on the
    same side."""
    rng = np.random.default_rng(0)
    versus = rng.normal(size=12)
    x = versus + shift + rng.normal(scale=0.01, size=12)
    ev = paired_evidence(x, versus, direction, margin=0.2)
    lo, hi = predicted_range(direction, 0.2)
    inside = lo < ev.effect < hi
    assert (ev.distance > 0) == inside
    assert (ev.p_for < 0.05) == (lo < ev.ci_lo and ev.ci_hi < hi)
    assert (ev.p_against < 0.05) == (ev.ci_hi < lo or ev.ci_lo > hi)
    look = look_evidence(ev.effect, ev.sd, ev.n, direction, margin=0.2)
    assert (min(look.e_for) > look.e_against) == inside
