"""verl plugin: our losses in verl's policy-loss registry as `cancel_<name>`.

Loaded at `import verl` through the `verl.plugins` entry point declared in pyproject.toml
(../shared/notes/verl-0.9.1.md §3), in every process that imports verl, so the actor workers
see the names. The only module of `losses/` that imports verl.

Aggregation: `losses.aggregation.agg_loss` is verl's `agg_loss` op for op (tests check bitwise
equality of value and gradient on every mode, with and without `global_batch_info`), so the
registered losses aggregate exactly as verl's own.

Options come from `config.policy_loss` (verl's PolicyLossConfig has no such fields; the verl backend
points `policy_loss._target_` at its `CancelPolicyLossConfig`, notes §3): the DFPO options read by
`losses.dfpo`, and the token-weight wrappers applied here per call when set — `probe`
(positive_only / negative_only), `inject_delta` with `inject_delta_p_low`, `inject_noise_sigma`
with `inject_noise_seed`. TIS is verl's own `algorithm.rollout_correction` (SPEC).
"""

from __future__ import annotations

import torch
from verl.trainer.ppo.core_algos import register_policy_loss

from losses.config import policy_option
from losses.registry import NEEDS_GROUPS, get, names
from losses.weights import DeviceGenerators, LossFn, inject_delta, inject_noise, negative_only, positive_only

PREFIX = "cancel_"
PROBES = {"positive_only": positive_only, "negative_only": negative_only}

_noise_generators: dict[tuple[int, int], DeviceGenerators] = {}


def _noise_generator(seed: int) -> DeviceGenerators:
    """One generator source per (seed, DP rank) for the life of the worker process: reproducible per
    seed, independent across ranks, fresh noise on every micro-batch, drawn on the GPU the tokens are on."""
    rank = (
        torch.distributed.get_rank() if torch.distributed.is_available() and torch.distributed.is_initialized() else 0
    )
    key = (int(seed), rank)
    if key not in _noise_generators:
        _noise_generators[key] = DeviceGenerators(int(seed) * 1_000_003 + rank)
    return _noise_generators[key]


def configured_loss(loss_fn: LossFn, config) -> LossFn:
    """`loss_fn` wrapped as `config.policy_loss` asks (probe innermost, as the lab does)."""
    probe = policy_option(config, "probe", None)
    if probe is not None:
        if probe not in PROBES:
            raise ValueError(f"policy_loss.probe={probe!r}; expected one of {', '.join(PROBES)}")
        loss_fn = PROBES[probe](loss_fn)
    delta = policy_option(config, "inject_delta", None)
    if delta is not None:
        loss_fn = inject_delta(loss_fn, delta=delta, p_low=policy_option(config, "inject_delta_p_low", 0.1))
    sigma = policy_option(config, "inject_noise_sigma", None)
    if sigma is not None:
        loss_fn = inject_noise(
            loss_fn, sigma=sigma, generator=_noise_generator(policy_option(config, "inject_noise_seed", 0))
        )
    return loss_fn


def verl_loss(name: str) -> LossFn:
    """The registry entry for `cancel_<name>`: verl's keyword signature (+ group_ids for later use)."""
    loss_fn = get(name)

    def cancel_loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        loss_agg_mode="token-mean",
        config=None,
        rollout_is_weights=None,
        group_ids=None,
    ):
        if name in NEEDS_GROUPS and group_ids is None:
            raise ValueError(
                f"{PREFIX}{name} needs the group id (uid) of every row, but verl 0.9.1's ppo_loss passes only "
                "per-token tensors to a registered policy loss. Group-aware calls from inside verl (a replaced "
                "ppo_loss that forwards data['uid']) are a later issue; until then run dfpo in the CPU lab."
            )
        return configured_loss(loss_fn, config)(
            old_log_prob=old_log_prob,
            log_prob=log_prob,
            advantages=advantages,
            response_mask=response_mask,
            loss_agg_mode=loss_agg_mode,
            config=config,
            rollout_is_weights=rollout_is_weights,
            group_ids=group_ids,
        )

    cancel_loss.__name__ = cancel_loss.__qualname__ = PREFIX + name
    cancel_loss.__doc__ = f"losses.{name} for verl, with the token-weight wrappers set in config.policy_loss."
    return cancel_loss


def register_all() -> list[str]:
    """Register every loss of `losses.names()` as `cancel_<name>`; returns the names."""
    for name in names():
        register_policy_loss(PREFIX + name)(verl_loss(name))
    return [PREFIX + name for name in names()]


REGISTERED = register_all()
