"""The mini-batch order a run's update actually uses — one meaning on every backend.

`batching.strategy` names how the step's rollouts are gathered and ordered; the order of the update
mini-batches follows from it and from the loss:
- `query_preserved`: whole groups per mini-batch (and per rank and micro-batch on verl);
- `sign_split`: Â > 0 rows and Â < 0 rows in separate mini-batches [C §4, the negative control];
- `default` and `reward_balanced` (a sampler, not an order): rows scattered over the mini-batches,
  as verl's default trainer does — except for a loss that transforms the weights within whole
  groups (DFPO's s̃ [D eq. 33-36]): scattered, a group's rows would get weights from different
  passes at different θ, the very non-cancellation [C §4] describes. Such a run gets whole groups
  per mini-batch on the lab and on verl alike, and `plan` shows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from losses.catalog import needs_groups

if TYPE_CHECKING:
    from cancelctl.spec.experiment import ExperimentSpec

ORDERS = ("default", "query_preserved", "sign_split")


def minibatch_order(spec: ExperimentSpec) -> str:
    """`default`, `query_preserved` or `sign_split`: how the update's mini-batches are cut."""
    if spec.batching.strategy == "sign_split":
        return "sign_split"
    if spec.batching.strategy == "query_preserved" or needs_groups(spec.algorithm.loss):
        return "query_preserved"
    return "default"


def minibatch_order_note(spec: ExperimentSpec) -> str:
    """The order as `plan` shows it (`whole`: whole groups per mini-batch), with the loss that asks
    for it where the strategy did not."""
    order = minibatch_order(spec)
    if order == "query_preserved" and spec.batching.strategy != "query_preserved":
        return f"whole ({spec.algorithm.loss})"  # the loss needs whole groups
    return {"default": "scattered", "query_preserved": "whole", "sign_split": "by sign"}[order]
