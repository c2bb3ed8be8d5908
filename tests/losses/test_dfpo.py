"""DFPO (docs/losses.md#dfpo): value, per-token gradient, ablations, partial groups, metrics."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from loss_helpers import Batch, grad_of, make_batch

import losses

CLIP = 0.2


def config(**policy) -> losses.LossConfig:
    return losses.LossConfig(clip_ratio=CLIP, policy_loss=losses.PolicyLossOptions(loss_mode="dfpo", **policy))


def post_clip_weights(b: Batch) -> torch.Tensor:
    """s̄ by hand [D eq. 44, 46-47], without gradient."""
    with torch.no_grad():
        s = torch.exp(((b.log_prob - b.old_log_prob) * b.response_mask).sum(-1) / b.lengths)
        c = s.clamp(1 - CLIP, 1 + CLIP)
        return torch.where(b.row_adv >= 0, torch.minimum(s, c), torch.maximum(s, c))


def run(b: Batch, agg="seq-mean-token-mean", **policy):
    return losses.get("dfpo")(**b.kwargs(loss_agg_mode=agg, config=config(**policy), group_ids=b.group_ids))


@pytest.fixture
def b() -> Batch:
    batch = make_batch(groups=5, group_size=4, tokens=9, seed=3, spread=0.4, dtype=torch.float64)
    s = torch.exp(((batch.log_prob - batch.old_log_prob) * batch.response_mask).sum(-1) / batch.lengths)
    assert ((s > 1 + CLIP) | (s < 1 - CLIP)).any(), "fixture should contain clipped rows"
    return batch


@pytest.mark.parametrize("name", losses.TRANSFORMS)
def test_stop_grad_gradient_is_s_tilde_times_advantage_over_length(b, name):
    """[D eq. 68, 85]: the coefficient on ∇log π_{i,t} is s̃_i Â_i / |y_i|. The loss is minimised and
    seq-mean-token-mean averages over the N rows, so dLoss/dlog π_{i,t} = −s̃_i Â_i / (|y_i| N)."""
    loss, metrics = run(b, transform=name)
    s_tilde = losses.transform(name, post_clip_weights(b), b.row_adv, b.group_ids)
    n = b.log_prob.shape[0]
    per_row = -s_tilde * b.row_adv / (b.lengths * n)
    expected = torch.where(b.response_mask, per_row[:, None], 0.0)
    torch.testing.assert_close(grad_of(loss, b.log_prob), expected, rtol=1e-10, atol=1e-14)
    # the value reports s̃_i Â_i (loss = −mean_i s̃_i Â_i), not the log-prob surrogate
    assert loss.item() == pytest.approx(-(s_tilde * b.row_adv).mean().item(), abs=1e-12)
    assert metrics["dfpo/ortho_residual"] < 1e-6


def test_min_replace_gradient_by_hand_and_clipped_rows_keep_their_gradient(b):
    """Independent of losses.transform: s̃ = min over the group; rows whose s̄ was clipped are not
    zeroed (docs/losses.md#dfpo, step 3: the clip only shapes the value of s̄)."""
    loss, _ = run(b, transform="min_replace")
    grad = grad_of(loss, b.log_prob)
    s_bar = post_clip_weights(b)
    n = len(s_bar)
    for i in range(n):
        same = b.group_ids == b.group_ids[i]
        coef = -(s_bar[same].min() * b.row_adv[i]) / (b.lengths[i] * n)
        torch.testing.assert_close(grad[i, : b.lengths[i]], coef.expand(int(b.lengths[i])))
    s = torch.exp(((b.log_prob - b.old_log_prob) * b.response_mask).sum(-1) / b.lengths).detach()
    clipped = (s_bar != s) & (b.row_adv != 0)
    assert clipped.any() and (grad[clipped].abs().sum(-1) > 0).all()


def test_token_mean_aggregation_normalises_by_all_tokens(b):
    loss, _ = run(b, agg="token-mean", transform="orth_proj")
    s_tilde = losses.transform("orth_proj", post_clip_weights(b), b.row_adv, b.group_ids)
    expected = torch.where(b.response_mask, (-s_tilde * b.row_adv)[:, None], 0.0) / b.response_mask.sum()
    torch.testing.assert_close(grad_of(loss, b.log_prob), expected, rtol=1e-10, atol=1e-14)


def by_hand_no_stop_grad(b: Batch, name: str) -> torch.Tensor:
    """[D] Table 3 (docs/losses.md#dfpo, step 4): loss = −(1/N) Σ_i Â_i s̃_i(θ) ℓ_i(θ), s̃ differentiable, ℓ_i the row's mean log-prob."""
    mask = b.response_mask
    s = torch.exp(((b.log_prob - b.old_log_prob) * mask).sum(-1) / b.lengths)
    c = s.clamp(1 - CLIP, 1 + CLIP)
    s_bar = torch.where(b.row_adv >= 0, torch.minimum(s, c), torch.maximum(s, c))
    ell = (b.log_prob * mask).sum(-1) / b.lengths
    total = 0.0
    for g in b.group_ids.unique():
        rows = b.group_ids == g
        a, w = b.row_adv[rows], s_bar[rows]
        if name == "min_replace":
            s_tilde = w.min().expand_as(w)
        else:  # orth_proj [D eq. 18]
            s_tilde = w - (a @ w) / (a @ a) * a
        total = total - (a * s_tilde * ell[rows]).sum()
    return total / len(s)


@pytest.mark.parametrize("name", ["min_replace", "orth_proj"])
def test_no_stop_grad_differentiates_through_the_transform(b, name):
    loss, _ = run(b, transform=name, stop_grad=False)
    grad = grad_of(loss, b.log_prob)
    expected_loss = by_hand_no_stop_grad(b, name)
    assert loss.item() == pytest.approx(expected_loss.item(), rel=1e-10)
    torch.testing.assert_close(grad, grad_of(expected_loss, b.log_prob), rtol=1e-9, atol=1e-14)
    stop_grad_loss, _ = run(b, transform=name)
    assert (grad - grad_of(stop_grad_loss, b.log_prob)).abs().max() > 1e-4


@pytest.mark.parametrize("name", ["pos_orth_qp", "trunc_rebalance"])
def test_no_stop_grad_runs_for_every_transform(b, name):
    loss, metrics = run(b, transform=name, stop_grad=False)
    grad = grad_of(loss, b.log_prob)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    assert metrics["dfpo/ortho_residual"] < 1e-6


def test_scale_ablation_is_half_the_post_clip_weight_without_transform(b):
    """[D Table 3] "scale by 0.5": s̃ = 0.5 s̄, no group transform."""
    loss, metrics = run(b, scale=0.5, transform="pos_orth_qp")
    s_tilde = 0.5 * post_clip_weights(b)
    n = len(s_tilde)
    expected = torch.where(b.response_mask, (-s_tilde * b.row_adv / (b.lengths * n))[:, None], 0.0)
    torch.testing.assert_close(grad_of(loss, b.log_prob), expected, rtol=1e-10, atol=1e-14)
    assert metrics["dfpo/ortho_residual"] == pytest.approx(losses.dfpo_ortho_residual(s_tilde, b.row_adv, b.group_ids))
    assert metrics["dfpo/ortho_residual"] > 1e-3  # no transform: orthogonality is not restored


def test_metrics_keys_and_values(b):
    loss, metrics = run(b, transform="min_replace")
    assert set(metrics) == {
        "actor/pg_clipfrac",
        "actor/ppo_kl",
        "actor/pg_clipfrac_lower",
        "dfpo/asym",
        "dfpo/ortho_residual",
        "dfpo/weight_dispersion",
    }
    assert all(type(v) is float for v in metrics.values())
    assert metrics["dfpo/weight_dispersion"] == 0.0  # min_replace: one weight per group
    s_tilde = losses.transform("min_replace", post_clip_weights(b), b.row_adv, b.group_ids)
    assert metrics["dfpo/asym"] == pytest.approx(losses.dfpo_asym(s_tilde, b.row_adv, b.group_ids), rel=1e-12)
    assert metrics["dfpo/asym"] < losses.dfpo_asym(post_clip_weights(b), b.row_adv, b.group_ids) * 1.5
    assert 0 < metrics["actor/pg_clipfrac"] < 1


def test_rollout_is_weights_scale_each_token(b):
    w = torch.rand(b.log_prob.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 0.5
    plain, _ = run(b)
    weighted, _ = losses.get("dfpo")(**b.kwargs(config=config(), group_ids=b.group_ids, rollout_is_weights=w))
    torch.testing.assert_close(grad_of(weighted, b.log_prob), grad_of(plain, b.log_prob) * w * b.response_mask)


def test_partial_group_is_refused():
    b = make_batch(groups=3, group_size=4, tokens=6, shuffle=False)
    keep = torch.arange(12) != 5  # drop one row of the second group (id 10)
    kwargs = dict(
        old_log_prob=b.old_log_prob[keep],
        log_prob=b.log_prob[keep],
        advantages=b.advantages[keep],
        response_mask=b.response_mask[keep],
        group_ids=b.group_ids[keep],
    )
    with pytest.raises(ValueError, match=r"group id 10 has 3 rows but the other groups say G=4"):
        losses.get("dfpo")(**kwargs, config=config())
    with pytest.raises(ValueError, match=r"group id 3 has 4 rows but policy_loss.group_size say G=8 \(3 of 3"):
        losses.get("dfpo")(**b.kwargs(group_ids=b.group_ids, config=config(group_size=8)))
    losses.get("dfpo")(**b.kwargs(group_ids=b.group_ids, config=config(group_size=4)))  # whole groups pass


def test_zero_token_rows_take_no_part_in_the_group_check():
    """verl V1 pads a batch with zero-token rows sharing one `pad<hex>` uid: they neither break the
    whole-group check nor change the loss; a real partial group is still refused."""
    b = make_batch(groups=3, group_size=4, tokens=6, shuffle=False)
    pad = lambda t, v: torch.cat([t, torch.full((3, *t.shape[1:]), v, dtype=t.dtype)])  # noqa: E731
    padded = dict(
        old_log_prob=pad(b.old_log_prob, -1.0),
        log_prob=pad(b.log_prob.detach(), -1.0).requires_grad_(True),
        advantages=pad(b.advantages, 0.0),
        response_mask=pad(b.response_mask, False),
        group_ids=torch.cat([b.group_ids, torch.full((3,), 99)]),
    )
    cfg = losses.LossConfig(global_batch_info={"global_batch_size": 12}, policy_loss=losses.PolicyLossOptions(group_size=4))
    loss, _ = losses.get("dfpo")(**padded, config=cfg, loss_agg_mode="seq-mean-token-mean")
    plain, _ = losses.get("dfpo")(**b.kwargs(group_ids=b.group_ids, config=cfg, loss_agg_mode="seq-mean-token-mean"))
    torch.testing.assert_close(loss, plain)
    padded["group_ids"][0] = 98  # row 0 leaves its group: a partial group among real rows
    with pytest.raises(ValueError, match="has 3 rows but policy_loss.group_size say G=4"):
        losses.get("dfpo")(**padded, config=cfg)


def test_group_ids_are_required_and_options_validated(b):
    with pytest.raises(ValueError, match="dfpo needs group_ids"):
        losses.get("dfpo")(**b.kwargs(config=config()))
    with pytest.raises(ValueError, match="policy_loss.transform='nope'"):
        run(b, transform="nope")
    with pytest.raises(ValueError, match="group_ids has 3 entries for 20 rows"):
        losses.get("dfpo")(**b.kwargs(config=config(), group_ids=b.group_ids[:3]))


def test_options_read_from_any_config_shape(b):
    """verl's ActorConfig is a dataclass whose policy_loss may be a dataclass or a DictConfig-like
    mapping; a namespace with the same attributes must behave like LossConfig."""
    expected, _ = run(b, transform="orth_proj")
    for policy in (SimpleNamespace(transform="orth_proj"), {"transform": "orth_proj", "stop_grad": None}):
        cfg = SimpleNamespace(clip_ratio=CLIP, clip_ratio_low=None, clip_ratio_high=None, policy_loss=policy)
        loss, _ = losses.get("dfpo")(**b.kwargs(loss_agg_mode="seq-mean-token-mean", config=cfg, group_ids=b.group_ids))
        assert loss.item() == expected.item()

