"""verl's `ppo_loss` made group-aware, and the micro-batch it hands the `cancel_*` losses.

Group ids (docs/verl-internals.md#group-ids-in-the-loss): verl's `ppo_loss` hands a registered policy loss per-token
tensors only, but the micro-batch it receives still carries `uid`. `install()` (run by
losses.verl_plugin when verl loads it) replaces `verl.workers.utils.losses.ppo_loss` (and the name
in every verl module that already imported it) by `group_aware(ppo_loss)`, which publishes the
micro-batch in a ContextVar (MICRO_BATCH) for the call; verl's own body (entropy, KL, aggregation,
metric reduction) is untouched. The `cancel_*` losses read the rows' group ids (and the rollout
engine's log-probs, for the mismatch metrics) from there, through `MicroBatch`. The one patch of
verl in this project; verl is imported inside the functions that reach it, not here.

Partial groups: whole groups per micro-batch, else a clear error — not a whole-mini-batch pre-pass.
s̃ per micro-batch is exact when each micro-batch holds whole groups, because the optimizer steps
only after all micro-batches of a mini-batch
(docs/verl-internals.md#whole-groups-in-micro-batches). verl's own V1 trainer scatters a group's rows
over mini-batches and ranks; cancelctl's (`trainer.v1.trainer_mode=cancelctl` with
`+trainer.v1.cancelctl.batching=query_preserved`, `actor.shuffle=False`) keeps them whole, and with
micro-batch rows a multiple of G (or `force_group_size=G`, which it sets under dynamic batching) so
does every micro-batch. The error names every one of those settings (`whole_group_fix`). A pre-pass
would need a second patch of verl (`BaseEngine.train_batch`), one extra forward per mini-batch, and
is valid for `stop_grad=True` only (not the stop_grad=False ablation). The check drops V1's
zero-token padding rows first (uid `pad<hex>`, all-zero response mask).
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import sys
from typing import Any

import torch

from losses.catalog import verl_loss_name
from losses.groups import group_index, require_whole_groups

# verl modules that bind `ppo_loss` by name (docs/verl-internals.md#group-ids-in-the-loss): patched when already imported;
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
        raise ValueError(f"{verl_loss_name(name)}: {group_ids.numel()} uids for {response_mask.shape[0]} rows")
    size, size_from = expected_group_size(config)
    require_whole_groups(
        group_index(group_ids),
        size,
        what=f"{verl_loss_name(name)} in verl's ppo_loss (a micro-batch split a group)",
        rows=response_mask.bool().any(-1),
        fix=whole_group_fix(config, size),
        size_from=size_from,
        labels=micro_batch.labels,
    )
    return group_ids
