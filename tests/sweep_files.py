"""Sweep files for the launch and executor tests: a tiny lab sweep of a few seconds per run."""

from __future__ import annotations

from pathlib import Path

import yaml

# A lab run of a few seconds (most of it importing torch and MLflow).
TINY_LAB = {"d_model": 16, "n_layers": 1, "n_heads": 2, "warmstart_steps": 5, "checkpoint_every": 2, "max_operand": 5}

# An arm whose entropy rule cannot be met (a floor of 100 nats, over 2-step windows): its lab runs are
# stopped by the rule at step 2, deterministically (the LR-spike divergence is in tests/jobs/test_monitor.py).
STOPPING_ARM = {"algorithm": {"loss": "gspo"}, "monitor": {"entropy_collapse": {"floor": 100.0, "window": 2}}}


def write_sweep(directory: Path, name: str, *, arms=None, seeds=(0, 1), steps=4, base=None, **top) -> Path:
    spec = {
        "name": name,
        "base": {
            "backend": "lab",
            "lab": dict(TINY_LAB),
            "rollout": {"G": 2},
            "budget": {"steps": steps, "prompts_per_step": 4},
            "eval": {"every": 2, "k": 1, "prompts": 4},
            "algorithm": {"lr": 1.0e-3},
            **(base or {}),
        },
        "arms": arms or {"grpo": {"algorithm": {"loss": "grpo"}}, "gspo": {"algorithm": {"loss": "gspo"}}},
        "seeds": list(seeds),
        **top,
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path

# gen tokens vs update steps of the same runs: always far apart (decided once E can reach the bar);
# the tiny lab's reward is 0 in every run (never decided: equal differences of 0)
# claims of the `--until-decided` tests (tests/launch, tests/cli)
UNTIL_DECIDED_CLAIMS = [
    {"id": "tokens", "source": "test", "statement": "more tokens than updates",
     "metric": {"kind": "mean", "key": "compute/gen_tokens_cum", "versus_key": "compute/update_steps_cum"},
     "direction": "higher", "arm": "grpo", "versus": "grpo"},
    {"id": "score", "source": "test", "statement": "gspo scores higher",
     "metric": {"kind": "mean", "key": "critic/score/mean"}, "direction": "higher", "arm": "gspo", "versus": "grpo"},
]
