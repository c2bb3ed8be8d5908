"""verl plugin: our losses in verl's policy-loss registry as `cancel_<name>`, with group ids.

Loaded at `import verl` through the `verl.plugins` entry point declared in pyproject.toml
(../shared/notes/verl-0.9.1.md §3), in every process that imports verl, so the actor workers
see the names. The only module of `losses/` that imports verl.

Group ids (notes/verl-inside.md §1): verl's `ppo_loss` hands a registered policy loss per-token
tensors only, but the micro-batch it receives still carries `uid`. At load this module replaces
`verl.workers.utils.losses.ppo_loss` (and the name in every verl module that already imported it)
by `group_aware(ppo_loss)`, which publishes the micro-batch in a ContextVar for the call; verl's own
body (entropy, KL, aggregation, metric reduction) is untouched. The `cancel_*` losses read the rows'
group ids (and the rollout engine's log-probs, for the mismatch metrics) from there.

Partial groups: whole groups per micro-batch, else a clear error — not a whole-mini-batch pre-pass.
s̃ per micro-batch is exact when each micro-batch holds whole groups, because the optimizer steps
only after all micro-batches of a mini-batch (notes §2). verl's own V1 trainer scatters a group's rows
over mini-batches and ranks; cancelctl's (`trainer.v1.trainer_mode=cancelctl` with
`+trainer.v1.cancelctl.batching=query_preserved`, `actor.shuffle=False`) keeps them whole, and with
micro-batch rows a multiple of G (or `force_group_size=G`, which it sets under dynamic batching) so
does every micro-batch. The error names every one of those settings (`whole_group_fix`). A pre-pass
would need a second patch of verl (`BaseEngine.train_batch`), one extra forward per mini-batch, and
is valid for `stop_grad=True` only (not the stop_grad=False ablation). The check drops V1's
zero-token padding rows first (uid `pad<hex>`, all-zero response mask).

Loud failures: a plugin that fails to import is logged by verl only at DEBUG, so the job calls
`assert_active()` before launching verl (cancelctl/backends/verl/entry.py), and a `cancel_*` loss
raises in the worker when the wrapper is not installed in its process.

Aggregation: `losses.aggregation.agg_loss` is verl's `agg_loss` op for op (tests check bitwise
equality of value and gradient on every mode, with and without `global_batch_info`), so the
registered losses aggregate exactly as verl's own.

Options come from `config.policy_loss` (verl's PolicyLossConfig has no such fields; the verl backend
points `policy_loss._target_` at its `CancelPolicyLossConfig`, notes §3): the DFPO options read by
`losses.dfpo`, and the token-weight wrappers applied here per call when set — `probe`
(positive_only / negative_only), `inject_delta` with `inject_delta_p_low`, `inject_noise_sigma`
with `inject_noise_seed`. TIS is verl's own `algorithm.rollout_correction` (SPEC).

Mechanism metrics (SPEC table, one implementation in `losses.metrics`) are added to each loss's
metrics dict, which verl averages over micro-batches and ranks and logs as `actor/<key>` (the job's
metrics forwarder maps them back to the SPEC keys): `hacking/J` (per micro-batch sum scaled to the
mini-batch, i.e. × global rows / micro-batch rows; the lab's is over the step's batch, equal with
one mini-batch per step), `mismatch/*` when the micro-batch has `rollout_log_probs` (verl stores them
with `rollout.calculate_log_probs=True`; per micro-batch, so `rho_max` is a mean of maxima), `dfpo/asym` and `dfpo/weight_dispersion` of the weights actually used (over
the micro-batch's groups), and — on every `mechanism_every`-th loss call of a worker, 0 = off —
`cancel/energy_b{k}` (output-layer proxy, `losses.metrics.output_energy_proxy`) and
`cancel/flip_pos|neg` (log-prob at this forward vs θ_old: a row's movement since the step began,
0 on a step's first mini-batch).
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import itertools
import sys
from typing import Any

import torch
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, register_policy_loss

from losses.config import policy_option
from losses.groups import group_index, require_whole_groups
from losses.metrics import (
    bucket_energy,
    frequency_buckets,
    group_asymmetry,
    hacking_j,
    mismatch_metrics,
    output_energy_proxy,
    token_flips,
    weight_dispersion,
)
from losses.catalog import needs_groups
from losses.compose import WrapperOptions, wrap_loss
from losses.registry import get, names, row_weights
from losses.verl_entry_point import PluginNotActive, assert_declared
from losses.weights import DeviceGenerators, LossFn

PREFIX = "cancel_"
MONITOR_P_LOW = 0.1  # π_low of the hacking/J monitor [H eq. 23]
# verl modules that bind `ppo_loss` by name (notes/verl-inside.md §1): patched when already imported;
# imported later, they bind the wrapper from verl.workers.utils.losses.
PPO_LOSS_HOME = "verl.workers.utils.losses"
# What keeps every group whole in verl's micro-batches, as Hydra overrides (cancelctl's V1 trainer is
# registered as trainer mode "cancelctl" by the `cancelctl_trainer` entry point; render writes the same,
# cancelctl/backends/verl/layout.py, a test keeps the names in step).
WHOLE_GROUP_OVERRIDES = (
    "trainer.v1.trainer_mode=cancelctl",
    "+trainer.v1.cancelctl.batching=query_preserved",
    "actor_rollout_ref.actor.shuffle=False",
)

_noise_generators: dict[tuple[int, int], DeviceGenerators] = {}
_loss_calls = itertools.count()


# ---------------------------------------------------------------- the micro-batch, per ppo_loss call


class MicroBatch:
    """The micro-batch verl's ppo_loss is computing on, as the `cancel_*` losses need it."""

    def __init__(self, data: Any, model_output: Any):
        self.data = data
        self.model_output = model_output
        self._group_ids: torch.Tensor | None = None
        self.labels: list = []

    def has_uids(self) -> bool:
        return "uid" in self.data.keys()

    def uids(self) -> list:
        return list(self.data["uid"])

    def group_ids(self, device: torch.device) -> torch.Tensor:
        """[N] long: row i's group, numbered 0, 1, ... by first appearance of its uid (`self.labels`)."""
        if self._group_ids is None:
            numbers: dict = {}
            self._group_ids = torch.tensor([numbers.setdefault(u, len(numbers)) for u in self.uids()], device=device)
            self.labels = list(numbers)
        return self._group_ids

    def padded(self, key: str) -> torch.Tensor | None:
        """A per-token field as [N, T] (verl keeps some nested); None when absent."""
        if key not in self.data.keys():
            return None
        value = self.data.get(key)
        if getattr(value, "is_nested", False):
            value = self.data.select(key).to_padded_tensor()[key]
        return value

    def output(self, key: str) -> torch.Tensor | None:
        value = self.model_output.get(key, None) if hasattr(self.model_output, "get") else None
        if value is not None and getattr(value, "is_nested", False):
            from verl.workers.utils.padding import no_padding_2_padding

            value = no_padding_2_padding(value, self.data)
        return value


MICRO_BATCH: contextvars.ContextVar[MicroBatch | None] = contextvars.ContextVar("cancelctl_micro_batch", default=None)


def group_aware(ppo_loss):
    """verl's `ppo_loss`, publishing its micro-batch in MICRO_BATCH for the call."""

    @functools.wraps(ppo_loss)
    def cancelctl_ppo_loss(config, model_output, data, dp_group=None):
        token = MICRO_BATCH.set(MicroBatch(data, model_output))
        try:
            return ppo_loss(config=config, model_output=model_output, data=data, dp_group=dp_group)
        finally:
            MICRO_BATCH.reset(token)

    cancelctl_ppo_loss.__cancelctl_group_aware__ = True
    return cancelctl_ppo_loss


def _is_wrapper(fn) -> bool:
    return getattr(fn, "__cancelctl_group_aware__", False)


def install() -> list[str]:
    """Wrap verl's ppo_loss where it lives and in every loaded verl module bound to it; returns those modules."""
    home = importlib.import_module(PPO_LOSS_HOME)
    original = home.ppo_loss
    if _is_wrapper(original):
        original = original.__wrapped__
    wrapper = group_aware(original)
    patched = []
    for name, module in list(sys.modules.items()):
        if (name == PPO_LOSS_HOME or name.startswith("verl.")) and getattr(module, "ppo_loss", None) in (
            original,
            home.ppo_loss,
        ):
            module.ppo_loss = wrapper
            patched.append(name)
    return patched


def wrapper_installed() -> bool:
    home = sys.modules.get(PPO_LOSS_HOME)
    if home is None or not _is_wrapper(home.ppo_loss):
        return False
    # modules that bound ppo_loss by name before the plugin ran would call verl's unwrapped one
    return not any(
        name.startswith("verl.") and getattr(m, "ppo_loss", None) is home.ppo_loss.__wrapped__
        for name, m in list(sys.modules.items())
    )


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
    wanted = [PREFIX + n for n in (loss_names or names())]
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


def whole_group_fix(config, group_size: int | None) -> str:
    """Every setting a whole-group layout needs, as overrides to paste onto verl's command line: cancelctl's
    V1 trainer orders each update batch so that every mini-batch, rank share and micro-batch holds whole
    groups (verl's own trainer scatters a group's rows, whatever the micro-batch size)."""
    G = f"G={group_size}" if group_size else "G"
    micro = getattr(config, "ppo_micro_batch_size_per_gpu", None)
    if getattr(config, "use_dynamic_bsz", False) or not isinstance(micro, int):
        micro_line = (f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu >= {G} x (prompt + response) tokens "
                      "(under use_dynamic_bsz that trainer keeps a group's rows in one micro-batch)")
    else:
        whole = group_size * -(-micro // group_size) if group_size else "<a multiple of G>"
        micro_line = f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={whole} (rows, a multiple of {G})"
    return (f"run verl with {' '.join(WHOLE_GROUP_OVERRIDES)} and {micro_line}; with several data-parallel ranks, "
            "actor_rollout_ref.actor.ppo_mini_batch_size (prompts) a multiple of their number")


def micro_batch_group_ids(name: str, micro_batch: MicroBatch, response_mask: torch.Tensor, config) -> torch.Tensor:
    """Row group ids of verl's micro-batch, refusing a partial group with the fix (zero-token rows ignored)."""
    from losses.dfpo import expected_group_size

    group_ids = micro_batch.group_ids(response_mask.device)
    if group_ids.numel() != response_mask.shape[0]:
        raise ValueError(f"{PREFIX}{name}: {group_ids.numel()} uids for {response_mask.shape[0]} rows")
    size, size_from = expected_group_size(config)
    require_whole_groups(
        group_index(group_ids),
        size,
        what=f"{PREFIX}{name} in verl's ppo_loss (a micro-batch split a group)",
        rows=response_mask.bool().any(-1),
        fix=whole_group_fix(config, size),
        size_from=size_from,
        labels=micro_batch.labels,
    )
    return group_ids


def mechanism_metrics(
    name: str,
    micro_batch: MicroBatch,
    loss: torch.Tensor,
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    config,
    group_ids: torch.Tensor | None,
    energy_now: bool,
) -> dict[str, float]:
    """The SPEC mechanism keys for this micro-batch (see the module docstring for their scope)."""
    mask = response_mask.bool()
    rows = mask.any(-1)
    row_adv = torch.where(mask, advantages, 0.0).sum(-1) / mask.sum(-1).clamp(min=1)
    out: dict[str, float] = {}
    info = getattr(config, "global_batch_info", None) or {}
    scale = (info.get("global_batch_size") or response_mask.shape[0]) / max(response_mask.shape[0], 1)
    j = hacking_j(advantages, old_log_prob, response_mask, policy_option(config, "monitor_delta", 2.0), MONITOR_P_LOW)
    out["hacking/J"] = j * scale
    rollout_log_prob = micro_batch.padded("rollout_log_probs")
    if rollout_log_prob is not None:
        out.update(mismatch_metrics(old_log_prob, rollout_log_prob.to(old_log_prob.device), response_mask))
    if not needs_groups(name) and group_ids is not None:  # dfpo reports the s̃ it used itself
        w = row_weights(name)(log_prob.detach(), old_log_prob.detach(), row_adv, response_mask, group_ids, config)
        index = group_index(group_ids[rows])
        out["dfpo/asym"] = float(group_asymmetry(w[rows], row_adv[rows], index))
        out["dfpo/weight_dispersion"] = float(weight_dispersion(w[rows], row_adv[rows], index))
    if energy_now:
        n_buckets = int(policy_option(config, "energy_buckets", 4))
        (coef,) = torch.autograd.grad(loss, log_prob, retain_graph=True)  # ∂loss/∂log π_t, wrappers included
        energy = output_energy_proxy(coef, log_prob, micro_batch.output("sum_pi_squared"))
        responses = micro_batch.padded("responses")
        if responses is None:
            raise ValueError("cancel/energy_b*: verl's micro-batch has no 'responses' (token ids) to bucket")
        responses = responses.to(mask.device)
        buckets = frequency_buckets(responses, mask, int(responses.max()) + 1, n_buckets)
        out.update(bucket_energy(energy, buckets, mask, n_buckets))
        out.update(token_flips(old_log_prob, log_prob, row_adv, response_mask))
    return out


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
                    f"{PREFIX}{name}: losses.verl_plugin's group-aware ppo_loss is not installed in this verl "
                    "process (a verl module bound ppo_loss before the plugin loaded?); fix: load the plugin "
                    "through the verl.plugins entry point (pip install -e .) before verl's workers import."
                )
            if needs_groups(name):
                raise ValueError(
                    f"{PREFIX}{name} needs the group id (uid) of every row, which it reads from verl's ppo_loss "
                    "micro-batch; it was called outside ppo_loss (the legacy worker path, "
                    "trainer.use_legacy_worker_impl): use verl's default engine workers."
                )
        if micro_batch is not None and group_ids is None:
            if needs_groups(name):
                if not micro_batch.has_uids():
                    raise ValueError(
                        f"{PREFIX}{name} needs the group id (uid) of every row, but verl's micro-batch has no "
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

    cancel_loss.__name__ = cancel_loss.__qualname__ = PREFIX + name
    cancel_loss.__doc__ = f"losses.{name} for verl, with the token-weight wrappers set in config.policy_loss."
    return cancel_loss


def register_all() -> list[str]:
    """Register every loss of `losses.names()` as `cancel_<name>`; returns the names."""
    for name in names():
        register_policy_loss(PREFIX + name)(verl_loss(name))
    return [PREFIX + name for name in names()]


REGISTERED = register_all()
PATCHED = install()
