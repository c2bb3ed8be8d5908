"""agg_loss modes written out by hand (bitwise parity with verl's agg_loss is in test_verl.py)."""

from __future__ import annotations

import pytest
import torch

import losses
from losses.aggregation import agg_loss, aggregate


@pytest.fixture
def mat_mask():
    g = torch.Generator().manual_seed(0)
    mat = torch.randn(5, 7, generator=g, dtype=torch.float64)
    lengths = torch.tensor([7, 3, 0, 1, 5])  # row 2 fully masked: excluded from seq means
    mask = torch.arange(7)[None, :] < lengths[:, None]
    mat[~mask] = 1e6  # padding garbage must not leak
    return mat, mask, lengths


def test_local_modes(mat_mask):
    mat, mask, lengths = mat_mask
    clean = torch.where(mask, mat, 0.0)
    row_sum = clean.sum(-1)
    nonempty = lengths > 0
    assert agg_loss(mat, mask, "token-mean").item() == pytest.approx(clean.sum().item() / lengths.sum().item())
    assert agg_loss(mat, mask, "token-sum").item() == pytest.approx(clean.sum().item())
    assert agg_loss(mat, mask, "seq-mean-token-sum").item() == pytest.approx(row_sum[nonempty].mean().item())
    assert agg_loss(mat, mask, "seq-mean-token-sum-norm").item() == pytest.approx(row_sum[nonempty].mean().item() / 7)
    per_row_mean = row_sum[nonempty] / lengths[nonempty]
    assert agg_loss(mat, mask, "seq-mean-token-mean").item() == pytest.approx(per_row_mean.mean().item())


def test_token_modes_ignore_nan_padding(mat_mask):
    """As verl: the token modes mask with where() first; the seq modes multiply by the mask."""
    mat, mask, _ = mat_mask
    with_nan = torch.where(mask, mat, float("nan"))
    for mode in ("token-mean", "token-sum"):
        assert agg_loss(with_nan, mask, mode).item() == agg_loss(mat, mask, mode).item()


def test_global_batch_info_sets_the_denominators(mat_mask):
    mat, mask, lengths = mat_mask
    clean = torch.where(mask, mat, 0.0)
    info = {"dp_size": 4, "batch_num_tokens": 100, "global_batch_size": 32, "loss_scale_factor": 2.5}
    cfg = losses.LossConfig(global_batch_info=info)
    assert aggregate(mat, mask, "token-mean", cfg).item() == pytest.approx(clean.sum().item() / 100 * 4)
    assert aggregate(mat, mask, "token-sum", cfg).item() == pytest.approx(clean.sum().item() * 4)
    assert aggregate(mat, mask, "seq-mean-token-sum", cfg).item() == pytest.approx(clean.sum().item() / 32 * 4)
    assert aggregate(mat, mask, "seq-mean-token-sum-norm", cfg).item() == pytest.approx(
        clean.sum().item() / 32 * 4 / 2.5
    )
    nonempty = lengths > 0
    seq = (clean.sum(-1)[nonempty] / lengths[nonempty]).sum()
    assert aggregate(mat, mask, "seq-mean-token-mean", cfg).item() == pytest.approx(seq.item() / 32 * 4)


def test_loss_scale_factor_attribute_used_when_info_lacks_it(mat_mask):
    """verl's ppo_loss copies config.loss_scale_factor into global_batch_info; off verl we read it."""
    mat, mask, _ = mat_mask
    via_attr = aggregate(mat, mask, "seq-mean-token-sum-norm", losses.LossConfig(loss_scale_factor=3.0))
    via_info = aggregate(
        mat, mask, "seq-mean-token-sum-norm", losses.LossConfig(global_batch_info={"loss_scale_factor": 3.0})
    )
    assert via_attr.item() == via_info.item() == pytest.approx(agg_loss(mat, mask, "seq-mean-token-sum").item() / 3.0)


def test_errors(mat_mask):
    mat, mask, _ = mat_mask
    with pytest.raises(ValueError, match="invalid loss_agg_mode 'mean'"):
        agg_loss(mat, mask, "mean")
    with pytest.raises(ValueError, match="batch_num_tokens is required"):
        agg_loss(mat, mask, "token-mean", dp_size=2)
    with pytest.raises(ValueError, match="global_batch_size is required"):
        agg_loss(mat, mask, "seq-mean-token-mean", dp_size=2)
