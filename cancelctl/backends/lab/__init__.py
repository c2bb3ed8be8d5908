"""The CPU lab: a faithful miniature of an RLVR run (toy verifiable task, tiny policy, rollout +
update loop over the exact losses of `losses/`). Entry point: `train(run, run_dir, logger, cache_dir)`."""

from cancelctl.backends.lab.train import train

__all__ = ["train"]
