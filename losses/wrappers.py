"""One composer for the token-weight wrappers (docs/losses.md#token-weight-wrappers): the lab and the verl plugin
wrap a registered loss through `wrap_loss`, so both apply the same wrappers in the same order."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from losses.catalog import PROBES
from losses.weights import DeviceGenerators, LossFn, inject_delta, inject_noise, negative_only, positive_only, tis

_PROBE_WRAPPERS = {"positive_only": positive_only, "negative_only": negative_only}
assert tuple(_PROBE_WRAPPERS) == PROBES


@dataclass(frozen=True)
class WrapperOptions:
    """Which wrappers to apply; None = off. Order (innermost first): probe, inject_delta, inject_noise, tis
    (`losses.catalog.WRAPPERS`); all multiply detached per-token weights, so the order is only a label."""

    probe: str | None = None
    inject_delta: float | None = None
    inject_delta_p_low: float = 0.1
    inject_noise_sigma: float | None = None
    tis_cap: float | None = None


def wrap_loss(
    loss_fn: LossFn, options: WrapperOptions, noise_generator: torch.Generator | DeviceGenerators | None = None
) -> LossFn:
    """`loss_fn` wrapped as `options` ask; `noise_generator` feeds inject_noise [H eq. 21]."""
    if options.probe is not None:
        if options.probe not in _PROBE_WRAPPERS:
            raise ValueError(f"policy_loss.probe={options.probe!r}; expected one of {', '.join(PROBES)}")
        loss_fn = _PROBE_WRAPPERS[options.probe](loss_fn)
    if options.inject_delta is not None:
        loss_fn = inject_delta(loss_fn, delta=options.inject_delta, p_low=options.inject_delta_p_low)
    if options.inject_noise_sigma is not None:
        loss_fn = inject_noise(loss_fn, sigma=options.inject_noise_sigma, generator=noise_generator)
    if options.tis_cap is not None:
        loss_fn = tis(loss_fn, cap=options.tis_cap)
    return loss_fn
