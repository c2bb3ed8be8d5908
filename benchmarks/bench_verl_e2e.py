"""verl's whole `main_ppo` loop on CPU, per arm: where a step's time goes, and peak memory.

`python benchmarks/bench_verl_e2e.py [--steps N] [--poll S] [--arms A,B] [--passes K]`. Each arm is a cancelctl verl run with
`cluster.device: cpu` (the packaged CPU platform and hf_cpu rollout), rendered by cancelctl exactly as
a job runs it (command.job_command + the job's env), on the tiny random Qwen2 and data of
tests/backends/verl/tiny_verl.py; the arms run once each, one after another (a single pass: a step's
generation varies ±10% between runs of the same math, so read a ratio near the target over several
invocations). Prints per arm the mean over steps 2..N (step 1 warms up) of
verl's own timings — the whole step, generation, old log-prob, actor update, weight sync — the peak
resident memory summed over every process of the run (Ray, TransferQueue, workers), and whole-step
ratios to verl's own `gspo` measured in the same run: `cancel_dfpo` target ≤ 1.10×.

`--poll 2.0` restores verl's replay-buffer poll (cancelctl's CPU trainer sets 0.05 s) to show what it
cost: with it, generation cannot take under 2 s a step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "backends" / "verl"))
DFPO_TARGET = 1.10
PHASES = ("timing_s/step", "timing_s/gen", "timing_s/old_log_prob", "timing_s/update_actor", "timing_s/update_weights")
SPEC_ARMS = {  # the sweep's arms (spec patches)
    "gspo": {"algorithm": {"loss": "gspo"}},
    "dfpo": {"algorithm": {"loss": "dfpo"}},
    "grpo": {"algorithm": {"loss": "grpo"}},
    "grpo-reward-balanced": {"algorithm": {"loss": "grpo"}, "batching": {"strategy": "reward_balanced"}},
}
ARMS = {  # what is measured -> (the sweep arm it runs, extra overrides)
    "gspo (verl)": ("gspo", ["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"]),  # verl's own gspo loss
    "cancel_gspo": ("gspo", []),
    "cancel_dfpo": ("dfpo", []),
    "cancel_grpo": ("grpo", []),
    "cancel_grpo reward_balanced": ("grpo-reward-balanced", []),
}


def sweep_file(out: Path, tiny, steps: int) -> Path:
    import yaml
    from tiny_verl import PROMPTS_PER_STEP

    spec = {
        "name": "bench-verl-e2e",
        "base": {
            "backend": "verl",
            "executor": "local",
            "model": {"path": str(tiny.model), "strategy": "fsdp2", "gradient_checkpointing": False},
            "data": {"train_files": [str(tiny.train)], "max_prompt_length": 64, "max_response_length": 16,
                     "reward_function": f"{tiny.reward}:{tiny.reward_name}"},
            "algorithm": {"lr": 1.0e-3, "mini_batch_size": PROMPTS_PER_STEP // 2,
                          "micro_batch_size_per_gpu": PROMPTS_PER_STEP // 2 * 4},
            "rollout": {"G": 4},
            "budget": {"steps": steps, "prompts_per_step": PROMPTS_PER_STEP},
            "cluster": {"device": "cpu"},
        },
        "arms": SPEC_ARMS,
        "seeds": [0],
    }
    path = out / "bench.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def session_rss_bytes(sid: int) -> int:
    """Resident memory summed over the processes of session `sid` (the run and everything it started)."""
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getsid(int(proc.name)) != sid:
                continue
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, ProcessLookupError, ValueError):
            continue
    return total


def run_arm(run, run_dir: Path, extra: list[str], poll: float | None) -> tuple[dict[str, float], float, float]:
    from cancelctl.backends.verl import command, supervisor
    from cancelctl.backends.verl.cpu import render as cpu_render

    run_dir.mkdir(parents=True)
    argv = command.job_command(run, run_dir, sys.executable) + extra
    if poll is not None:
        argv.append(f"+trainer.v1.cancelctl.poll_interval={poll}")
    env = dict(os.environ, **cpu_render.job_env(run), **command.run_files_env(run, run_dir))
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=run_dir, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=(run_dir / "stderr.log").open("wb"))
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], session_rss_bytes(proc.pid))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    proc.wait()
    sampler.join()
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        tail = (run_dir / "stderr.log").read_text(errors="replace").splitlines()
        raise SystemExit(f"{run.name}: verl exited {proc.returncode}: {supervisor.root_exception(tail)} ({run_dir}/stderr.log)")
    steps = [json.loads(line) for line in (run_dir / command.VERL_METRICS).open()]
    later = [s["data"] for s in steps if s["step"] >= 2]
    means = {key: statistics.fmean(d[key] for d in later if key in d) for key in PHASES if any(key in d for d in later)}
    return means, peak[0] / 2**30, wall


def _mean_of_passes(found: list) -> tuple[dict[str, float], float, float]:
    keys = set.intersection(*(set(means) for means, _, _ in found))
    return (
        {key: statistics.fmean(means[key] for means, _, _ in found) for key in keys},
        max(peak for _, peak, _ in found),
        statistics.fmean(wall for _, _, wall in found),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--poll", type=float, default=None, help="replay-buffer poll in seconds (default: cancelctl's)")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of: " + ", ".join(ARMS))
    parser.add_argument("--passes", type=int, default=1, help="interleaved passes over the arms (means over passes)")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.arms.split(",")]
    unknown = [name for name in chosen if name not in ARMS]
    if unknown:
        parser.error(f"--arms: unknown {', '.join(unknown)}; known: {', '.join(ARMS)}")
    if not {"gspo (verl)", "cancel_dfpo"} <= set(chosen):
        parser.error("--arms must include 'gspo (verl)' and 'cancel_dfpo' (the ratio's two sides)")
    from tiny_verl import build_tiny_verl

    from cancelctl.spec.expand import load_sweep

    with tempfile.TemporaryDirectory(prefix="bench-verl-e2e-") as tmp:
        out = Path(tmp)
        tiny = build_tiny_verl(out / "tiny", steps=args.steps * 4)
        runs = {run.arm: run for run in load_sweep(sweep_file(out, tiny, args.steps)).runs}
        passes: dict[str, list] = {name: [] for name in chosen}
        for p in range(args.passes):  # interleaved: a slow spell of the machine hits every arm alike
            for i, name in enumerate(chosen):
                arm, extra = ARMS[name]
                passes[name].append(run_arm(runs[arm], out / "runs" / f"{p}-{i}-{arm}", extra, args.poll))
                print(f"  {name} (pass {p + 1}): done in {passes[name][-1][2]:.0f} s", file=sys.stderr)
        results = {name: _mean_of_passes(found) for name, found in passes.items()}
    print(f"verl main_ppo on CPU, {args.steps} steps per arm (8 prompts x G 4, tiny Qwen2), mean of steps 2..{args.steps}"
          f" over {args.passes} pass(es)")
    header = ["arm", *(k.split("/")[1] for k in PHASES), "peak RSS GiB", "run s", "step vs gspo (verl)"]
    print(" | ".join(header))
    base = results["gspo (verl)"][0]["timing_s/step"]
    for name, (means, peak, wall) in results.items():
        cells = [f"{means.get(k, float('nan')):.3f}" for k in PHASES]
        print(" | ".join([name, *cells, f"{peak:.2f}", f"{wall:.0f}", f"{means['timing_s/step'] / base:.3f}x"]))
    ratio = results["cancel_dfpo"][0]["timing_s/step"] / base
    update = results["cancel_dfpo"][0]["timing_s/update_actor"] / results["gspo (verl)"][0]["timing_s/update_actor"]
    print(f"cancel_dfpo / gspo (verl) actor update: {update:.3f}x (the loss's own cost; generation varies with the policy)")
    print(f"cancel_dfpo / gspo (verl) whole step: {ratio:.3f}x (target <= {DFPO_TARGET:.2f}x): {'ok' if ratio <= DFPO_TARGET else 'over'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
