"""`cancelctl bench losses`: arguments it cannot benchmark are refused with exit 2 (the timing
itself is exercised by benchmarks/, not here: no timing asserts in unit tests)."""

import pytest
import torch
from typer.testing import CliRunner

from cancelctl.cli import app

runner = CliRunner()


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
    result = runner.invoke(app, ["bench", "losses", "--no-verl", *args])
    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output and result.exception is None or isinstance(
        result.exception, SystemExit
    )
