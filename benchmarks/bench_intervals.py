"""Coverage of the report's 95% interval over seeds, before (percentile and expanded-percentile
bootstrap) and after (Student's t), simulated at the lab's seed spreads: n = 3, 4, 5, 10 seeds.

Each cell is the share of simulated seed sets whose interval holds the true mean ± its Monte Carlo
standard error. Families: normal, beta (bounded like an accuracy) and lognormal (right-skewed) at the
largest relative sd of the lab demo's arms (`benchmarks/interval_coverage.py`: LAB_DEMO_FINAL), and t3
(heavy symmetric tails). The target: ≥ 93% at every n.
Usage: python benchmarks/bench_intervals.py [--trials 2000] [--n-boot 1000] [--rel-sd 0.42]
"""

from __future__ import annotations

import argparse
import time

from interval_coverage import FAMILIES, LAB_DEMO_FINAL, METHODS, coverage  # its sibling: run as a script

NS = (3, 4, 5, 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000, help="simulated seed sets per cell")
    parser.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples per interval")
    parser.add_argument("--rel-sd", type=float, default=None, help="relative sd (default: the lab demo's largest)")
    args = parser.parse_args()
    mean, sd = max(LAB_DEMO_FINAL.values(), key=lambda m_sd: m_sd[1] / m_sd[0])
    if args.rel_sd is not None:
        sd = args.rel_sd * mean
    print(f"seed mean {mean:.4f}, sd {sd:.4f} (relative sd {sd / mean:.3f}); {args.trials} seed sets per cell, "
          f"{args.n_boot} bootstrap resamples; nominal 95%, target ≥ 93%")
    print(f"{'family':<10} {'method':<11} " + " ".join(f"{f'n = {n}':>14}" for n in NS))
    start = time.perf_counter()
    for family in FAMILIES:
        for method in METHODS:
            cells = []
            for n in NS:
                c = coverage(method, family, n, mean=mean, sd=sd, trials=args.trials, seed=n, n_boot=args.n_boot)
                cells.append(f"{c.covered:6.1%} ± {c.se:4.1%}")
            print(f"{family:<10} {method:<11} " + " ".join(f"{cell:>14}" for cell in cells), flush=True)
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
