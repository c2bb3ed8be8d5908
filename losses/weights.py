"""Detached per-token weights and the wrappers that fold them into any loss (docs/losses.md#token-weight-wrappers).

A wrapper `w(loss_fn, **opts)` returns a loss with the same keyword signature plus
`rollout_log_prob=` (needed by `tis`); it multiplies its weight into `rollout_is_weights`, which
every loss applies per token before aggregation. Wrappers nest:
`tis(inject_noise(get("grpo"), sigma=0.2, generator=g), cap=2.0)`. The inner loss only receives
the keywords it accepts, so verl's own losses can be wrapped too.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from losses.advantages import token_advantages
from losses.ratios import LOG_RATIO_CLAMP, compute_float

LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]


def tis_weights(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, cap: float = 2.0) -> torch.Tensor:
    """Truncated importance sampling w = min(ρ, C), ρ = π_train(θ_old)/π_infer(θ_old) [H eq. 5].

    `token_ratio` then min(·, C), computed in place on one buffer (a wrapper's cost is its passes)."""
    log_rho = compute_float(old_log_prob.detach()) - compute_float(rollout_log_prob.detach())
    return log_rho.clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp_().clamp_(max=cap)


def delta_weights(old_log_prob: torch.Tensor, delta: float, p_low: float = 0.1) -> torch.Tensor:
    """φ = δ on tokens with π_train(o | θ_old) < π_low, else 1 [H eq. 17-18]."""
    probs = torch.exp(compute_float(old_log_prob.detach()))  # fp64 stays fp64: the boundary is exact
    return torch.where(probs < p_low, float(delta), 1.0).to(probs.dtype)


def noise_weights(
    shape: torch.Size | tuple[int, ...],
    sigma: float,
    generator: torch.Generator,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """ξ ~ N(1, σ²) i.i.d. per token [H eq. 21], drawn on the generator's device (then moved to
    `device`): the same generator state gives the same weights wherever they are used."""
    noise = torch.empty(tuple(shape), device=generator.device, dtype=torch.float32)
    noise.normal_(1.0, sigma, generator=generator)  # one pass: N(1, σ²) directly
    return noise.to(device if device is not None else generator.device)


class DeviceGenerators:
    """One generator per device, all seeded with `seed`, made on first use: noise is drawn where the
    tokens live. A CPU draw copied to the GPU costs 6-24× the whole loss on an H100 (measured with
    `bench losses --device cuda`), so a seed replays the same weights per device type, not across them."""

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self._generators: dict[torch.device, torch.Generator] = {}

    def __call__(self, device: torch.device | str) -> torch.Generator:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device not in self._generators:
            self._generators[device] = torch.Generator(device=device).manual_seed(self.seed)
        return self._generators[device]


def sign_weights(advantages: torch.Tensor, keep: str) -> torch.Tensor:
    """Probes [C §3.2]: keep="positive" zeroes rows with Â ≤ 0, keep="negative" rows with Â ≥ 0.

    fp32 1.0 / 0.0, the values of `(Â > 0).float()`, written by the comparison itself in one pass (no bool
    tensor converted in a second one; tests/losses/test_weights.py checks the bits)."""
    if keep not in ("positive", "negative"):
        raise ValueError(f"keep must be 'positive' or 'negative', got {keep!r}")
    advantages = advantages.detach()
    out = torch.empty(advantages.shape, dtype=torch.float32, device=advantages.device)
    return torch.gt(advantages, 0, out=out) if keep == "positive" else torch.lt(advantages, 0, out=out)


def _accepted_keywords(loss_fn: LossFn) -> set[str] | None:
    """Keywords `loss_fn` takes; None when it takes **kwargs (anything goes)."""
    params = inspect.signature(loss_fn, follow_wrapped=False).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def _weighting(loss_fn: LossFn, label: str, weight: Callable[..., torch.Tensor]) -> LossFn:
    accepted = _accepted_keywords(loss_fn)

    def weighted(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str | None = None,
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
        group_ids: torch.Tensor | None = None,
        rollout_log_prob: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        w = weight(
            old_log_prob=old_log_prob,
            advantages=advantages,
            response_mask=response_mask,
            rollout_log_prob=rollout_log_prob,
        ).detach()
        w = w.to(response_mask.device)
        kwargs: dict[str, Any] = dict(
            old_log_prob=old_log_prob,
            log_prob=log_prob,
            advantages=advantages,
            response_mask=response_mask,
            config=config,
            rollout_is_weights=w if rollout_is_weights is None else rollout_is_weights * w,
        )
        optional = {"loss_agg_mode": loss_agg_mode, "group_ids": group_ids, "rollout_log_prob": rollout_log_prob}
        for key, value in optional.items():  # None: let the inner loss use its own default
            if value is not None and (accepted is None or key in accepted):
                kwargs[key] = value
        return loss_fn(**kwargs)

    inner = getattr(loss_fn, "__name__", type(loss_fn).__name__)
    weighted.__name__ = weighted.__qualname__ = f"{label}({inner})"
    weighted.__doc__ = f"{label} weights on top of {inner}."
    return weighted


def tis(loss_fn: LossFn, cap: float = 2.0) -> LossFn:
    """w = min(ρ, cap); the wrapped loss needs `rollout_log_prob=`. On verl the same correction is
    `algorithm.rollout_correction.rollout_is=token`, `rollout_is_threshold=cap`."""

    def weight(old_log_prob, rollout_log_prob, **_):
        if rollout_log_prob is None:
            raise ValueError("tis needs rollout_log_prob= (the inference engine's log-probs at θ_old)")
        return tis_weights(old_log_prob, rollout_log_prob, cap)

    return _weighting(loss_fn, f"tis[cap={cap}]", weight)


def inject_delta(loss_fn: LossFn, delta: float, p_low: float = 0.1) -> LossFn:
    """Weight δ on tokens with π_train(o|θ_old) < p_low [H eq. 17-18]; paper grid δ ∈ {0, 1.2, 2, 3}."""
    return _weighting(
        loss_fn,
        f"inject_delta[delta={delta},p_low={p_low}]",
        lambda old_log_prob, **_: delta_weights(old_log_prob, delta, p_low),
    )


def inject_noise(
    loss_fn: LossFn,
    sigma: float = 0.2,
    generator: torch.Generator | DeviceGenerators | None = None,
    seed: int = 0,
) -> LossFn:
    """Weight ξ ~ N(1, σ²) per token, fresh on every call [H eq. 21]. Drawn from `generator` when it
    is a torch.Generator (on its device), else on the tokens' device from `DeviceGenerators(seed)`:
    the same seed replays the same weights."""
    source = generator if generator is not None else DeviceGenerators(seed)

    def weight(response_mask, **_):
        gen = source if isinstance(source, torch.Generator) else source(response_mask.device)
        return noise_weights(response_mask.shape, sigma, gen)

    return _weighting(loss_fn, f"inject_noise[sigma={sigma}]", weight)


def positive_only(loss_fn: LossFn) -> LossFn:
    """Probe [C §3.2]: rows with Â ≤ 0 get weight 0."""
    return _weighting(
        loss_fn,
        "positive_only",
        lambda advantages, response_mask, **_: sign_weights(token_advantages(advantages, response_mask), "positive"),
    )


def negative_only(loss_fn: LossFn) -> LossFn:
    """Probe [C §3.2]: rows with Â ≥ 0 get weight 0."""
    return _weighting(
        loss_fn,
        "negative_only",
        lambda advantages, response_mask, **_: sign_weights(token_advantages(advantages, response_mask), "negative"),
    )
