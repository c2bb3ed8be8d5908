"""verl plugin: our losses in verl's policy-loss registry as `cancel_<name>`, with group ids.

Loaded at `import verl` through the `verl.plugins` entry point declared in pyproject.toml
(docs/verl-internals.md#loading-the-plugin-in-every-process), in every process that imports verl, so the actor workers
see the names. At load it registers every loss of `losses.names()` and installs the group-aware
`ppo_loss` (losses.verl_adapter: the patch of verl and the micro-batch the losses read their group
ids from); each registered loss adds the mechanism metrics of docs/metrics.md (losses.verl_metrics). Of
`losses/`, only this module imports verl when imported (the adapter reaches it inside its functions).

Loud failures: a plugin that fails to import is logged by verl only at DEBUG, so the job calls
`assert_active()` before launching verl (cancelctl/backends/verl/supervisor.py), and a `cancel_*` loss
raises in the worker when the wrapper is not installed in its process.

Aggregation: `losses.aggregation.agg_loss` is verl's `agg_loss` op for op (tests check bitwise
equality of value and gradient on every mode, with and without `global_batch_info`), so the
registered losses aggregate exactly as verl's own.

Options come from `config.policy_loss` (verl's PolicyLossConfig has no such fields; the verl backend
points `policy_loss._target_` at its `CancelPolicyLossConfig`): the DFPO options read by
`losses.dfpo`, and the token-weight wrappers applied here per call when set — `probe`
(positive_only / negative_only), `inject_delta` with `inject_delta_p_low`, `inject_noise_sigma`
with `inject_noise_seed`. TIS is verl's own `algorithm.rollout_correction`
(docs/verl-internals.md#traininginference-mismatch-and-tis).
"""

from __future__ import annotations

import itertools

import torch
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, register_policy_loss

from losses.catalog import needs_groups, verl_loss_name
from losses.wrappers import WrapperOptions, wrap_loss
from losses.config import policy_option
from losses.registry import get, names
from losses.verl_adapter import MICRO_BATCH, install, micro_batch_group_ids, wrapper_installed
from losses.verl_entry_point import PluginNotActive, assert_declared
from losses.verl_metrics import mechanism_metrics
from losses.weights import DeviceGenerators, LossFn

_noise_generators: dict[tuple[int, int], DeviceGenerators] = {}
_loss_calls = itertools.count()


def assert_active(loss_names: list[str] | None = None) -> None:
    """`import verl` must have loaded this plugin through its entry point, installed the group-aware
    ppo_loss and registered every `cancel_*` loss (verl logs a plugin that fails to import only at
    DEBUG, verl/__init__.py:73-76). Raises PluginNotActive with the fix."""
    import verl  # noqa: F401  (runs verl's plugin discovery if nothing has yet)

    assert_declared()
    if not wrapper_installed():
        raise PluginNotActive(
            "verl's ppo_loss is not wrapped by losses.verl_plugin in this process, so the cancel_* losses "
            "would get no group ids; fix: make sure `import losses.verl_plugin` succeeds in the job's "
            "environment (verl logs its import error only at DEBUG)."
        )
    wanted = [verl_loss_name(n) for n in (loss_names or names())]
    missing = [n for n in wanted if n not in POLICY_LOSS_REGISTRY]
    if missing:
        raise PluginNotActive(f"verl's policy-loss registry lacks {missing}; fix: reinstall cancelctl (pip install -e .).")


# ---------------------------------------------------------------- the registered losses


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
    """`loss_fn` wrapped as `config.policy_loss` asks, through the lab's composer (TIS is verl's own)."""
    options = WrapperOptions(
        probe=policy_option(config, "probe", None),
        inject_delta=policy_option(config, "inject_delta", None),
        inject_delta_p_low=policy_option(config, "inject_delta_p_low", 0.1),
        inject_noise_sigma=policy_option(config, "inject_noise_sigma", None),
    )
    generator = _noise_generator(policy_option(config, "inject_noise_seed", 0)) if options.inject_noise_sigma else None
    return wrap_loss(loss_fn, options, generator)


def verl_loss(name: str) -> LossFn:
    """The registry entry for `cancel_<name>`: verl's keyword signature; group ids from the micro-batch."""
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
        micro_batch = MICRO_BATCH.get()
        if micro_batch is None and group_ids is None:
            if not wrapper_installed():
                raise RuntimeError(
                    f"{verl_loss_name(name)}: losses.verl_plugin's group-aware ppo_loss is not installed in this verl "
                    "process (a verl module bound ppo_loss before the plugin loaded?); fix: load the plugin "
                    "through the verl.plugins entry point (pip install -e .) before verl's workers import."
                )
            if needs_groups(name):
                raise ValueError(
                    f"{verl_loss_name(name)} needs the group id (uid) of every row, which it reads from verl's ppo_loss "
                    "micro-batch; it was called outside ppo_loss (the legacy worker path, "
                    "trainer.use_legacy_worker_impl): use verl's default engine workers."
                )
        if micro_batch is not None and group_ids is None:
            if needs_groups(name):
                if not micro_batch.has_uids():
                    raise ValueError(
                        f"{verl_loss_name(name)} needs the group id (uid) of every row, but verl's micro-batch has no "
                        "'uid' field (verl's trainers set data['uid'] per prompt)"
                    )
                group_ids = micro_batch_group_ids(name, micro_batch, response_mask, config)
            elif micro_batch.has_uids():  # only the asym / dispersion metrics use them: no whole-group check
                group_ids = micro_batch.group_ids(response_mask.device)
        loss, metrics = configured_loss(loss_fn, config)(
            old_log_prob=old_log_prob,
            log_prob=log_prob,
            advantages=advantages,
            response_mask=response_mask,
            loss_agg_mode=loss_agg_mode,
            config=config,
            rollout_is_weights=rollout_is_weights,
            group_ids=group_ids,
        )
        if micro_batch is not None:
            every = int(policy_option(config, "mechanism_every", 0))
            energy_now = every > 0 and next(_loss_calls) % every == 0
            metrics.update(
                mechanism_metrics(
                    name, micro_batch, loss, old_log_prob, log_prob, advantages, response_mask, config, group_ids, energy_now
                )
            )
        return loss, metrics

    cancel_loss.__name__ = cancel_loss.__qualname__ = verl_loss_name(name)
    cancel_loss.__doc__ = f"losses.{name} for verl, with the token-weight wrappers set in config.policy_loss."
    return cancel_loss


def register_all() -> list[str]:
    """Register every loss of `losses.names()` as `cancel_<name>`; returns the names."""
    for name in names():
        register_policy_loss(verl_loss_name(name))(verl_loss(name))
    return [verl_loss_name(name) for name in names()]


REGISTERED = register_all()
PATCHED = install()
