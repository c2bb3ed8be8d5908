"""Every name a spec, the lab and verl share — torch-free, so validating a spec never imports torch.

One entry per loss (docs/losses.md#the-losses): where its function lives, the per-row weight w_i it puts on a row
(what `dfpo/asym` and `dfpo/weight_dispersion` measure [D eq. 23]), whether it needs whole groups,
and its default aggregation. `losses.registry` resolves the dotted paths lazily, so a new loss is its
own module plus one `register_loss` call here (or from an extension); nothing else lists loss names.
"""

from __future__ import annotations

from dataclasses import dataclass

# DFPO group transformations of the post-clip sequence weights [D eq. 18, 50-55]
# (docs/losses.md#group-transformations).
TRANSFORMS = ("min_replace", "orth_proj", "pos_orth_qp", "trunc_rebalance")
# Sign probes [C §3.2]: keep only rows with Â > 0 / Â < 0.
PROBES = ("positive_only", "negative_only")
# Batching strategies [C §4] (docs/losses.md#batching-strategies).
BATCHING_STRATEGIES = ("default", "query_preserved", "reward_balanced", "sign_split")
# verl's aggregation modes a spec may choose (docs/losses.md#the-losses); `token-sum` is verl's too, accepted by the math only.
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
ALL_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# Token-weight wrappers, innermost first (all multiply detached weights, so the order is only a label).
WRAPPERS = ("probe", "inject_delta", "inject_noise", "tis")
# In verl's policy-loss registry every loss is `cancel_<name>` (`losses.verl_plugin` registers them;
# a run's actor.policy_loss.loss_mode names one): `verl_loss_name`.
VERL_LOSS_PREFIX = "cancel_"


@dataclass(frozen=True)
class LossInfo:
    """A registered loss.

    function: "module:attribute" of fn(old_log_prob, log_prob, advantages, response_mask,
        loss_agg_mode, config, rollout_is_weights, group_ids) -> (loss, metrics), verl's signature.
    row_weights: "module:attribute" of fn(log_prob, old_log_prob, advantages [N], response_mask,
        group_ids, config) -> w [N], the weight the loss puts on row i [D eq. 23].
    """

    name: str
    function: str
    row_weights: str
    default_agg_mode: str
    needs_groups: bool = False
    source: str = ""
    # (ε_low, ε_high) when a spec sets no clip: token-ratio losses clip at 0.2; the length-normalised
    # sequence ratio of GSPO (and DFPO, built on it) stays within ~1e-3 of 1, so the GSPO paper clips
    # it at 3e-4 / 4e-4 (Zheng et al. 2025, §5.1) — 0.2 would leave it unclipped
    default_clip: tuple[float, float] = (0.2, 0.2)


LOSSES: dict[str, LossInfo] = {}


def register_loss(info: LossInfo) -> LossInfo:
    """Add a loss to the catalog (the one registration a new loss needs)."""
    if info.name in LOSSES and LOSSES[info.name] != info:
        raise ValueError(f"loss {info.name!r} is already registered as {LOSSES[info.name]}")
    if info.default_agg_mode not in AGG_MODES:
        raise ValueError(f"loss {info.name!r}: default_agg_mode {info.default_agg_mode!r} not in {AGG_MODES}")
    LOSSES[info.name] = info
    return info


def unregister_loss(name: str) -> None:
    """Remove a loss (tests and extensions that register temporarily)."""
    LOSSES.pop(name, None)


def loss_names() -> tuple[str, ...]:
    """Registered loss names, in the order of docs/losses.md's table."""
    return tuple(LOSSES)


def loss_info(name: str) -> LossInfo:
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; registered: {', '.join(LOSSES)}") from None


def verl_loss_name(name: str) -> str:
    """The name loss `name` has in verl's policy-loss registry: `cancel_<name>`."""
    return VERL_LOSS_PREFIX + name


def needs_groups(name: str) -> bool:
    """Whether the loss's value needs whole groups (docs/losses.md#dfpo, step 5)."""
    return loss_info(name).needs_groups


for _info in (
    LossInfo("grpo", "losses.pg:grpo", "losses.pg:token_row_weights", "token-mean", source="[H eq. 2]"),
    LossInfo("dapo", "losses.pg:dapo", "losses.pg:token_row_weights", "token-mean", source="[H §4.3]"),
    LossInfo("gspo", "losses.pg:gspo", "losses.pg:sequence_row_weights", "seq-mean-token-mean", source="[D eq. 42-44]",
             default_clip=(3e-4, 4e-4)),
    LossInfo(
        "grpo_symclip", "losses.pg:grpo_symclip", "losses.pg:symclip_row_weights", "token-mean", source="[D eq. 79-80]"
    ),
    LossInfo(
        "dfpo", "losses.dfpo:dfpo", "losses.dfpo:dfpo_row_weights", "seq-mean-token-mean", True, source="[D App. B]",
        default_clip=(3e-4, 4e-4),
    ),
):
    register_loss(_info)
