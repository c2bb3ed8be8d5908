"""DFPO group transformations s̃ = T(s̄, Â) of the post-clip sequence weights [D App. B.4].

Each acts inside every group at once (scatter/sort over the dense group index, no loop over
groups), in float64: the vectors have one entry per row, so the cost is nil and the orthogonality
residual |Σ_g Â s̃| stays ~1e-15 instead of fp32's ~1e-7. Groups with ‖Â‖ = 0 are returned
unchanged (their gradient is zero anyway; docs/losses.md#group-transformations). All four are
differentiable in s̄, which the `stop_grad=False` ablation uses.
"""

from __future__ import annotations

import torch

from losses.config import TRANSFORMS
from losses.groups import GroupIndex, group_index, group_min, group_sum


def min_replace(weights: torch.Tensor, advantages: torch.Tensor, index: GroupIndex) -> torch.Tensor:
    """s̃_i = min_j s̄_j within the group [D eq. 50]."""
    return group_min(weights, index)[index.inverse]


def orth_proj(weights: torch.Tensor, advantages: torch.Tensor, index: GroupIndex) -> torch.Tensor:
    """s̃ = s̄ − (Âᵀs̄ / ‖Â‖²) Â [D eq. 18]; may go negative."""
    dot = group_sum(advantages * weights, index)
    norm2 = group_sum(advantages * advantages, index)
    coef = dot / torch.where(norm2 > 0, norm2, 1.0)
    return weights - coef[index.inverse] * advantages


def pos_orth_qp(weights: torch.Tensor, advantages: torch.Tensor, index: GroupIndex) -> torch.Tensor:
    """argmin ½‖v − s̄‖² s.t. Âᵀv = 0, v ≥ 0 [D eq. 51], solved exactly.

    KKT: v = max(s̄ − λÂ, 0) with f(λ) = Σ Â_i max(s̄_i − λÂ_i, 0) continuous, piecewise linear and
    non-increasing (slope −Σ_active Â²). Its breakpoints are b_i = s̄_i/Â_i; row i is active for
    λ < b_i when Â_i > 0 and for λ > b_i when Â_i < 0. Sorting rows by (group, b) lets segmented
    cumulative sums give, for every breakpoint, the active sums S = Σ Â s̄ and Q = Σ Â² of the segment
    just left of it, hence f(b) = S − bQ; the first breakpoint with f ≤ 0 bounds the segment holding
    the root λ = S/Q. No breakpoint with f ≤ 0: the root is right of the last one, where only the
    Â < 0 rows are active.
    """
    inverse, n = index.inverse, weights.numel()
    positive, negative = advantages > 0, advantages < 0
    has_breakpoint = positive | negative
    breakpoint = torch.where(has_breakpoint, weights / torch.where(has_breakpoint, advantages, 1.0), float("inf"))

    by_value = torch.argsort(breakpoint, stable=True)
    order = by_value[torch.argsort(inverse[by_value], stable=True)]  # by group, then breakpoint
    group, b = inverse[order], breakpoint[order]
    aw, aa = (advantages * weights)[order], (advantages * advantages)[order]
    pos, neg = positive[order], negative[order]
    parts = torch.stack(
        [torch.where(pos, aw, 0.0), torch.where(pos, aa, 0.0), torch.where(neg, aw, 0.0), torch.where(neg, aa, 0.0)]
    )
    before = parts.cumsum(dim=1) - parts  # exclusive prefix sums over the whole sorted batch
    group_start = (index.counts.cumsum(0) - index.counts)[group]
    before = before - before[:, group_start]  # ... restarted at each group
    group_totals = parts.new_zeros(4, index.num_groups).index_add(1, group, parts)
    totals = group_totals[:, group]
    s_left = totals[0] - before[0] + before[2]  # active P rows come later, active N rows earlier
    q_left = totals[1] - before[1] + before[3]

    finite = torch.isfinite(b)
    f_at_b = torch.where(finite, s_left - torch.where(finite, b, 0.0) * q_left, 1.0)
    position = torch.arange(n, device=weights.device)
    first_hit = torch.full((index.num_groups,), n, device=weights.device).scatter_reduce(
        0, group, torch.where(f_at_b <= 0, position, n), reduce="amin"
    )
    hit = first_hit.clamp(max=max(n - 1, 0))
    q_hit = q_left[hit]
    # Q of an empty segment is 0 only up to the rounding of the batch-wide prefix sums it is cut from
    # (earlier groups' mass cancels): below that bound the segment is empty and λ = its breakpoint
    group_end = (index.counts.cumsum(0) - 1).clamp(min=0)
    q_mass = (parts[1] + parts[3]).cumsum(dim=0)[group_end] if n else parts.new_zeros(index.num_groups)
    q_tol = 4 * max(n, 1) * torch.finfo(weights.dtype).eps * q_mass
    nonempty = q_hit > q_tol
    lam_hit = torch.where(nonempty, s_left[hit] / torch.where(nonempty, q_hit, 1.0), b[hit])

    neg_aw, neg_aa = group_totals[2], group_totals[3]
    last_b = torch.full((index.num_groups,), float("-inf"), dtype=b.dtype, device=b.device).scatter_reduce(
        0, group, torch.where(finite, b, float("-inf")), reduce="amax"
    )
    lam_tail = torch.where(
        neg_aa > 0, neg_aw / torch.where(neg_aa > 0, neg_aa, 1.0), torch.nan_to_num(last_b, neginf=0.0)
    )
    lam = torch.where(first_hit < n, lam_hit, lam_tail)
    return torch.clamp(weights - lam[inverse] * advantages, min=0.0)


def trunc_rebalance(
    weights: torch.Tensor, advantages: torch.Tensor, index: GroupIndex, eps1: float = 0.05
) -> torch.Tensor:
    """Truncate s⁺ = max(s̄, ε₁) [D eq. 52], then scale one side so Âᵀs̃ = 0 [eq. 53-55].

    α = Σ_N |Â| s⁺ / Σ_P Â s⁺ scales the P side when δ = Âᵀs⁺ > 0; β = Σ_P Â s⁺ / Σ_N |Â| s⁺ the N
    side when δ < 0. Eq. 55 prints β with a wrong sign (docs/losses.md#group-transformations); this β is the one the constraint forces,
    and both lie in (0, 1]. Note the scaled side can drop below ε₁ (α s⁺ ≥ α ε₁): the paper's
    "s̃ ⪰ ε₁" holds only for the unscaled side; s̃ > 0 always.
    """
    positive, negative = advantages > 0, advantages < 0
    s_plus = torch.clamp(weights, min=eps1)
    mass_pos = group_sum(torch.where(positive, advantages * s_plus, 0.0), index)
    mass_neg = group_sum(torch.where(negative, -advantages * s_plus, 0.0), index)
    alpha = torch.where(mass_pos > mass_neg, mass_neg / torch.where(mass_pos > 0, mass_pos, 1.0), 1.0)
    beta = torch.where(mass_neg > mass_pos, mass_pos / torch.where(mass_neg > 0, mass_neg, 1.0), 1.0)
    scale = torch.where(positive, alpha[index.inverse], torch.where(negative, beta[index.inverse], 1.0))
    return s_plus * scale


_TRANSFORMS = {
    "min_replace": min_replace,
    "orth_proj": orth_proj,
    "pos_orth_qp": pos_orth_qp,
    "trunc_rebalance": trunc_rebalance,
}
assert tuple(_TRANSFORMS) == TRANSFORMS


def apply_transform(
    name: str, weights: torch.Tensor, advantages: torch.Tensor, index: GroupIndex, **options
) -> torch.Tensor:
    """T(s̄, Â) per group in float64; groups with ‖Â‖ = 0 keep s̄."""
    try:
        fn = _TRANSFORMS[name]
    except KeyError:
        raise ValueError(f"unknown DFPO transform {name!r}; expected one of {', '.join(TRANSFORMS)}") from None
    if options and name != "trunc_rebalance":
        raise TypeError(f"transform {name!r} takes no options, got {sorted(options)}")
    unknown = set(options) - {"eps1"}
    if unknown:
        raise TypeError(f"transform {name!r}: unknown options {sorted(unknown)} (only eps1)")
    w, a = weights.to(torch.float64), advantages.to(torch.float64)
    out = fn(w, a, index, **options)
    degenerate = group_sum((a != 0).to(a.dtype), index) == 0  # Â ≡ 0 in the group
    return torch.where(degenerate[index.inverse], w, out)


def transform(
    name: str, weights: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor, **options
) -> torch.Tensor:
    """Public 1-D API: transformed weights s̃ [N] for weights s̄ [N], advantages Â [N], group ids [N].

    Groups may have any sizes here (no partial-group check: that is the loss's job). Returned in
    the weights' dtype (fp32 for bf16/fp16 input).
    """
    weights, advantages = torch.as_tensor(weights), torch.as_tensor(advantages)
    if weights.dim() != 1 or advantages.shape != weights.shape:
        raise ValueError(
            "transform expects 1-D weights and advantages of one shape, "
            f"got {tuple(weights.shape)} and {tuple(advantages.shape)}"
        )
    index = group_index(torch.as_tensor(group_ids, device=weights.device))
    if index.inverse.numel() != weights.numel():
        raise ValueError(f"weights has {weights.numel()} rows but group_ids has {index.inverse.numel()}")
    out_dtype = weights.dtype if weights.dtype in (torch.float32, torch.float64) else torch.float32
    return apply_transform(name, weights, advantages, index, **options).to(out_dtype)
