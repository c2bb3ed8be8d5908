"""Per-step metrics of SPEC's table that need only batch tensors; python floats out.

Every loss returns the same keys on every call (verl averages metrics over DP ranks and needs
equal counts): `actor/pg_clipfrac`, `actor/ppo_kl`, `actor/pg_clipfrac_lower`, plus its own.
"""

from __future__ import annotations

import torch

from losses.advantages import token_advantages
from losses.groups import GroupIndex, group_index, group_mean, group_sum
from losses.ratios import LOG_RATIO_CLAMP
from losses.weights import delta_weights


def pg_metrics(
    clipfrac: torch.Tensor, ppo_kl: torch.Tensor, clipfrac_lower: torch.Tensor, **extra: torch.Tensor
) -> dict[str, float]:
    """The loss metrics as floats, read back with a single device sync."""
    keys = ["actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower", *extra]
    values = torch.stack(
        [t.detach().to(torch.float64).reshape(()) for t in (clipfrac, ppo_kl, clipfrac_lower, *extra.values())]
    )
    return dict(zip(keys, values.tolist(), strict=True))


def mismatch_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """ρ = π_train(θ_old)/π_infer(θ_old) [H eq. 5] over response tokens: std (unbiased), max, and the
    Pearson correlation of the two token probabilities [H Fig. 3]."""
    mask = response_mask.bool()
    train = old_log_prob.detach().to(torch.float64)[mask]
    infer = rollout_log_prob.detach().to(torch.float64)[mask]
    if train.numel() == 0:
        return {"mismatch/rho_std": float("nan"), "mismatch/rho_max": float("nan"), "mismatch/pcc": float("nan")}
    rho = torch.exp(torch.clamp(train - infer, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    p_train, p_infer = train.exp(), infer.exp()
    dt, di = p_train - p_train.mean(), p_infer - p_infer.mean()
    pcc = (dt * di).sum() / ((dt * dt).sum() * (di * di).sum()).sqrt()  # nan when either is constant
    rho_std = rho.std() if rho.numel() > 1 else rho.new_zeros(())
    std, top, corr = torch.stack([rho_std, rho.max(), pcc]).tolist()
    return {"mismatch/rho_std": std, "mismatch/rho_max": top, "mismatch/pcc": corr}


def hacking_j(
    advantages: torch.Tensor,
    old_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    delta: float = 2.0,
    p_low: float = 0.1,
) -> float:
    """J = Σ_{i,t} Â_{i,t} (φ_{i,t} − 1), φ the δ-rule at the monitor δ [H eq. 18, 23].

    `advantages` per row [N] or per token [N, T]."""
    phi = delta_weights(old_log_prob, delta=delta, p_low=p_low).to(torch.float64)
    adv = token_advantages(advantages.detach(), response_mask).to(torch.float64)
    mask = response_mask.bool()
    return float(torch.where(mask, adv * (phi - 1.0), 0.0).sum())


def _index(group_ids: torch.Tensor | GroupIndex) -> GroupIndex:
    return group_ids if isinstance(group_ids, GroupIndex) else group_index(group_ids)


def group_asymmetry(
    weights: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor | GroupIndex
) -> torch.Tensor:
    """Mean over groups of Var_i(w_i Â_i) [D eq. 23] (population variance over the group's rows)."""
    index = _index(group_ids)
    x = weights.detach().to(torch.float64) * advantages.detach().to(torch.float64)
    centred = x - group_mean(x, index)[index.inverse]
    return group_mean(centred * centred, index).mean()


def ortho_residual(
    weights: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor | GroupIndex
) -> torch.Tensor:
    """Mean over groups of |Σ_i Â_i s̃_i| (SPEC `dfpo/ortho_residual`)."""
    index = _index(group_ids)
    x = weights.detach().to(torch.float64) * advantages.detach().to(torch.float64)
    return group_sum(x, index).abs().mean()


def dfpo_asym(weights: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor) -> float:
    """`dfpo/asym` for 1-D per-row weights actually used and advantages."""
    return float(group_asymmetry(weights, advantages, group_ids))


def dfpo_ortho_residual(weights: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor) -> float:
    """`dfpo/ortho_residual` for 1-D per-row transformed weights s̃ and advantages."""
    return float(ortho_residual(weights, advantages, group_ids))
