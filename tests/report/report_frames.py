"""Synthetic sweeps as `cancelctl.tracking.collect` returns them (runs frame + tidy metrics), with
planted effects: shared by the report tests and the golden files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from cancelctl.report.build import CollectedSweep, build_report
from cancelctl.report.options import ReportOptions
from cancelctl.stats.options import ComparisonOptions

ARMS = {"gspo": 30.0, "dfpo": 20.0, "grpo": 40.0}  # arm -> time constant of the reward curve (steps)
FINAL_ACC = {"gspo": 0.60, "dfpo": 0.66, "grpo": 0.58}  # planted eval accuracies
GS = (4, 8)
SEEDS = (0, 1, 2)
STEPS = 100


def synthetic_sweep(
    token_scale: dict[tuple[str, int], float] | None = None, steps: int = STEPS, seeds: tuple[int, ...] = SEEDS
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """3 arms × 2 G × seeds; token_scale[(arm, G)] skews generated tokens (breaks compute matching)."""
    rng = np.random.default_rng(0)
    runs, rows = [], []
    step_axis = np.arange(1, steps + 1)
    for g in GS:
        for arm, tau in ARMS.items():
            for seed in seeds:
                run_id = f"{arm}-G{g}-s{seed}"
                runs.append({
                    "run_id": run_id, "name": run_id, "arm": arm, "group": f"rollout.G={g}", "seed": seed,
                    "G": g, "state": "FINISHED", "axis.rollout.G": g,
                })
                seed_rng = np.random.default_rng(seed)  # shared by the arms of a seed: pairing helps
                seed_effect = seed_rng.normal(0, 0.02)
                reward = 0.1 + 0.7 * (1 - np.exp(-step_axis / tau)) + rng.normal(0, 0.01, steps)
                tokens_per_step = 16 * g * 100 * (token_scale or {}).get((arm, g), 1.0)
                series = {
                    "critic/score/mean": reward,
                    "actor/entropy": 2.0 * np.exp(-step_axis / (tau * 2)) + rng.normal(0, 0.02, steps),
                    "compute/gen_tokens": np.full(steps, tokens_per_step),
                    "compute/gen_tokens_cum": step_axis * tokens_per_step,
                    "compute/update_steps_cum": 2.0 * step_axis,
                    "compute/hours_cum": step_axis * 0.01,
                    "dfpo/asym": np.full(steps, 0.02 if arm == "dfpo" else 0.1) + rng.normal(0, 0.005, steps),
                    "mismatch/rho_std": 0.01 + 0.001 * step_axis + rng.normal(0, 0.001, steps),
                    "hacking/J": rng.normal(0.5, 0.1, steps),
                    **{f"cancel/energy_b{b}": np.full(steps, 0.25) for b in range(3)},
                    "cancel/energy_b3": np.full(steps, 0.15 if arm == "dfpo" else 0.3),
                    "cancel/flip_pos": rng.uniform(0.1, 0.2, steps),
                    "cancel/flip_neg": rng.uniform(0.1, 0.2, steps),
                }
                for key, values in series.items():
                    rows += [(run_id, int(s), key, float(v)) for s, v in zip(step_axis, values)]
                for s in range(10, steps + 1, 10):
                    acc = FINAL_ACC[arm] * s / steps + seed_effect + rng.normal(0, 0.003)
                    rows.append((run_id, s, "val-core/aime25/acc/mean_at_4", acc))
    return pd.DataFrame(runs), pd.DataFrame(rows, columns=["run_id", "step", "key", "value"])


def build(runs: pd.DataFrame, metrics: pd.DataFrame, *, sweep: str, out_dir: Path, console=None, **settings):
    """`build_report` with the report's inputs and settings given flat, as the tests write them:
    claims, notes, alerts, seed_rounds and rules_off go into the `CollectedSweep`; allow_unmatched,
    token_tol, alpha, power and min_seeds into `ComparisonOptions`; `threshold` is κ; the rest are
    `ReportOptions`."""
    inputs = {name: settings.pop(name) for name in SWEEP_INPUTS if name in settings}
    compare = ComparisonOptions(**{name: settings.pop(name) for name in COMPARE_SETTINGS if name in settings})
    if "threshold" in settings:
        settings["kappa"] = settings.pop("threshold")
    options = ReportOptions(compare=compare, **settings)
    return build_report(CollectedSweep(sweep, runs, metrics, **inputs), options, out_dir=out_dir, console=console)


SWEEP_INPUTS = ("claims", "notes", "alerts", "seed_rounds", "rules_off")
COMPARE_SETTINGS = ("allow_unmatched", "token_tol", "alpha", "power", "min_seeds")


def report_for(tmp_path: Path, runs=None, metrics=None, **kwargs):
    """build_report on `synthetic_sweep()` (or the frames given) with the tests' defaults."""
    if runs is None:
        runs, metrics = synthetic_sweep()
    options = dict(sweep="synthetic", baseline="gspo", out_dir=tmp_path / "synthetic")
    options.update(kwargs)
    return build(runs, metrics, **options)


# arm -> (asymptote A, efficiency B) planted in `scaling_sweep`; "stalled" never rises
SCALING_ARMS = {"gspo": (0.65, 1.2), "dfpo": (0.75, 2.0), "stalled": None}
SCALING_MIDPOINT = 2e5  # generated tokens at half the rise, every arm
SCALING_R0 = 0.1


def scaling_sweep(seeds: tuple[int, ...] = (0, 1, 2, 3), steps: int = 60) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Arms whose training reward follows ScaleRL's curve with planted A and B (`SCALING_ARMS`; 40k
    generated tokens a step, noise 0.02 a point, a seed effect on A shared by the arms), an eval
    benchmark every 5 steps on the same curve, and one arm whose reward never rises."""
    from cancelctl.stats.scaling import sigmoid_reward

    rng = np.random.default_rng(7)
    runs, rows = [], []
    step_axis = np.arange(0, steps + 1)
    tokens = 40_000.0 * step_axis
    for arm, planted in SCALING_ARMS.items():
        for seed in seeds:
            run_id = f"{arm}-s{seed}"
            runs.append({"run_id": run_id, "name": run_id, "arm": arm, "group": "", "seed": seed, "G": 4,
                         "state": "FINISHED"})
            seed_effect = np.random.default_rng(100 + seed).normal(0, 0.02)
            if planted is None:
                curve = np.full(step_axis.size, SCALING_R0 + 0.2)
            else:
                curve = sigmoid_reward(tokens, SCALING_R0, planted[0] + seed_effect, planted[1], SCALING_MIDPOINT)
            series = {
                "critic/score/mean": curve + rng.normal(0, 0.02, step_axis.size),
                "compute/gen_tokens": np.full(step_axis.size, 40_000.0),
                "compute/gen_tokens_cum": tokens,
                "compute/update_steps_cum": 2.0 * step_axis,
            }
            for key, values in series.items():
                rows += [(run_id, int(s), key, float(v)) for s, v in zip(step_axis, values)]
            for s in range(0, steps + 1, 5):
                rows.append((run_id, s, "val-core/lab/acc/mean_at_4", float(curve[s] + rng.normal(0, 0.01))))
    return pd.DataFrame(runs), pd.DataFrame(rows, columns=["run_id", "step", "key", "value"])
