"""Parity with verl 0.9.1 (value, gradient, metrics) and the plugin registration. Needs verl."""

from __future__ import annotations

import pytest
import torch
from loss_helpers import grad_of, make_batch, verl_core_fixture  # noqa: F401  (provides the verl_core fixture)

import losses
from losses.aggregation import agg_loss
from losses.catalog import verl_loss_name

pytestmark = pytest.mark.verl

MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
GLOBAL_INFO = [
    {},
    {"dp_size": 1, "batch_num_tokens": None, "global_batch_size": None, "loss_scale_factor": None},  # ppo_loss, 1 GPU
    {"dp_size": 4, "batch_num_tokens": 1000, "global_batch_size": 64, "loss_scale_factor": 512},
]


def actor_config(info: dict, **overrides):
    from verl.workers.config import ActorConfig

    fields = dict(
        strategy="fsdp",
        rollout_n=4,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        global_batch_info=dict(info),
    )
    fields.update(overrides)
    return ActorConfig(**fields)


def compare(ours, theirs, config, mode, seed, weights: bool):
    """Same batch through both; losses and gradients to 1e-6, metrics equal."""
    b = make_batch(groups=6, group_size=4, tokens=24, seed=seed, spread=0.7)  # fp32; ratios beyond every clip
    w = torch.rand(b.log_prob.shape, generator=torch.Generator().manual_seed(seed)) + 0.5 if weights else None
    results = []
    for fn in (ours, theirs):
        leaf = b.log_prob.detach().clone().requires_grad_(True)
        loss, metrics = fn(
            old_log_prob=b.old_log_prob,
            log_prob=leaf,
            advantages=b.advantages,
            response_mask=b.response_mask,
            loss_agg_mode=mode,
            config=config,
            rollout_is_weights=w,
        )
        results.append((loss, grad_of(loss, leaf), metrics))
    (l1, g1, m1), (l2, g2, m2) = results
    torch.testing.assert_close(l1, l2, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g1, g2, rtol=1e-6, atol=1e-6)
    assert m1.keys() == m2.keys()
    for key in m1:
        assert m1[key] == pytest.approx(m2[key], rel=1e-6, abs=1e-7), key


@pytest.mark.parametrize("info", GLOBAL_INFO, ids=["no-info", "local-info", "global-info"])
@pytest.mark.parametrize("mode", MODES)
def test_grpo_equals_verl_vanilla(verl_core, mode, info):
    for seed, weights in ((0, False), (1, True)):
        compare(losses.grpo, verl_core.compute_policy_loss_vanilla, actor_config(info), mode, seed, weights)


@pytest.mark.parametrize("info", GLOBAL_INFO, ids=["no-info", "local-info", "global-info"])
@pytest.mark.parametrize("mode", MODES)
def test_gspo_equals_verl_gspo(verl_core, mode, info):
    config = actor_config(info, clip_ratio_low=3e-4, clip_ratio_high=4e-4)  # verl's GSPO example clips
    for seed, weights in ((0, False), (1, True)):
        compare(losses.gspo, verl_core.compute_policy_loss_gspo, config, mode, seed, weights)
    compare(losses.gspo, verl_core.compute_policy_loss_gspo, actor_config(info), mode, 2, False)


def test_dual_clip_is_exercised(verl_core):
    """The parity batches reach the dual-clip branch (Â < 0, r > 3), so clip_ratio_c is really compared."""
    b = make_batch(groups=6, group_size=4, tokens=24, seed=0, spread=0.7)
    _, metrics = losses.grpo(**b.kwargs(config=actor_config({})))
    assert metrics["actor/pg_clipfrac_lower"] > 0


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32])
@pytest.mark.parametrize("info", GLOBAL_INFO[1:], ids=["local-info", "global-info"])
@pytest.mark.parametrize("mode", MODES)
def test_agg_loss_is_bitwise_verl(verl_core, mode, info, mask_dtype):
    g = torch.Generator().manual_seed(3)
    mat = torch.randn(7, 13, generator=g, requires_grad=True)
    mask = (torch.arange(13)[None, :] < torch.tensor([13, 2, 0, 5, 13, 1, 8])[:, None]).to(mask_dtype)
    if mask_dtype is torch.float32:
        mask = mask * (0.5 + torch.rand(7, 13, generator=g))  # a weighted mask is multiplied, as verl does
    ours = agg_loss(mat, mask, mode, **info)
    theirs = verl_core.agg_loss(mat, mask, mode, **info)
    assert torch.equal(ours, theirs)
    assert torch.equal(grad_of(ours, mat), grad_of(theirs, mat))


def policy_loss_config(**fields):
    """A PolicyLossConfig subclass with our option fields, as the verl backend's `_target_` provides."""
    from dataclasses import make_dataclass
    from typing import Any

    from verl.workers.config.actor import PolicyLossConfig

    cls = make_dataclass("TestPolicyLossConfig", [(k, Any | None, None) for k in fields], bases=(PolicyLossConfig,))
    return cls(**fields)


def test_our_losses_accept_verl_actor_config(verl_core):
    b = make_batch()
    config = actor_config({}, policy_loss=policy_loss_config(loss_mode="cancel_dfpo", transform="orth_proj"))
    loss, metrics = losses.dfpo(**b.kwargs(config=config, group_ids=b.group_ids))
    expected, _ = losses.dfpo(
        **b.kwargs(
            group_ids=b.group_ids,
            config=losses.LossConfig(
                clip_ratio_low=0.2, clip_ratio_high=0.28, policy_loss=losses.PolicyLossOptions(transform="orth_proj")
            ),
        )
    )
    assert loss.item() == expected.item() and metrics["dfpo/ortho_residual"] < 1e-6


def test_plugin_registers_prefixed_names_through_the_entry_point(verl_core):
    """`import verl` loads the `verl.plugins` entry point (pip install -e . registers it)."""
    import sys
    from importlib.metadata import entry_points

    import loss_helpers

    assert [ep.value for ep in entry_points(group="verl.plugins") if ep.name == "cancelctl"] == ["losses.verl_plugin"]
    assert "losses.verl_plugin" in sys.modules
    if loss_helpers.PLUGIN_LOADED_BY_VERL is not None:  # verl was first imported by our fixture
        assert loss_helpers.PLUGIN_LOADED_BY_VERL, "import verl did not load the verl.plugins entry point"
    b = make_batch()
    config = actor_config({})
    for name in losses.names():
        fn = verl_core.get_policy_loss_fn(verl_loss_name(name))
        if name == "dfpo":
            continue
        theirs, _ = fn(**b.kwargs(config=config, loss_agg_mode="token-mean"))
        ours, _ = losses.get(name)(**b.kwargs(config=config, loss_agg_mode="token-mean"))
        assert theirs.item() == ours.item()
    assert verl_core.get_policy_loss_fn("gspo") is verl_core.compute_policy_loss_gspo  # verl's own names untouched
    with pytest.raises(ValueError, match="cancel_dfpo needs the group id .* outside ppo_loss"):
        verl_core.get_policy_loss_fn("cancel_dfpo")(**b.kwargs(config=config))
    loss, _ = verl_core.get_policy_loss_fn("cancel_dfpo")(**b.kwargs(config=config, group_ids=b.group_ids))
    assert torch.isfinite(loss)


def test_plugin_wraps_ppo_loss_and_assert_active_says_so(verl_core, monkeypatch):
    """The group-aware ppo_loss is what verl's workers bind; assert_active fails loudly without it."""
    import importlib

    from losses import verl_plugin

    home = importlib.import_module("verl.workers.utils.losses")
    workers = importlib.import_module("verl.workers.engine_workers")
    assert getattr(home.ppo_loss, "__cancelctl_group_aware__", False)
    assert workers.ppo_loss is home.ppo_loss
    verl_plugin.assert_active()
    monkeypatch.setattr(home, "ppo_loss", home.ppo_loss.__wrapped__)
    monkeypatch.setattr(workers, "ppo_loss", home.ppo_loss)
    with pytest.raises(verl_plugin.PluginNotActive, match="ppo_loss is not wrapped .* fix:"):
        verl_plugin.assert_active()
    b = make_batch()
    with pytest.raises(RuntimeError, match="group-aware ppo_loss is not installed .* fix:"):
        verl_core.get_policy_loss_fn("cancel_grpo")(**b.kwargs(config=actor_config({})))
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "none")
    with pytest.raises(verl_plugin.PluginNotActive, match="VERL_USE_EXTERNAL_PLUGINS='none'; fix"):
        verl_plugin.assert_active()


def test_the_split_group_fix_names_the_overrides_render_writes_for_dfpo(verl_core):
    """`whole_group_fix` names cancelctl's trainer, its query_preserved order and actor.shuffle off as
    render writes them for a dfpo run (the golden command), and a micro-batch of whole groups."""
    from project_paths import ROOT

    from losses.verl_adapter import WHOLE_GROUP_OVERRIDES, whole_group_fix

    golden = (ROOT / "tests/backends/verl/golden/group-size__dfpo-min-replace-G=8-s0.txt").read_text().lower()
    assert all(override.lower() in golden.splitlines() for override in WHOLE_GROUP_OVERRIDES)
    fixed = whole_group_fix(actor_config({}, ppo_micro_batch_size_per_gpu=6), 4)
    assert fixed.startswith("run verl with " + " ".join(WHOLE_GROUP_OVERRIDES))
    assert "ppo_micro_batch_size_per_gpu=8 (rows, a multiple of G=4)" in fixed
    dynamic = whole_group_fix(actor_config({}, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=64), 4)
    assert "ppo_max_token_len_per_gpu >= G=4 x (prompt + response)" in dynamic and "micro_batch_size" not in dynamic


def test_plugin_applies_the_wrappers_set_in_policy_loss(verl_core):
    from losses.verl_plugin import _noise_generators

    b = make_batch(spread=0.1)
    plain = actor_config({})
    fn = verl_core.get_policy_loss_fn("cancel_grpo")
    config = actor_config(
        {}, policy_loss=policy_loss_config(loss_mode="cancel_grpo", inject_delta=3.0, probe="positive_only")
    )
    expected, _ = losses.inject_delta(losses.positive_only(losses.grpo), delta=3.0)(**b.kwargs(config=plain))
    got, _ = fn(**b.kwargs(config=config))
    assert got.item() == expected.item() != fn(**b.kwargs(config=plain))[0].item()

    _noise_generators.clear()
    noisy = actor_config(
        {}, policy_loss=policy_loss_config(loss_mode="cancel_grpo", inject_noise_sigma=0.2, inject_noise_seed=5)
    )
    first = [fn(**b.kwargs(config=noisy))[0].item() for _ in range(2)]
    _noise_generators.clear()
    again = [fn(**b.kwargs(config=noisy))[0].item() for _ in range(2)]
    assert first == again and first[0] != first[1]  # reproducible per seed, fresh per micro-batch
    with pytest.raises(ValueError, match="policy_loss.probe='both'"):
        fn(**b.kwargs(config=actor_config({}, policy_loss=policy_loss_config(probe="both"))))


def ppo_loss_inputs(seed: int = 0):
    """A micro-batch as verl's engine hands it to `ppo_loss`: padded prompts/responses, a flat
    (unpadded) model output whose response log-probs sit one position left of each token."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    g = torch.Generator().manual_seed(seed)
    n, p, t = 6, 3, 7
    resp_len = torch.randint(1, t + 1, (n,), generator=g)
    response_mask = (torch.arange(t)[None] < resp_len[:, None]).float()
    old = -torch.rand(n, t, generator=g)
    new = old + 0.5 * torch.randn(n, t, generator=g)
    flat = torch.cat(
        [torch.cat([torch.zeros(p - 1), new[i, : int(resp_len[i])], torch.zeros(1)]) for i in range(n)]
    ).requires_grad_(True)
    data = TensorDict(
        {
            "prompts": torch.ones(n, p, dtype=torch.long),
            "responses": torch.ones(n, t, dtype=torch.long),
            "attention_mask": torch.cat([torch.ones(n, p), response_mask], 1).long(),
            "response_mask": response_mask,
            "old_log_probs": old,
            "advantages": torch.randn(n, generator=g)[:, None].expand(n, t).contiguous(),
        },
        batch_size=[n],
    )
    tu.assign_non_tensor(data, dp_size=2, batch_num_tokens=int(response_mask.sum()) * 3, global_batch_size=4 * n)
    return flat, data


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ours, theirs", [("cancel_grpo", "vanilla"), ("cancel_gspo", "gspo")])
def test_registered_losses_inside_verl_ppo_loss(verl_core, ours, theirs, mode):
    """Through verl's own `ppo_loss` (global_batch_info filled by it, dp_size 2): same loss and
    gradient on the flat model output as verl's built-in loss."""
    from verl.workers.config.actor import PolicyLossConfig
    from verl.workers.utils.losses import ppo_loss

    results = []
    for loss_mode in (ours, theirs):
        flat, data = ppo_loss_inputs()
        config = actor_config(
            {}, loss_agg_mode=mode, loss_scale_factor=16, policy_loss=PolicyLossConfig(loss_mode=loss_mode)
        )
        loss, _ = ppo_loss(config, {"log_probs": flat}, data)
        assert config.global_batch_info["dp_size"] == 2  # ppo_loss did fill it
        results.append((loss, grad_of(loss, flat)))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="cancel_dfpo needs the group id"):
        flat, data = ppo_loss_inputs()
        ppo_loss(actor_config({}, policy_loss=PolicyLossConfig(loss_mode="cancel_dfpo")), {"log_probs": flat}, data)
