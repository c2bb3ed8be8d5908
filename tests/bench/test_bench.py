"""The loss benchmark library function (figures themselves are printed, not asserted)."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

import losses
from cancelctl.bench.losses import format_loss_benchmark, loss_benchmark_table, run_loss_benchmark
from cancelctl.cli import app
from cancelctl.errors import ArgumentError


def test_run_loss_benchmark_reports_every_loss_variant_and_transform():
    rows = run_loss_benchmark(rows=16, tokens=32, group=4, repeats=2, include_verl=False, transform_rows=2000)
    by_name = {r["name"]: r for r in rows}
    assert by_name["grpo"]["ratio"] == 1.0 and by_name["grpo"]["target"] is None
    for name in (
        "dapo",
        "gspo",
        "grpo_symclip",
        "dfpo(ablation scale=0.5, no transform)",
        "dfpo(min_replace, ablation stop_grad=False)",
        *(f"dfpo(transform={t})" for t in losses.TRANSFORMS),
    ):
        assert by_name[name]["section"] == "loss" and by_name[name]["target"] == 1.15 and by_name[name]["ratio"] > 0
    for name in losses.TRANSFORMS:
        assert by_name[f"{name}: 1000 / 10 groups"]["target"] == 1.5
    assert not any(r["section"] == "verl" for r in rows)
    text = format_loss_benchmark(rows)
    assert "dfpo(transform=pos_orth_qp)" in text and "pos_orth_qp: 1000 / 10 groups" in text
    for name in ("tis(grpo)", "inject_delta(grpo)", "positive_only(grpo)"):
        assert by_name[name]["section"] == "wrapper" and by_name[name]["target"] == 1.15
    draw = by_name["inject_noise: its draw alone"]  # printed beside inject_noise without a target of its own
    assert draw["section"] == "wrapper" and draw["target"] is None and draw["ok"] is None and draw["ratio"] > 0
    # inject_noise may cost the wrappers' 1.15× plus its seeded draw, measured in the same run
    assert by_name["inject_noise(grpo)"]["target"] == pytest.approx(1.15 + draw["ratio"])
    table = loss_benchmark_table(rows)
    assert table.row_count == len(rows)
    assert "dfpo(min_replace, ablation stop_grad=False)" in list(table.columns[1].cells)  # labels survive rich
    with pytest.raises(ArgumentError, match="multiple of --group"):
        run_loss_benchmark(rows=10, group=4)


# arguments it cannot benchmark: exit 2 naming the option (no timing asserts here)
@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--tokens", "-1"], "--tokens"),
        (["--tokens", "0"], "--tokens"),
        (["--group", "0"], "--group"),
        (["--rows", "0"], "--rows"),
        (["--rows", "4"], "--rows"),  # fewer rows than one group
        (["--repeats", "0"], "--repeats"),
        (["--device", "cuda"], "--device"),
        (["--device", "cuda:7"], "--device"),
        (["--device", "tpu"], "--device"),
    ],
)
def test_bad_benchmark_arguments_exit_2_naming_the_option(args, named, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same answer on a GPU machine
    result = CliRunner().invoke(app, ["bench", "losses", "--no-verl", *args])
    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # typer's exit 2, not an exception from the benchmark
