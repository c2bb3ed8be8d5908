"""The CPU lab: a faithful miniature of an RLVR run (toy verifiable task, tiny policy, rollout +
update loop over the exact losses of `losses/`). Entry point: `train(run, run_dir, logger, cache_dir)`,
reached through `backend.LabBackend` (`cancelctl.backends.registry`).

Importing this package is cheap: `train` (torch) loads on first use (PEP 562), because a spec naming
the lab imports `backend.LabBackend` to ask it its defaults, and validating a spec imports no torch.
"""

import importlib


def __getattr__(name: str):
    if name != "train":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = importlib.import_module(f"{__name__}.train").train
    globals()[name] = value
    return value


__all__ = ["train"]
