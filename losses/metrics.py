"""Per-step metrics of docs/metrics.md that need only batch tensors: one implementation, used by the
CPU lab (cancelctl/backends/lab) and inside verl (losses/verl_plugin.py).

Every loss returns the same keys on every call (verl averages metrics over DP ranks and needs
equal counts): `actor/pg_clipfrac`, `actor/ppo_kl`, `actor/pg_clipfrac_lower`, plus its own.

The gradient-energy metric [D eq. 24] takes per-token squared gradient norms of the output layer:
the lab computes them exactly (`‖g_t‖²‖h_t‖²` from autograd); inside verl's loss only the chosen
token's log-prob is visible, so `output_energy_proxy` gives [C eq. 6-7] from what is there.
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


MONITOR_P_LOW = 0.1  # π_low of the hacking/J monitor [H eq. 23]


def hacking_j(
    advantages: torch.Tensor,
    old_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    delta: float = 2.0,
    p_low: float = MONITOR_P_LOW,
) -> float:
    """J = Σ_{i,t} Â_{i,t} (φ_{i,t} − 1), φ the δ-rule at the monitor δ [H eq. 18, 23].

    `advantages` per row [N] or per token [N, T]."""
    phi = delta_weights(old_log_prob, delta=delta, p_low=p_low).to(torch.float64)
    adv = token_advantages(advantages.detach(), response_mask).to(torch.float64)
    mask = response_mask.bool()
    return float(torch.where(mask, adv * (phi - 1.0), 0.0).sum())


def _index(group_ids: torch.Tensor | GroupIndex) -> GroupIndex:
    return group_ids if isinstance(group_ids, GroupIndex) else group_index(group_ids)


def live_groups(advantages: torch.Tensor, index: GroupIndex) -> torch.Tensor:
    """[K] bool: the groups with at least one non-zero Â. A group whose Â are all 0 carries no gradient
    (and min_replace leaves its weights as they are), so the group means of docs/metrics.md#dfpo leave it out."""
    return group_sum((advantages.detach() != 0).to(torch.float64), index) > 0


def _mean_over_live(per_group: torch.Tensor, advantages: torch.Tensor, index: GroupIndex) -> torch.Tensor:
    live = live_groups(advantages, index)
    return per_group[live].mean() if bool(live.any()) else per_group.new_zeros(())


def group_asymmetry(
    weights: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor | GroupIndex
) -> torch.Tensor:
    """Mean over the live groups (`live_groups`) of Var_i(w_i Â_i) [D eq. 23] (population variance
    over the group's rows; `dfpo/asym`, docs/metrics.md#dfpo)."""
    index = _index(group_ids)
    x = weights.detach().to(torch.float64) * advantages.detach().to(torch.float64)
    centred = x - group_mean(x, index)[index.inverse]
    return _mean_over_live(group_mean(centred * centred, index), advantages, index)


def ortho_residual(
    weights: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor | GroupIndex
) -> torch.Tensor:
    """Mean over groups of |Σ_i Â_i s̃_i| (`dfpo/ortho_residual`, docs/metrics.md#dfpo)."""
    index = _index(group_ids)
    x = weights.detach().to(torch.float64) * advantages.detach().to(torch.float64)
    return group_sum(x, index).abs().mean()


def weight_dispersion(
    weights: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor | GroupIndex
) -> torch.Tensor:
    """Mean over the live groups (`live_groups`) of std_i(w_i) / |mean_i(w_i)| (population std; docs/metrics.md#dfpo
    `dfpo/weight_dispersion`): exactly 0 under min_replace, which gives each live group one weight.

    Beside `group_asymmetry`: with w constant in a group, Var_i(w Â_i) = w²·Var(Â), so [D eq. 23] as
    printed barely separates min-replace from GSPO; the paper's argument is about the dispersion of w.
    A group whose weights average 0 (orth_proj can give that) contributes 0."""
    index = _index(group_ids)
    w = weights.detach().to(torch.float64)
    mean = group_mean(w, index)
    centred = w - mean[index.inverse]
    std = group_mean(centred * centred, index).sqrt()
    ratio = torch.where(mean != 0, std / torch.where(mean != 0, mean.abs(), 1.0), 0.0)
    return _mean_over_live(ratio, advantages, index)


def frequency_buckets(
    responses: torch.Tensor, response_mask: torch.Tensor, vocab_size: int, n_buckets: int = 4
) -> torch.Tensor:
    """[N, T] bucket 0..n-1 of every response token by its type's frequency in this batch (n-1 = most frequent).

    Types are ranked by count (rarest first) and a type goes to the n-quantile of the batch's token
    occurrences in which its own occurrences end: buckets split the occurrences ~evenly, a type is
    never cut, and the most frequent type is always in the last bucket.
    """
    mask = response_mask.bool()
    responses = responses.long()
    counts = torch.bincount(responses[mask], minlength=vocab_size)
    order = torch.argsort(counts, stable=True)
    total = max(int(counts.sum()), 1)
    ends = counts[order].cumsum(0)  # occurrences up to and including each type
    quantile = (n_buckets * ends + total - 1) // total - 1  # ceil(n·end/total) − 1, exact
    bucket_of_type = torch.empty(counts.numel(), dtype=torch.long, device=counts.device)
    bucket_of_type[order] = quantile.clamp(0, n_buckets - 1)
    return bucket_of_type[responses.clamp(0, counts.numel() - 1)]


def bucket_energy(
    energy: torch.Tensor, buckets: torch.Tensor, response_mask: torch.Tensor, n_buckets: int = 4
) -> dict[str, float]:
    """`cancel/energy_b{k}`: share of per-token squared gradient norm per frequency bucket [D eq. 24]."""
    mask = response_mask.bool()
    per_bucket = torch.zeros(n_buckets, dtype=torch.float64, device=energy.device).index_add(
        0, buckets[mask], energy[mask].double()
    )
    total = per_bucket.sum()
    shares = (per_bucket / total if total > 0 else per_bucket).tolist()
    return {f"cancel/energy_b{k}": shares[k] for k in range(n_buckets)}


def output_energy_proxy(
    coef: torch.Tensor, log_prob: torch.Tensor, sum_p_squared: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-token ‖∂loss/∂W_out‖² = coef_t²·‖e_y − p_t‖²·‖h_t‖² [C eq. 6-7], coef_t = ∂loss/∂log π_t.

    ‖e_y − p‖² = 1 − 2p_y + Σ_j p_j²; Σp² is verl's `sum_pi_squared` when the engine computed it,
    else its lower bound p_y² (exact when the mass is on y). ‖h_t‖² (final-norm output) is not visible
    to a loss and is taken constant, which a share per bucket does not see."""
    p_y = log_prob.detach().to(torch.float64).exp()
    sum_p2 = p_y * p_y if sum_p_squared is None else sum_p_squared.detach().to(torch.float64)
    return coef.detach().to(torch.float64).pow(2) * (1.0 - 2.0 * p_y + sum_p2).clamp(min=0.0)


def token_flips(
    old_log_prob: torch.Tensor, new_log_prob: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """`cancel/flip_pos` / `cancel/flip_neg`: share of tokens in Â>0 (Â<0) rows whose log-prob fell
    (rose) between the two log-probs [C App. C]; 0 when the batch has no such row. `advantages` per row."""
    shift = new_log_prob.detach() - old_log_prob.detach()
    mask = response_mask.bool()
    pos, neg = mask & (advantages > 0).unsqueeze(-1), mask & (advantages < 0).unsqueeze(-1)
    counts = torch.stack([pos.sum(), ((shift < 0) & pos).sum(), neg.sum(), ((shift > 0) & neg).sum()]).tolist()
    n_pos, flip_pos, n_neg, flip_neg = counts
    return {
        "cancel/flip_pos": flip_pos / n_pos if n_pos else 0.0,
        "cancel/flip_neg": flip_neg / n_neg if n_neg else 0.0,
    }


def boost_share(
    old_log_prob: torch.Tensor, new_log_prob: torch.Tensor, response_mask: torch.Tensor, role_mask: torch.Tensor
) -> float:
    """Share of one update's probability boost that falls on the tokens of `role_mask` [C §3.2]: the
    boost is Σ max(log π_new − log π_old, 0) over the response tokens (the positive part of Δ log π on
    the sampled tokens), the share its part on role tokens ("formatting and template tokens dominate
    the boosted directions" under the positive-only update). 0 when no token rose."""
    rise = (new_log_prob.detach() - old_log_prob.detach()).to(torch.float64).clamp(min=0) * response_mask
    total, on_role = torch.stack([rise.sum(), (rise * role_mask).sum()]).tolist()
    return on_role / total if total > 0 else 0.0


def dfpo_weight_dispersion(weights: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor) -> float:
    """`dfpo/weight_dispersion` for 1-D per-row weights actually used."""
    return float(weight_dispersion(weights, advantages, group_ids))


def dfpo_asym(weights: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor) -> float:
    """`dfpo/asym` for 1-D per-row weights actually used and advantages."""
    return float(group_asymmetry(weights, advantages, group_ids))


def dfpo_ortho_residual(weights: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor) -> float:
    """`dfpo/ortho_residual` for 1-D per-row transformed weights s̃ and advantages."""
    return float(ortho_residual(weights, advantages, group_ids))
