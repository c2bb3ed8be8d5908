"""The rollout–trainer conformance figures (cancelctl.backends.verl.conformance) on log-probs whose gap is known."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from cancelctl.backends.verl.conformance import (  # noqa: E402
    DIFF_MAX,
    DIFF_MEAN,
    DIFF_P99,
    RATIO_MAX,
    RATIO_STD,
    TOKENS,
    conformance_figures,
    nearest_rank,
)


def test_the_same_log_probs_give_zero_gap_and_unit_ratios():
    lp = torch.log_softmax(torch.randn(4, 6, 10), -1)[..., 0]
    got = conformance_figures(lp, lp.clone(), torch.ones(4, 6))
    assert got[DIFF_MEAN] == got[DIFF_P99] == got[DIFF_MAX] == got[RATIO_STD] == 0.0
    assert got[RATIO_MAX] == 1.0 and got[TOKENS] == 24


def test_a_known_gap_is_recovered_and_masked_tokens_do_not_count():
    rollout = torch.full((2, 5), -2.0)
    train = rollout + torch.tensor([[0.1, -0.1, 0.1, -0.1, 50.0], [0.1, -0.1, 0.1, -0.1, 50.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 0]])  # the 50-nat gap is padding
    got = conformance_figures(train, rollout, mask)
    assert got[TOKENS] == 8
    assert got[DIFF_MEAN] == pytest.approx(0.1) and got[DIFF_MAX] == pytest.approx(0.1) and got[DIFF_P99] == pytest.approx(0.1)
    rho = torch.tensor([math.exp(0.1), math.exp(-0.1)] * 4, dtype=torch.float64)
    assert got[RATIO_STD] == pytest.approx(float(rho.std())) and got[RATIO_MAX] == pytest.approx(math.exp(0.1))


def test_p99_is_the_nearest_rank_so_one_outlier_in_a_thousand_is_max_not_p99():
    gap = torch.zeros(1000, dtype=torch.float64)
    gap[0] = 3.0
    train = -1.0 + gap
    got = conformance_figures(train[None], torch.full((1, 1000), -1.0), torch.ones(1, 1000))
    assert got[DIFF_MAX] == pytest.approx(3.0) and got[DIFF_P99] == 0.0 and got[DIFF_MEAN] == pytest.approx(0.003)
    values = torch.arange(1, 101, dtype=torch.float64)
    assert float(nearest_rank(values, 0.99)) == 99.0 and float(nearest_rank(values, 1.0)) == 100.0


def test_no_response_tokens_gives_no_figures_but_the_count():
    lp = torch.zeros(2, 3)
    assert conformance_figures(lp, lp, torch.zeros(2, 3)) == {TOKENS: 0.0}
