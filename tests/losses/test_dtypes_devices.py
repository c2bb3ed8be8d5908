"""bf16 inputs and devices: group math runs in fp32/fp64 whatever the input dtype."""

from __future__ import annotations

import pytest
import torch
from loss_helpers import DEVICES, grad_of, make_batch

import losses

DFPO_VARIANTS = [{"transform": t} for t in losses.TRANSFORMS] + [{"scale": 0.5}, {"stop_grad": False}]


def cases():
    for name in losses.names():
        for options in DFPO_VARIANTS if name == "dfpo" else [{}]:
            yield pytest.param(name, options, id=name + "".join(f"-{k}={v}" for k, v in options.items()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, options", list(cases()))
def test_bf16_inputs_match_fp32(name, options, device):
    config = losses.LossConfig(policy_loss=losses.PolicyLossOptions(**options))
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        b = make_batch(groups=4, group_size=4, tokens=32, seed=1, spread=0.1, device=device)
        # the same bf16-representable numbers in both runs, so only the arithmetic differs
        old, new = (t.detach().to(torch.bfloat16).to(dtype) for t in (b.old_log_prob, b.log_prob))
        new.requires_grad_(True)
        adv = b.advantages.to(torch.bfloat16).to(dtype)
        loss, metrics = losses.get(name)(
            old_log_prob=old,
            log_prob=new,
            advantages=adv,
            response_mask=b.response_mask,
            config=config,
            group_ids=b.group_ids,
        )
        grad = grad_of(loss, new)
        assert grad.dtype == dtype and grad.device.type == device
        assert loss.dtype == torch.float32  # computed in fp32 even for bf16 inputs
        results[dtype] = (loss.detach(), grad.float(), metrics)
    (l32, g32, m32), (l16, g16, m16) = results[torch.float32], results[torch.bfloat16]
    torch.testing.assert_close(l16, l32, rtol=0, atol=1e-6)
    torch.testing.assert_close(g16, g32, rtol=1e-2, atol=1e-6)  # bf16 rounding of the gradient itself
    assert m16.keys() == m32.keys()


@pytest.mark.parametrize("device", DEVICES)
def test_wrappers_and_transforms_on_device(device):
    b = make_batch(device=device)
    gen = torch.Generator().manual_seed(0)
    fn = losses.tis(losses.inject_noise(losses.get("dfpo"), sigma=0.2, generator=gen), cap=2.0)
    loss, metrics = fn(**b.kwargs(group_ids=b.group_ids, rollout_log_prob=b.old_log_prob - 0.1))
    assert loss.device.type == device and torch.isfinite(grad_of(loss, b.log_prob)).all()
    for name in losses.TRANSFORMS:
        out = losses.transform(name, torch.rand(16, device=device) + 0.5, b.row_adv, b.group_ids)
        assert out.device.type == device
