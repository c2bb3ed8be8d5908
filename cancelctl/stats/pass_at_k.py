"""pass@k from n samples per problem, c of them correct: the unbiased estimator of Chen et al. 2021
("Evaluating Large Language Models Trained on Code", arXiv 2107.03374, eq. 1),

    pass@k = E_problems[ 1 − C(n − c, k) / C(n, k) ],

the probability that at least one of k samples drawn without replacement from the n is correct,
averaged over problems. The binomial ratio is computed as their numerically stable product
C(n − c, k) / C(n, k) = Π_{i = n−c+1}^{n} (1 − k / i) (their Fig. 3), never as factorials.
Drawing k of n with replacement (as a bootstrap of best-of-k does) is biased low for k > 1.
"""

from __future__ import annotations

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem: n samples, c correct, k ≤ n drawn [Chen et al. 2021, eq. 1]."""
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 ≤ k ≤ n (k={k}, n={n})")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 ≤ c ≤ n (c={c}, n={n})")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(n: int, correct: np.ndarray, k: int) -> float:
    """pass@k averaged over problems, `correct[j]` the correct count of problem j among its n samples."""
    counts = np.asarray(correct).astype(int).ravel()
    if counts.size == 0:
        raise ValueError("pass@k of no problems")
    return float(np.mean([pass_at_k(n, int(c), k) for c in counts]))


def pass_ks(n: int) -> list[int]:
    """The k a report shows for n samples: 1 and the powers of 2 below n, then n itself."""
    ks = [1]
    while ks[-1] * 2 < n:
        ks.append(ks[-1] * 2)
    return ks + ([n] if n > 1 else [])
