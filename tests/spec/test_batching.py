"""The mini-batch order of a run, one meaning on every backend (cancelctl.spec.batching)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cancelctl.cli import app
from cancelctl.spec.batching import minibatch_order, minibatch_order_note
from cancelctl.spec.experiment import ExperimentSpec

runner = CliRunner()


@pytest.mark.parametrize(
    ("loss", "strategy", "order", "note"),
    [
        ("grpo", "default", "default", "scattered"),
        ("grpo", "reward_balanced", "default", "scattered"),  # a sampler; the rows are then scattered
        ("grpo", "query_preserved", "query_preserved", "whole"),
        ("grpo", "sign_split", "sign_split", "by sign"),
        ("dfpo", "default", "query_preserved", "whole (dfpo)"),  # DFPO's s̃ needs whole groups
        ("dfpo", "reward_balanced", "query_preserved", "whole (dfpo)"),
        ("dfpo", "query_preserved", "query_preserved", "whole"),
    ],
)
def test_the_order_follows_the_strategy_and_the_loss(loss, strategy, order, note):
    spec = ExperimentSpec.model_validate({"algorithm": {"loss": loss}, "batching": {"strategy": strategy}})
    assert (minibatch_order(spec), minibatch_order_note(spec)) == (order, note)


def test_sign_split_with_a_group_transform_is_refused_on_every_backend_at_its_line(write_yaml):
    path = write_yaml("name: t\nbase:\n  batching: {strategy: sign_split}\narms:\n  d:\n    algorithm: {loss: dfpo}\n")
    result = runner.invoke(app, ["validate", "--skip-verl", str(path)])
    assert result.exit_code == 2
    assert f"{path}:" in result.output and "sign_split puts a group's" in " ".join(result.output.split())


def test_plan_shows_the_order_each_run_gets(write_yaml):
    path = write_yaml("name: t\narms:\n  d: {algorithm: {loss: dfpo}}\n  g: {algorithm: {loss: grpo}}\n")
    table = runner.invoke(app, ["plan", str(path)]).output
    assert "whole (dfpo)" in table and "scattered" in table
    import json

    rows = json.loads(runner.invoke(app, ["plan", str(path), "--json"]).output)["runs"]
    assert {r["arm"]: r["minibatch_order"] for r in rows} == {"d": "query_preserved", "g": "default"}
