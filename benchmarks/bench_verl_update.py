"""One actor update step through verl 0.9.1's real path: `cancel_dfpo` vs verl's own `gspo`.

`python benchmarks/bench_verl_update.py [--steps N] [--device cpu|cuda]`. Runs
tests/backends/verl/verl_actor_run.py (the real-verl test's support: tiny random Qwen2; on `cpu`, the
default, fp32 on the CPU platform registered through verl's PlatformRegistry; on `cuda`, verl's own GPU
platform in its default bf16 mixed precision) in one subprocess: `ActorRolloutRefWorker.update_actor` →
FSDP2 engine → `ppo_loss` → the loss, on the same 8 prompts × G 4 batch. Every case's worker is built
first, then the steps run round-robin (one step of each case per round), so machine-load drift hits all alike. Prints each case's median
step time and its ratio to verl's `gspo`: the median over rounds (after the first) of case / gspo. Targets: cancel_dfpo ≤ 1.10× gspo; the cost of
the mechanism metrics is shown as cancel_dfpo with energy/flip on every call vs off.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = ROOT / "tests" / "backends" / "verl"
DFPO_TARGET = 1.10


def cases(steps: int) -> list[dict]:
    return [
        {"name": "gspo", "loss_mode": "gspo", "steps": steps},
        {"name": "cancel_gspo", "loss_mode": "cancel_gspo", "steps": steps},
        {"name": "cancel_dfpo", "loss_mode": "cancel_dfpo", "steps": steps},
        {"name": "cancel_dfpo+energy,flip", "loss_mode": "cancel_dfpo", "steps": steps,
         "policy_loss": {"mechanism_every": 1}},  # fmt: skip
        {"name": "gspo (2nd worker)", "loss_mode": "gspo", "steps": steps},  # noise floor: should read ~1.00×
    ]


def main() -> int:
    sys.path.insert(0, str(SUPPORT))
    from verl_actor_run import DEVICES, MODEL_ENV, TINY_MODEL, run_env

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--device", choices=DEVICES, default="cpu", help="cpu: fp32; cuda: verl's default bf16")
    parser.add_argument("--model", default=TINY_MODEL, metavar="HIDDENxLAYERSxRESPONSE_LENxVOCAB",
                        help="the random Qwen2's size (default: the test's tiny one; a GPU takes e.g. 1024x8x512x32000)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        scenarios = Path(tmp) / "scenarios.json"
        scenarios.write_text(json.dumps(cases(args.steps)))
        proc = subprocess.run(
            [sys.executable, str(SUPPORT / "verl_actor_run.py"), str(scenarios), tmp],
            env=dict(os.environ, **run_env(args.device, port), VERL_ACTOR_RUN_ROUND_ROBIN=str(args.steps),
                     **{MODEL_ENV: args.model}),
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            print(proc.stderr[-4000:], file=sys.stderr)
            return proc.returncode
        results = json.loads((Path(tmp) / "results.json").read_text())
    errors = {k: v["error"] for k, v in results.items() if isinstance(v, dict) and "error" in v}
    if errors:
        print(json.dumps(errors, indent=1), file=sys.stderr)
        return 1
    seconds = {k: v["seconds"][1:] for k, v in results.items() if not k.startswith("_")}
    ratio = {k: statistics.median(t / b for t, b in zip(v, seconds["gspo"], strict=True)) for k, v in seconds.items()}
    median = {k: statistics.median(v) for k, v in seconds.items()}
    precision = results["gspo"]["precision"]  # as the engine reports it
    print(
        f"verl {args.steps}-step actor update on {precision['device']}, {precision['compute']} compute, "
        f"{precision['params']} parameters (8 prompts x G 4, random Qwen2 {args.model} = hidden x layers x "
        "response tokens x vocab), median step after the first"
    )
    print(f"{'case':<26} {'ms/step':>9} {'vs gspo':>8}  target")
    for name, value in median.items():
        target = f"<= {DFPO_TARGET:.2f}x" if name == "cancel_dfpo" else ""
        ok = "" if not target else ("yes" if ratio[name] <= DFPO_TARGET else "NO")
        print(f"{name:<26} {1e3 * value:>9.1f} {ratio[name]:>7.3f}x  {target} {ok}")
    on = statistics.median(
        t / b for t, b in zip(seconds["cancel_dfpo+energy,flip"], seconds["cancel_dfpo"], strict=True)
    )
    print(f"mechanism metrics energy/flip on every call: {on:.3f}x cancel_dfpo without them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
