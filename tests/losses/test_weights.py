"""Token-weight wrappers: tis, inject_delta, inject_noise, positive_only, negative_only."""

from __future__ import annotations

import importlib
import math

import pytest
import torch
from loss_helpers import DEVICES, Batch, grad_of, make_batch

import losses


class Spy:
    """A loss with verl's bare signature (no group_ids / rollout_log_prob) that records its weights."""

    def __init__(self):
        self.weights = []

    def __call__(
        self,
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        loss_agg_mode="token-mean",
        config=None,
        rollout_is_weights=None,
    ):
        self.weights.append(rollout_is_weights)
        return losses.grpo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights)


@pytest.fixture
def b() -> Batch:
    return make_batch(groups=4, group_size=4, tokens=16, seed=2, dtype=torch.float64)


def test_inject_delta_weights_exactly_the_low_probability_tokens(b):
    """[H eq. 18]: φ = δ on tokens with π_train(o|θ_old) < π_low, 1 elsewhere."""
    probs = torch.exp(b.old_log_prob)
    low = probs < 0.1
    assert low.any() and (~low).any()
    spy = Spy()
    losses.inject_delta(spy, delta=3.0, p_low=0.1)(**b.kwargs())
    (w,) = spy.weights
    assert torch.equal(w == 3.0, low) and torch.equal(w == 1.0, ~low)
    # the boundary itself: π exactly π_low is not "below"
    at = torch.log(torch.tensor([[0.1, 0.0999999, 0.1000001]], dtype=torch.float64))
    assert losses.delta_weights(at, delta=0.0, p_low=0.1).tolist() == [[1.0, 0.0, 1.0]]


def test_weights_scale_each_token_term_before_aggregation(b):
    plain, _ = losses.grpo(**b.kwargs(loss_agg_mode="token-sum"))
    plain_grad = grad_of(plain, b.log_prob)
    wrapped, _ = losses.inject_delta(losses.grpo, delta=2.0)(**b.kwargs(loss_agg_mode="token-sum"))
    phi = losses.delta_weights(b.old_log_prob, 2.0)
    torch.testing.assert_close(grad_of(wrapped, b.log_prob), plain_grad * phi)


def test_tis_is_the_truncated_mismatch_ratio(b):
    rollout = b.old_log_prob + 0.5 * torch.randn(
        b.old_log_prob.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    spy = Spy()
    losses.tis(spy, cap=1.5)(**b.kwargs(rollout_log_prob=rollout))
    expected = torch.exp(b.old_log_prob - rollout).clamp(max=1.5)
    torch.testing.assert_close(spy.weights[0], expected)
    assert (spy.weights[0] == 1.5).any()
    with pytest.raises(ValueError, match="tis needs rollout_log_prob"):
        losses.tis(losses.grpo)(**b.kwargs())


def test_inject_noise_is_reproducible_per_seed(b):
    def draw(seed):
        spy = Spy()
        fn = losses.inject_noise(spy, sigma=0.2, generator=torch.Generator().manual_seed(seed))
        loss1, _ = fn(**b.kwargs())
        fn(**b.kwargs())
        return loss1.item(), spy.weights

    loss_a, (a1, a2) = draw(7)
    loss_b, (b1, b2) = draw(7)
    assert loss_a == loss_b and torch.equal(a1, b1) and torch.equal(a2, b2)
    assert not torch.equal(a1, a2)  # fresh noise per call
    _, (c1, _) = draw(8)
    assert not torch.equal(a1, c1)
    spy = Spy()
    losses.inject_noise(spy, sigma=0.2, seed=7)(**b.kwargs())  # seed= is the same as a seeded generator
    assert torch.equal(spy.weights[0], a1)


@pytest.mark.parametrize("device", DEVICES)
def test_inject_noise_draws_on_the_tokens_device_and_replays_per_seed(device):
    b = make_batch(groups=4, group_size=4, tokens=16, seed=2, device=device)

    def weights(seed):
        spy = Spy()
        fn = losses.inject_noise(spy, sigma=0.2, seed=seed)
        fn(**b.kwargs())
        fn(**b.kwargs())
        return spy.weights

    a1, a2 = weights(5)
    assert a1.device.type == device and not torch.equal(a1, a2)
    r1, r2 = weights(5)
    assert torch.equal(a1, r1) and torch.equal(a2, r2)
    first = torch.Generator(device=device).manual_seed(5)  # the draw is the device generator's own
    assert torch.equal(a1, losses.noise_weights(b.response_mask.shape, 0.2, first))


def test_inject_noise_is_unbiased():
    """[H eq. 21-22]: E[ξ] = 1, so the objective shift Σ Y (ξ − 1) averages to 0 over seeds."""
    w = losses.noise_weights((400, 500), sigma=0.2, generator=torch.Generator().manual_seed(0))
    assert w.mean().item() == pytest.approx(1.0, abs=4 * 0.2 / math.sqrt(w.numel()))
    assert w.std().item() == pytest.approx(0.2, rel=0.01)

    b = make_batch(groups=8, group_size=8, tokens=32, seed=4, spread=0.5, dtype=torch.float64)
    base, _ = losses.grpo(**b.kwargs())
    shifts = torch.tensor(
        [
            losses.inject_noise(losses.grpo, sigma=0.2, seed=seed)(**b.kwargs())[0].item() - base.item()
            for seed in range(300)
        ]
    )
    # mean shift within 4 standard errors of 0, while single draws do move the objective
    assert abs(shifts.mean().item()) < 4 * shifts.std().item() / math.sqrt(len(shifts))
    assert shifts.abs().max() > 10 * abs(shifts.mean().item())


@pytest.mark.parametrize(
    "probe, zeroed", [(losses.positive_only, lambda a: a <= 0), (losses.negative_only, lambda a: a >= 0)]
)
def test_sign_probes_zero_one_side(b, probe, zeroed):
    """[C §3.2]: positive_only drops rows with Â ≤ 0, negative_only rows with Â ≥ 0."""
    loss, _ = probe(losses.gspo)(**b.kwargs(loss_agg_mode="seq-mean-token-mean"))
    per_row = grad_of(loss, b.log_prob).abs().sum(-1)
    dropped = zeroed(b.row_adv)
    assert dropped.any() and (~dropped).any()
    assert (per_row[dropped] == 0).all() and (per_row[~dropped] > 0).all()


def test_wrappers_nest_and_multiply(b):
    rollout = b.old_log_prob - 0.3
    spy = Spy()
    fn = losses.tis(
        losses.inject_noise(losses.inject_delta(spy, delta=2.0), sigma=0.2, generator=torch.Generator().manual_seed(3)),
        cap=2.0,
    )
    fn(
        **b.kwargs(
            rollout_log_prob=rollout, rollout_is_weights=torch.full(b.old_log_prob.shape, 0.5, dtype=torch.float64)
        )
    )
    noise = losses.noise_weights(b.old_log_prob.shape, 0.2, torch.Generator().manual_seed(3))
    expected = (
        0.5 * losses.tis_weights(b.old_log_prob, rollout, 2.0) * noise * losses.delta_weights(b.old_log_prob, 2.0)
    )
    torch.testing.assert_close(spy.weights[0], expected.double())
    assert fn.__name__ == "tis[cap=2.0](inject_noise[sigma=0.2](inject_delta[delta=2.0,p_low=0.1](Spy)))"


def test_wrapped_losses_keep_their_own_defaults_and_group_ids(b):
    """No loss_agg_mode given: the inner loss's default (gspo: seq-mean-token-mean) applies; group_ids
    reach a grouped loss through any wrapper."""
    plain, _ = losses.gspo(**b.kwargs())
    wrapped, _ = losses.inject_delta(losses.gspo, delta=1.0)(**b.kwargs())
    assert plain.item() == wrapped.item()
    dfpo, metrics = losses.positive_only(losses.tis(losses.dfpo, cap=10.0))(
        **b.kwargs(group_ids=b.group_ids, rollout_log_prob=b.old_log_prob)
    )
    assert "dfpo/asym" in metrics


# The probes' weights are written in one pass (the comparison writes fp32 1.0 / 0.0) instead of
# a bool tensor converted in a second one. The math must not move by one bit: compare with the former form.


def _bits(t: torch.Tensor) -> torch.Tensor:
    ints = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16}
    return t.detach().contiguous().view(ints[t.dtype])


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _former_sign_weights(advantages, keep):
    if keep == "positive":
        return (advantages.detach() > 0).float()
    if keep == "negative":
        return (advantages.detach() < 0).float()
    raise ValueError(f"keep must be 'positive' or 'negative', got {keep!r}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_sign_weights_are_the_former_boolean_floats_bit_for_bit(dtype):
    special = torch.tensor([-1.0, -0.0, 0.0, 2.0, float("nan"), float("inf"), -float("inf"), 1e-30, -1e-30])
    values = torch.cat([special, torch.randn(500, generator=torch.Generator().manual_seed(0))]).to(dtype)
    for adv in (values.reshape(1, -1), values[:7, None].expand(7, 5), values[::3]):  # plain, broadcast, strided
        for keep in ("positive", "negative"):
            assert _same_bits(losses.sign_weights(adv, keep), _former_sign_weights(adv, keep)), (dtype, keep)
    with pytest.raises(ValueError, match="keep must be"):
        losses.sign_weights(values, "both")


PROBED = {
    "positive_only": losses.positive_only,
    "negative_only": losses.negative_only,
    "nested": lambda fn: losses.tis(
        losses.inject_noise(losses.inject_delta(losses.positive_only(fn), delta=3.0), sigma=0.2, seed=4), cap=2.0
    ),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("probe", list(PROBED))
@pytest.mark.parametrize("name", ["grpo", "dapo", "gspo", "grpo_symclip", "dfpo"])
def test_probed_losses_and_gradients_are_bit_for_bit_the_former_ones(name, probe, dtype, monkeypatch):
    """Loss, metrics and gradient of each probe over every loss (alone, under the other wrappers, with and
    without a caller's rollout_is_weights), in one process: now vs with the former sign weights put back."""
    b = make_batch(groups=4, group_size=4, tokens=24, seed=5, spread=0.4, dtype=dtype)
    rollout = b.old_log_prob - 0.3
    caller = torch.rand(b.old_log_prob.shape, generator=torch.Generator().manual_seed(1)).to(dtype) + 0.5

    def outputs(rollout_is_weights):
        fn = PROBED[probe](losses.get(name))  # made afresh: inject_noise replays its seed
        kwargs = b.kwargs(group_ids=b.group_ids, rollout_log_prob=rollout, rollout_is_weights=rollout_is_weights)
        loss, metrics = fn(**kwargs)
        return loss, metrics, grad_of(loss, b.log_prob)

    now = [outputs(None), outputs(caller)]
    monkeypatch.setattr(importlib.import_module("losses.weights"), "sign_weights", _former_sign_weights)
    for (loss, metrics, grad), (loss0, metrics0, grad0) in zip(now, [outputs(None), outputs(caller)], strict=True):
        assert _same_bits(loss, loss0) and _same_bits(grad, grad0) and metrics == metrics0
        assert (grad == 0).any() and (grad != 0).any()  # the probe dropped rows, and kept some
