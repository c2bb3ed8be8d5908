"""`claims:` in sweep files: validated with file/line errors that name the claim, shipped for the
papers' claims, and inert for planning (run ids do not depend on them)."""

from __future__ import annotations

import pytest
import yaml
from project_paths import EXPERIMENTS
from pydantic import ValidationError

from cancelctl.errors import SpecError
from cancelctl.spec.claims import ClaimSpec
from cancelctl.spec.expand import load_sweep

BASE = """\
name: t
base:
  rollout:
    G: 4
arms:
  a: {}
  b:
    algorithm: {lr: 1.0e-3}
claims:
  - id: b-better
    source: "[D] §4.5 P3"
    statement: b ends higher
    metric: {kind: final}
    direction: higher
    arm: b
    versus: a
"""

SHIPPED = {  # file -> claim sources it must carry (paper, section)
    "lab-demo": ["Prediction 1", "Prediction 2", "Prediction 3", "eq. 23", "eq. 24", "GRPO-fix", "Table 4"],
    "dfpo-vs-gspo": ["Prediction 1", "Prediction 2", "Prediction 3", "eq. 23", "eq. 24", "GRPO-fix", "Table 3"],
    "group-size": ["Prediction 3", "eq. 23", "Table 4 (Delta"],
    "delta-injection": ["[H] §4.4", "App. B.2", "eq. 23"],
    "variance-noise": ["[H] §5.1"],
    "clip-strength": ["[H] §4.3"],
    "batching": ["[C] §4", "Fig. 1(c)"],
    "lab-claims-mismatch": ["[H] §4.4", "App. B.2", "[H] §5.1", "[H] App. D"],
    "lab-claims-dfpo": ["Prediction 1", "Prediction 3", "eq. 23", "Corollary 3.2", "eq. 74"],
}
OUTCOME_CLAIMS = {  # file -> the outcome kinds its claims must include (the papers' collapse claims)
    "lab-claims-mismatch": {"collapse_rate", "time_to_collapse", "alert_order"},
    "lab-claims-dfpo": {"collapse_rate", "time_to_collapse"},
}


def issues_of(path):
    with pytest.raises(SpecError) as exc:
        load_sweep(path)
    return exc.value.issues


def test_claims_load_and_reference_arms(write_yaml):
    sweep = load_sweep(write_yaml(BASE))
    [claim] = sweep.spec.claims
    assert (claim.arm, claim.versus, claim.direction, claim.metric.resolved_key) == (
        "b", "a", "higher", "val-core/*/acc/mean_at_*"
    )


@pytest.mark.parametrize("field", ["arm", "versus"])
def test_unknown_arm_names_the_claim(write_yaml, field):
    text = BASE.replace(f"    {field}: {'b' if field == 'arm' else 'a'}\n", f"    {field}: c\n")
    [issue] = issues_of(write_yaml(text))
    assert issue.path == "claims" and issue.location.line == 9
    assert "claim 'b-better'" in issue.message and f"{field} 'c' is not an arm" in issue.message
    assert "arms: a, b" in issue.message


def test_bad_claim_field_points_at_its_line(write_yaml):
    [issue] = issues_of(write_yaml(BASE.replace("direction: higher", "direction: upward")))
    assert issue.location.line == 14 and issue.path == "claims[0].direction"
    assert "'not_higher'" in issue.message


def test_duplicate_claim_ids(write_yaml):
    block = BASE.split("claims:\n", 1)[1]
    [issue] = issues_of(write_yaml(BASE + block))
    assert "duplicate claim id 'b-better'" in issue.message


def make(**kw) -> ClaimSpec:
    data = dict(id="c", source="s", statement="x", metric={"kind": "final"}, direction="higher", arm="b", versus="a")
    data.update(kw)
    return ClaimSpec.model_validate(data)


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"direction": "not_higher"}, "needs exactly one of margin / margin_rel"),
        ({"direction": "similar", "margin": 0.1, "margin_rel": 0.1}, "needs exactly one of margin / margin_rel"),
        ({"margin": 0.1}, "margin applies to"),
        ({"versus": "b"}, "give metric.versus_key"),
        ({"metric": {"kind": "final", "kappa": 0.5}}, "metric.final.kappa\n  Extra inputs"),
        ({"metric": {"kind": "slope"}}, "metric.key is required"),
        ({"metric": {"kind": "jitter2", "compute": "updates"}}, "metric.jitter2.compute\n  Extra inputs"),
        ({"metric": {"kind": "asymptote", "kappa": 0.5}}, "metric.asymptote.kappa\n  Extra inputs"),
        ({"metric": {"kind": "efficiency", "window": 0.1}}, "metric.efficiency.window\n  Extra inputs"),
        # a field of another kind is refused even at that kind's default
        ({"metric": {"kind": "final", "window": 0.25}}, "metric.final.window\n  Extra inputs"),
        ({"metric": {"kind": "steps_to_kappa", "compute": "tokens"}}, "metric.steps_to_kappa.compute\n  Extra inputs"),
        ({"metric": {"kind": "asymptote", "rule": "entropy_collapse"}}, "metric.asymptote.rule\n  Extra inputs"),
        # strict like every other part of the spec: no coercion, no infinities
        ({"metric": {"kind": "steps_to_kappa", "smooth_window": True}}, "smooth_window\n  Input should be a valid integer"),
        ({"metric": {"kind": "steps_to_kappa", "kappa": float("inf")}}, "kappa\n  Input should be a finite number"),
        ({"metric": {"kind": "steps_to_kappa", "kappa": "0.5"}}, "kappa\n  Input should be a valid number"),
        ({"margin": "0.1", "direction": "similar"}, "margin\n  Input should be a valid number"),
        ({"metric": {"kind": "frist"}}, "does not match any of the expected tags"),
        ({"metric": {"kind": "final", "versus_key": "x"}}, "cannot be combined with a '*'"),
        ({"metric": {"kind": "mean", "key": "k", "typo": 1}}, "Extra inputs"),
    ],
)
def test_inconsistent_claims_are_rejected(kw, message):
    with pytest.raises(ValidationError, match=message.replace("*", r"\*").replace("(", r"\(")):
        make(**kw)


OUTCOME = {"kind": "collapse_rate", "rule": "entropy_collapse"}
ORDER = {"kind": "alert_order", "rule": ["entropy_collapse", "reward_collapse"], "first": "mismatch_growth"}


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"metric": {"kind": "collapse_rate"}}, "metric.collapse_rate.rule\n  Field required"),
        ({"metric": {**OUTCOME, "key": "actor/entropy"}}, "metric.collapse_rate.key\n  Extra inputs"),
        ({"metric": {**OUTCOME, "window": 0.1}}, "metric.collapse_rate.window\n  Extra inputs"),
        ({"metric": {**OUTCOME, "first": "mismatch_growth"}}, "metric.collapse_rate.first\n  Extra inputs"),
        ({"metric": {"kind": "mean", "key": "k", "rule": "entropy_collapse"}}, "metric.mean.rule\n  Extra inputs"),
        ({"metric": {"kind": "final", "event": "stop"}}, "metric.final.event\n  Extra inputs"),
        ({"metric": {**OUTCOME, "rule": []}}, "metric.collapse_rate.rule\n  Value should have at least 1 item"),
        ({"metric": OUTCOME, "direction": "similar", "margin": 0.1}, "takes direction higher or lower"),
        ({"metric": ORDER}, "drop versus"),
        ({"metric": {**ORDER, "first": "entropy_collapse"}, "versus": None}, "also in metric.rule"),
        ({"metric": {**ORDER, "event": "stop"}, "versus": None}, "metric.alert_order.event\n  Extra inputs"),
        ({"metric": {"kind": "alert_order", "rule": "entropy_collapse"}, "versus": None}, "metric.alert_order.first\n  Field required"),
        ({"metric": OUTCOME, "versus": None}, "versus is required"),
        ({"metric": OUTCOME, "arm": ["a", "b"]}, "a list of arms is for alert_order only"),
        ({"metric": {**OUTCOME, "rule": "entropy"}}, "Input should be 'mismatch_growth'"),
    ],
)
def test_inconsistent_outcome_claims_are_rejected(kw, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make(**kw)


def test_outcome_claims_read_one_rule_or_several():
    rate = make(metric={**OUTCOME, "event": "stop"})
    assert rate.metric.rules == ["entropy_collapse"] and rate.metric.label == "share of runs stopped by entropy_collapse"
    order = make(metric=ORDER, arm=["a", "b"], versus=None)
    assert order.arms == ["a", "b"] and order.metric.resolved_key == "entropy_collapse+reward_collapse"
    assert order.metric.label == "mismatch_growth alert before entropy_collapse or reward_collapse"
    time = make(metric={"kind": "time_to_collapse", "rule": "entropy_collapse"}, direction="lower")
    assert time.metric.label == "steps to the first entropy_collapse alert"


def test_a_misspelt_rule_points_at_its_line_and_names_the_rules(write_yaml):
    text = BASE.replace("metric: {kind: final}", "metric: {kind: collapse_rate, rule: [entropy_collapse, entropy]}")
    [issue] = issues_of(write_yaml(text))
    assert issue.location.line == 13 and issue.path == "claims[0].metric.rule[1]"
    assert "'entropy_collapse'" in issue.message and "'entropy'" in issue.message


def test_a_field_of_another_kind_points_at_its_line_and_names_the_kinds_fields(write_yaml):
    """`window` belongs to late_minus_early: on a `final` claim it is an unknown field, even at its
    default, and the screen names the fields `final` takes (no union tag in the path)."""
    [issue] = issues_of(write_yaml(BASE.replace("metric: {kind: final}", "metric: {kind: final, window: 0.25}")))
    assert issue.location.line == 13 and issue.path == "claims[0].metric.window"
    assert issue.message == "unknown field 'window'; expected one of: kind, key, versus_key"


def test_an_alert_order_arm_list_is_checked_against_the_arms(write_yaml):
    text = BASE.replace("metric: {kind: final}", "metric: {kind: alert_order, rule: entropy_collapse, first: pcc_drop}")
    text = text.replace("    arm: b\n    versus: a\n", "    arm: [b, c]\n")
    [issue] = issues_of(write_yaml(text))
    assert "claim 'b-better'" in issue.message and "arm 'c' is not an arm" in issue.message


def test_scaling_claims_fit_the_reward_on_a_compute_axis():
    """asymptote / efficiency: ScaleRL's A / B of the training reward by default, on tokens unless
    metric.compute says otherwise; any key (an eval benchmark) may be fitted."""
    a = make(metric={"kind": "asymptote"})
    assert a.metric.resolved_key == "critic/score/mean" and a.metric.compute == "tokens"
    assert a.metric.label == "asymptote A (fit on tokens) of critic/score/mean"
    b = make(metric={"kind": "efficiency", "key": "val-core/lab/acc/mean_at_4", "compute": "updates"},
             direction="similar", margin=0.2)
    assert b.metric.label == "efficiency B (fit on updates) of val-core/lab/acc/mean_at_4"
    with pytest.raises(ValidationError, match="metric.mean.compute\n  Extra inputs"):
        make(metric={"kind": "mean", "key": "k", "compute": "hours"})


def test_margin_claims_and_same_arm_with_versus_key_are_valid():
    assert make(direction="not_lower", margin=0.01).margin == 0.01
    flip = make(arm="a", versus="a", direction="similar", margin_rel=0.1,
                metric={"kind": "mean", "key": "cancel/flip_pos", "versus_key": "cancel/flip_neg"})
    assert flip.metric.label == "mean of cancel/flip_pos vs cancel/flip_neg"


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_files_carry_the_papers_claims(name):
    sweep = load_sweep(EXPERIMENTS / f"{name}.yaml")
    sources = " | ".join(c.source for c in sweep.spec.claims)
    for wanted in SHIPPED[name]:
        assert wanted in sources, f"{name}.yaml lacks a claim from {wanted}"


@pytest.mark.parametrize("name", sorted(OUTCOME_CLAIMS))
def test_shipped_lab_files_carry_the_collapse_claims(name):
    kinds = {c.metric.kind for c in load_sweep(EXPERIMENTS / f"{name}.yaml").spec.claims}
    assert kinds >= OUTCOME_CLAIMS[name]


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_claims_do_not_change_the_runs(name, write_yaml):
    path = EXPERIMENTS / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    data.pop("claims")
    with_claims = load_sweep(path)
    without = load_sweep(write_yaml(yaml.safe_dump(data, sort_keys=False)))
    assert [(r.name, r.run_id) for r in with_claims.runs] == [(r.name, r.run_id) for r in without.runs]


OFF_RULE = """\
name: t
base:
  rollout:
    G: 4
  lab: {d_model: 16, n_layers: 1, n_heads: 2}
arms:
  a: {}
  b:
    algorithm: {lr: 1.0e-3}
    monitor: {entropy_collapse: {action: off}}
claims:
  - id: b-collapses-less
    source: "[D]"
    statement: b collapses less often
    metric: {kind: collapse_rate, rule: entropy_collapse}
    direction: lower
    arm: b
    versus: a
  - id: b-better
    source: "[D]"
    statement: b ends higher
    metric: {kind: final}
    direction: higher
    arm: b
    versus: a
"""


def test_validate_warns_about_a_collapse_claim_on_a_rule_that_is_off(write_yaml):
    """A collapse claim on a rule an arm turned off once read "0/4 vs 0/4, inconclusive"; it cannot
    be judged, and `validate` says so (the file stays valid: the other claims and the runs are fine)."""
    from typer.testing import CliRunner

    from cancelctl.backends.validate import validate_files
    from cancelctl.cli import app
    from cancelctl.spec.claims import claims_rule_warnings, rules_off_by_arm

    path = write_yaml(OFF_RULE)
    sweep = load_sweep(path)
    off = rules_off_by_arm((run.arm, run.spec.monitor) for run in sweep.runs)
    assert off == {"a": set(), "b": {"entropy_collapse"}}
    warning = ("claim 'b-collapses-less' cannot be judged: rule entropy_collapse is off in arm 'b' "
               "(monitor.entropy_collapse.action: off): it never alerts there")
    assert claims_rule_warnings(sweep.spec.claims, off) == [warning]
    [item] = validate_files([path], compose_verl=False, check_data=False).files
    assert item.ok and f"warning: {warning}" in item.note
    result = CliRunner().invoke(app, ["validate", "--skip-verl", "--skip-data", str(path)])
    assert result.exit_code == 0 and "cannot be judged: rule entropy_collapse is off in arm 'b'" in result.output
