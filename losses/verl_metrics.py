"""The mechanism metrics (docs/metrics.md) of one `cancel_*` loss call inside verl's actor update.

One implementation in `losses.metrics` (the lab computes the same keys); here they are taken over
verl's micro-batch (losses.verl_adapter.MicroBatch) and added to the loss's metrics dict by
losses.verl_plugin, which verl averages over micro-batches and ranks and logs as `actor/<key>` (the
job's metrics forwarder maps them back to those keys):

- `hacking/J`: per micro-batch sum scaled to the mini-batch, i.e. × global rows / micro-batch rows
  (the lab's is over the step's batch, equal with one mini-batch per step);
- `mismatch/*` when the micro-batch has `rollout_log_probs` (verl stores them with
  `rollout.calculate_log_probs=True`; per micro-batch, so `rho_max` is a mean of maxima);
- `dfpo/asym` and `dfpo/weight_dispersion` of the weights actually used, over the micro-batch's
  groups (dfpo reports the s̃ it used itself);
- on every `mechanism_every`-th loss call of a worker (0 = off): `cancel/energy_b{k}` (output-layer
  proxy, `losses.metrics.output_energy_proxy`) and `cancel/flip_pos|neg` (log-prob at this forward
  vs θ_old: a row's movement since the step began, 0 on a step's first mini-batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from losses.catalog import needs_groups
from losses.config import policy_option
from losses.groups import group_index
from losses.metrics import (
    MONITOR_P_LOW,
    bucket_energy,
    frequency_buckets,
    group_asymmetry,
    hacking_j,
    mismatch_metrics,
    output_energy_proxy,
    token_flips,
    weight_dispersion,
)
from losses.registry import row_weights

if TYPE_CHECKING:
    from losses.verl_adapter import MicroBatch

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
    """The mechanism keys for this micro-batch (their scope: the module docstring)."""
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
