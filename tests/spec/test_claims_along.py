"""Trend claims (`along:` a grid axis): a claim whose axis cannot carry a slope is refused with one
error at the claim's `axis:` line; the claim's other fields are checked like any claim's."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cancelctl.errors import SpecError
from cancelctl.spec.claims import ClaimSpec
from cancelctl.spec.expand import load_sweep

SWEEP = """\
name: t
base:
  rollout:
    G: 4
arms:
  a: {}
  b:
    algorithm: {lr: 1.0e-3}
grid:
  rollout.G: [2, 4, 8]
claims:
  - id: b-grows
    source: "[D] Table 4"
    statement: b's gain over a grows with G
    metric: {kind: final}
    direction: higher
    arm: b
    versus: a
    along:
      axis: rollout.G
      scale: log
"""
AXIS_LINE = 20


def axis_line(text: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.strip().startswith("axis:"))


def issue_of(write_yaml, text):
    with pytest.raises(SpecError) as exc:
        load_sweep(write_yaml(text))
    [issue] = exc.value.issues
    assert issue.location.line == axis_line(text) or issue.path != "claims[0].along.axis"
    return issue


def test_a_trend_claim_loads(write_yaml):
    [claim] = load_sweep(write_yaml(SWEEP)).spec.claims
    assert (claim.along.axis, claim.along.scale) == ("rollout.G", "log")
    two = load_sweep(write_yaml(SWEEP.replace("[2, 4, 8]", "[4, 8]")))  # two values: a difference of effects
    assert two.spec.claims[0].along.axis == "rollout.G"
    assert ClaimSpec.model_validate(
        dict(id="c", source="s", statement="x", metric={"kind": "final"}, direction="higher", arm="b", versus="a",
             along={"axis": "rollout.G"})
    ).along.scale == "linear"


@pytest.mark.parametrize("replace,message", [
    (("axis: rollout.G", "axis: rollout.g"), "along.axis 'rollout.g' is not a grid axis of this sweep (grid: rollout.G)"),
    (("grid:\n  rollout.G: [2, 4, 8]", "grid:\n  rollout.G: [4]"), "has 1 distinct value: a slope needs at least 2"),
    (("grid:\n  rollout.G: [2, 4, 8]", "grid:\n  rollout.G: [4, 4]"), "has 1 distinct value"),
    (("grid:\n  rollout.G: [2, 4, 8]", "grid:\n  rollout.temperature: [0.5, 1.0]"), "is not a grid axis"),
    (("axis: rollout.G\n", "axis: rollout.temperature\n"), "is not a grid axis of this sweep (grid: rollout.G)"),
])
def test_a_bad_axis_is_one_error_at_the_axis_line(write_yaml, replace, message):
    issue = issue_of(write_yaml, SWEEP.replace(*replace))
    assert issue.location.line == AXIS_LINE and issue.path == "claims[0].along.axis"
    assert "claim 'b-grows'" in issue.message and message in issue.message
    assert str(issue).startswith(f"{issue.location.file}:{AXIS_LINE}:")


def test_log_scale_needs_positive_values(write_yaml):
    text = SWEEP.replace("grid:\n  rollout.G: [2, 4, 8]", "grid:\n  algorithm.entropy_coef: [0.0, 0.01]")
    issue = issue_of(write_yaml, text.replace("axis: rollout.G", "axis: algorithm.entropy_coef"))
    assert issue.path == "claims[0].along.axis" and "has a value <= 0 (0.0): scale log" in issue.message
    linear = text.replace("axis: rollout.G", "axis: algorithm.entropy_coef").replace("scale: log", "scale: linear")
    assert load_sweep(write_yaml(linear)).spec.claims[0].along.scale == "linear"


def test_non_numeric_axis_values(write_yaml):
    text = SWEEP.replace("grid:\n  rollout.G: [2, 4, 8]", "grid:\n  rollout.G: [2, 4]\n  algorithm.loss: [gspo, dfpo]")
    issue = issue_of(write_yaml, text.replace("axis: rollout.G", "axis: algorithm.loss"))
    assert issue.path == "claims[0].along.axis" and "values that are not numbers" in issue.message


def test_a_zip_axis_is_refused(write_yaml):
    text = SWEEP.replace("grid:\n  rollout.G: [2, 4, 8]",
                         "zip:\n  rollout.G: [4, 8]\n  budget.prompts_per_step: [16, 8]")
    issue = issue_of(write_yaml, text)
    assert issue.path == "claims[0].along.axis" and "is a zip axis" in issue.message


def test_a_misspelt_scale_points_at_its_line(write_yaml):
    issue = issue_of(write_yaml, SWEEP.replace("scale: log", "scale: log2"))
    assert issue.location.line == AXIS_LINE + 1 and issue.path == "claims[0].along.scale"


@pytest.mark.parametrize("kw,message", [
    ({"metric": {"kind": "collapse_rate", "rule": "entropy_collapse"}}, "kind 'collapse_rate' compares runs unpaired"),
    ({"direction": "similar", "margin_rel": 0.1}, "margin_rel is relative to a mean"),
    ({"along": {"axis": ""}}, "at least 1 character"),
    ({"along": {"axis": "rollout.G", "typo": 1}}, "Extra inputs"),
])
def test_inconsistent_trend_claims_are_rejected(kw, message):
    data = dict(id="c", source="s", statement="x", metric={"kind": "final"}, direction="higher", arm="b", versus="a",
                along={"axis": "rollout.G"})
    data.update(kw)
    with pytest.raises(ValidationError, match=message):
        ClaimSpec.model_validate(data)


@pytest.mark.parametrize("name", ["lab-demo", "group-size"])
def test_the_group_size_sweeps_carry_the_gain_along_g(name):
    from project_paths import EXPERIMENTS

    sweep = load_sweep(EXPERIMENTS / f"{name}.yaml")
    [trend] = [c for c in sweep.spec.claims if c.along is not None]
    assert (trend.arm, trend.versus, trend.direction) == ("dfpo-min-replace", "gspo", "higher")
    assert (trend.along.axis, trend.along.scale) == ("rollout.G", "log") and "Table 4" in trend.source
