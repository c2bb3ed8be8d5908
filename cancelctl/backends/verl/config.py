"""verl's `policy_loss` config extended with our loss options (imports verl: only used on verl jobs).

verl builds `actor.policy_loss` with `hydra.utils.instantiate`, so unknown keys there fail dataclass
conversion (docs/verl-internals.md#loading-the-plugin-in-every-process). The rendered overrides point `policy_loss._target_` here and
add our fields with `+actor_rollout_ref.actor.policy_loss.<field>=...`; inside the worker the
registered `cancel_*` losses read them as `config.policy_loss.<field>`. Defaults equal the spec's
defaults (cancelctl/spec/experiment.py), a test keeps them in step.

Field names: the DFPO ones are those `losses.dfpo` reads (`losses.config.policy_option`); the
wrapper ones (inject_*, probe) are what the verl plugin reads to apply the token-weight wrappers of
`losses.weights` inside verl; monitor_delta, mechanism_every and energy_buckets set the
mechanism metrics the plugin adds to the loss's metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.workers.config.actor import PolicyLossConfig

from losses.catalog import PROBES, TRANSFORMS


@dataclass
class CancelPolicyLossConfig(PolicyLossConfig):
    """Options of the `cancel_*` losses and token-weight wrappers (docs/losses.md).

    Args:
        transform: DFPO group transformation of the post-clip sequence weights [D App. B].
        stop_grad: False = the DFPO "no stop-gradient" ablation [D Table 3].
        scale: DFPO ablation s~ = scale * s-bar with no group transform; None = use the transform.
        eps1: trunc_rebalance floor [D eq. 52].
        group_size: rows per group (G); DFPO refuses micro-batches holding partial groups.
        inject_delta: weight on tokens with pi_train(o|theta_old) < inject_delta_p_low [H eq. 17-18];
            None = wrapper off.
        inject_delta_p_low: probability threshold of the delta rule.
        inject_noise_sigma: token weights ~ N(1, sigma^2) [H eq. 21]; None = wrapper off.
        inject_noise_seed: seed of the noise generator (the run's seed).
        probe: "positive_only" / "negative_only" row masks [C §3.2]; None = off.
        monitor_delta: delta of the hacking/J monitor metric [H eq. 23].
        mechanism_every: compute `cancel/energy_b{k}` and `cancel/flip_pos|neg` on every K-th loss
            call (micro-batch) of a worker; 0 = off (optional, docs/metrics.md#cancel; their cost is in
            benchmarks/bench_verl_update.py). verl gives a loss no step counter: with M micro-batches
            per step, K = M·k is every k steps.
        energy_buckets: token-frequency buckets of `cancel/energy_b{k}` [D eq. 24].
    """

    transform: str = "min_replace"
    stop_grad: bool = True
    scale: Optional[float] = None
    eps1: float = 0.05
    group_size: Optional[int] = None
    inject_delta: Optional[float] = None
    inject_delta_p_low: float = 0.1
    inject_noise_sigma: Optional[float] = None
    inject_noise_seed: int = 0
    probe: Optional[str] = None
    monitor_delta: float = 2.0
    mechanism_every: int = 0
    energy_buckets: int = 4

    def __post_init__(self):
        parent_post_init = getattr(super(), "__post_init__", None)
        if parent_post_init is not None:
            parent_post_init()
        # Hand-written Hydra overrides skip the spec's checks; fail on the driver, not in a worker.
        if self.transform not in TRANSFORMS:
            raise ValueError(f"policy_loss.transform {self.transform!r}: expected one of {TRANSFORMS}")
        if self.probe is not None and self.probe not in PROBES:
            raise ValueError(f"policy_loss.probe {self.probe!r}: expected one of {PROBES} or null")
        if self.scale is not None and self.scale <= 0:
            raise ValueError(f"policy_loss.scale must be > 0, got {self.scale}")
        if self.mechanism_every < 0:
            raise ValueError(f"policy_loss.mechanism_every must be >= 0 (0 = off), got {self.mechanism_every}")
        if self.energy_buckets < 1:
            raise ValueError(f"policy_loss.energy_buckets must be >= 1, got {self.energy_buckets}")
        if self.inject_delta_p_low <= 0 or self.inject_delta_p_low >= 1:
            raise ValueError(f"policy_loss.inject_delta_p_low must be in (0, 1), got {self.inject_delta_p_low}")
