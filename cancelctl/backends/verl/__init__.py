"""verl backend: spec → Hydra overrides for `python -m verl.trainer.main_ppo`, and offline validation.

Importing this package is cheap (no hydra, no verl, no spec models): the names below load their module
on first use (PEP 562), because every process of a verl run imports this package through cancelctl's
`verl.plugins` entry points, and most of them (the rollout server, agent-loop and reward workers) never
render or compose a spec (pydantic model building they would pay for nothing). `validate_runs` imports
Hydra, and verl once per process for its deeper checks. `config.py` imports verl and is only loaded by
verl itself (as the `_target_` of `actor.policy_loss`). `train` is the in-job entry cancelctl.jobs calls.
"""

import importlib

# public name -> the module that defines it
_EXPORTS = {
    "SKIPPED": "compose",
    "RunIssue": "compose",
    "ValidationResult": "compose",
    "compose_run": "compose",
    "validate_runs": "compose",
    "verl_available": "compose",
    "train": "supervisor",
    "VerlRenderError": "errors",
    "launch_refusals": "planning",
    "config_name": "render",
    "format_command": "render",
    "launch_blockers": "render",
    "render_command": "render",
    "render_overrides": "render",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


__all__ = list(_EXPORTS)
