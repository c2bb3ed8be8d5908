"""pass@k [Chen et al. 2021, eq. 1]: hand values, the edge k > n − c, and agreement with the
definition itself — the share of k-subsets of the n samples that hold a correct one."""

from itertools import combinations
from math import comb

import numpy as np
import pytest

from cancelctl.stats.pass_at_k import mean_pass_at_k, pass_at_k, pass_ks


def test_hand_values():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # pass@1 is the share correct
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - comb(3, 2) / comb(5, 2))  # 0.7
    assert pass_at_k(5, 2, 4) == 1.0 and pass_at_k(5, 2, 5) == 1.0  # k > n − c: every subset has a correct one
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0


def test_agrees_with_brute_force_enumeration_of_subsets():
    for n in range(1, 8):
        for c in range(n + 1):
            samples = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(combinations(samples, k))
                brute = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


def test_stable_where_binomials_overflow():
    # C(1000, 500) ~ 1e299: the product form stays finite and monotone in k and c
    values = [pass_at_k(1000, 3, k) for k in (1, 10, 100, 500)]
    assert np.all(np.isfinite(values)) and values == sorted(values)
    assert pass_at_k(1000, 3, 1) == pytest.approx(0.003)
    assert pass_at_k(1000, 500, 1) < pass_at_k(1000, 501, 1)


def test_mean_over_problems_and_bad_input():
    assert mean_pass_at_k(4, np.array([0, 1, 4]), 2) == pytest.approx((0 + 0.5 + 1) / 3)
    with pytest.raises(ValueError, match="k ≤ n"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="c ≤ n"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="no problems"):
        mean_pass_at_k(4, np.array([]), 1)


def test_the_ks_shown():
    assert pass_ks(1) == [1]
    assert pass_ks(4) == [1, 2, 4]
    assert pass_ks(6) == [1, 2, 4, 6]
    assert pass_ks(32) == [1, 2, 4, 8, 16, 32]
