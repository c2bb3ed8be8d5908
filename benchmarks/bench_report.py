"""Report speed on a synthetic 100 runs × 20 metrics × 500 steps frame (1,000,000 points).

Times the report's pure computations (split by key, compute-matched check, every table with its
bootstrap statistics) and, separately, the plots and the full `build_report` with files written.
Collecting the same frame from MLflow is tracking's benchmark, not this one.
Prints the absolute times and, as a noise-robust figure, the ratio to a baseline measured in the
same run: one pandas group-by mean over every point (the least any report must do).
Usage: python benchmarks/bench_report.py [--runs 100] [--steps 500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from cancelctl.report.build import CollectedSweep, build_report
from cancelctl.report.options import ReportOptions
from cancelctl.stats import compute_match, frames

ARMS = ("gspo", "dfpo-min-replace", "grpo", "grpo-symclip")
SEEDS = 5
PER_STEP_KEYS = (
    "critic/score/mean", "actor/entropy", "response_length/mean", "actor/pg_clipfrac", "actor/pg_clipfrac_lower",
    "mismatch/rho_std", "mismatch/rho_max", "mismatch/pcc", "hacking/J", "dfpo/asym", "dfpo/ortho_residual",
    "cancel/energy_b0", "cancel/energy_b1", "cancel/energy_b2", "cancel/energy_b3", "cancel/flip_pos",
    "cancel/flip_neg", "compute/gen_tokens", "compute/gen_tokens_cum", "compute/update_steps_cum",
)  # 20 keys logged every step; plus one eval key every 50 steps
EVAL_KEY = "val-core/aime25/acc/mean_at_32"


def synthetic_frames(n_runs: int, n_steps: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """4 arms × (n_runs / 20) G values × 5 seeds; compute-matched within each G."""
    rng = np.random.default_rng(seed)
    g_values = [2 ** (1 + i) for i in range(max(1, n_runs // (len(ARMS) * SEEDS)))]
    steps = np.arange(1, n_steps + 1)
    runs, columns = [], {"run_id": [], "step": [], "key": [], "value": []}
    for g in g_values:
        for a, arm in enumerate(ARMS):
            for s in range(SEEDS):
                run_id = f"{arm}-G{g}-s{s}"
                runs.append({"run_id": run_id, "name": run_id, "arm": arm, "group": f"rollout.G={g}", "seed": s,
                             "G": g, "state": "FINISHED", "axis.rollout.G": g})
                noise = rng.normal(0, 0.02, (len(PER_STEP_KEYS), n_steps))
                values = 0.5 + noise
                values[0] = 0.1 + 0.7 * (1 - np.exp(-steps / (100 + 20 * a))) + noise[0]
                values[PER_STEP_KEYS.index("compute/gen_tokens")] = 128 * g * 500
                values[PER_STEP_KEYS.index("compute/gen_tokens_cum")] = steps * 128 * g * 500
                values[PER_STEP_KEYS.index("compute/update_steps_cum")] = 4 * steps
                for k, key in enumerate(PER_STEP_KEYS):
                    columns["run_id"].append(np.full(n_steps, run_id))
                    columns["step"].append(steps)
                    columns["key"].append(np.full(n_steps, key))
                    columns["value"].append(values[k])
                eval_steps = steps[steps % 50 == 0]
                columns["run_id"].append(np.full(eval_steps.size, run_id))
                columns["step"].append(eval_steps)
                columns["key"].append(np.full(eval_steps.size, EVAL_KEY))
                columns["value"].append(0.6 + 0.01 * a + rng.normal(0, 0.01, eval_steps.size))
    metrics = pd.DataFrame({name: np.concatenate(parts) for name, parts in columns.items()})
    return pd.DataFrame(runs), metrics


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs, metrics = synthetic_frames(args.runs, args.steps)
    print(f"frame: {len(runs)} runs, {metrics['key'].nunique()} keys, {len(metrics):,} points")

    baseline_s, _ = timed(lambda: metrics.groupby(["run_id", "key"])["value"].mean(), args.repeats)
    split_s, by_key = timed(lambda: frames.split_by_key(metrics), args.repeats)
    check_s, _ = timed(lambda: compute_match.check_compute_matched(runs, by_key), args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        def build(plots: bool):
            out_dir = Path(tmp) / "bench"
            return build_report(CollectedSweep("bench", runs, metrics), ReportOptions(baseline="gspo", plots=plots),
                                out_dir=out_dir)

        tables_s, built = timed(lambda: build(False), args.repeats)
        full_s, _ = timed(lambda: build(True), args.repeats)
    n_rows = sum(len(t.data) for t in built.tables)
    print(f"split by key:            {split_s:.3f} s")
    print(f"compute-matched check:   {check_s:.3f} s")
    print(f"tables (all statistics, files written, no plots): {tables_s:.3f} s  ({n_rows} table rows)")
    print(f"full build_report with plots: {full_s:.3f} s")
    print(f"baseline (one group-by mean over every point): {baseline_s:.3f} s"
          f" -> tables ratio {tables_s / baseline_s:.1f}x")


if __name__ == "__main__":
    main()
