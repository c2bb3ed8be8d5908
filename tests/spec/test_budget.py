"""`budget`: exactly one of steps / gen_tokens / update_steps, errors at their line, and the compute
each run plans and is matched on [D §4.5]."""

import pytest

from cancelctl.errors import SpecError, UnmatchedArmsError
from cancelctl.spec.expand import load_sweep
from cancelctl.spec.experiment import BudgetSpec
from cancelctl.spec.run import planned_compute, planned_steps

BASE = """\
name: b
base:
  backend: lab
  rollout: {G: 4, max_new_tokens: 16}
  algorithm: {mini_batch_size: 4}
  budget:
    prompts_per_step: 16
    BUDGET
arms:
  default: {}
  balanced:
    batching: {strategy: reward_balanced}
seeds: [0]
"""


def sweep_with(write_yaml, budget: str, arms: str | None = None, **kwargs):
    text = BASE.replace("BUDGET", budget)
    if arms is not None:
        text = text.split("arms:\n")[0] + "arms:\n" + arms + "seeds: [0]\n"
    return load_sweep(write_yaml(text), **kwargs)


def issue_of(write_yaml, budget: str, arms: str | None = None):
    with pytest.raises(SpecError) as exc:
        sweep_with(write_yaml, budget, arms)
    [issue] = exc.value.issues
    return issue


def test_steps_stays_the_default_and_a_step_budget_dumps_as_before():
    """Run ids hash the dump: a step budget must dump exactly the fields it always had."""
    assert BudgetSpec().model_dump() == {"steps": 100, "prompts_per_step": 16}
    assert BudgetSpec(steps=7, checkpoint_every=2).model_dump() == {"steps": 7, "prompts_per_step": 16, "checkpoint_every": 2}
    assert (BudgetSpec().axis, BudgetSpec().amount) == ("steps", 100)


@pytest.mark.parametrize("field", ["gen_tokens", "update_steps"])
def test_a_compute_budget_replaces_the_step_budget(field):
    budget = BudgetSpec.model_validate({field: 500})
    assert budget.steps is None and (budget.axis, budget.amount) == (field, 500)
    assert budget.model_dump() == {field: 500, "prompts_per_step": 16}


def test_two_budgets_are_refused_at_the_second_ones_line_naming_both(write_yaml):
    issue = issue_of(write_yaml, "steps: 200\n    gen_tokens: 90000")
    assert issue.path == "base.budget.gen_tokens" and issue.location.line == 9
    assert "exactly one of steps, gen_tokens, update_steps" in issue.message and "steps" in issue.message
    issue = issue_of(write_yaml, "gen_tokens: 90000\n    update_steps: 400")
    assert issue.path == "base.budget.update_steps" and issue.location.line == 9


def test_an_arm_switching_to_a_compute_budget_sets_steps_null(write_yaml):
    arms = "  default: {}\n  tokens:\n    budget: {gen_tokens: 90000}\n"
    issue = issue_of(write_yaml, "steps: 200", arms)
    assert issue.path == "arms.tokens.budget.gen_tokens" and issue.location.line == 12
    assert "`steps: null`" in issue.message
    fixed = sweep_with(write_yaml, "steps: 200", arms.replace("{gen_tokens", "{steps: null, gen_tokens"),
                       allow_unmatched=True)
    assert {r.arm: r.spec.budget.axis for r in fixed.runs} == {"default": "steps", "tokens": "gen_tokens"}


@pytest.mark.parametrize("budget, message", [
    ("steps: null", "budget needs one of steps, gen_tokens, update_steps"),
    ("gen_tokens: 0", "greater than or equal to 1"),
    ("update_steps: 1.5", "integer"),
])
def test_bad_budgets_point_at_their_line(write_yaml, budget, message):
    issue = issue_of(write_yaml, budget)
    assert issue.location.line in (6, 8) and message in issue.message


@pytest.mark.parametrize("written", ["gen_tokens: 75e3", "gen_tokens: 7.5e+4", "gen_tokens: 75000.0"])
def test_a_whole_number_in_scientific_notation_is_that_number(write_yaml, written):
    """YAML reads 75e3 as a float: a budget takes the whole number it names, with the run id of 75000."""
    run = sweep_with(write_yaml, written).runs[0]
    assert run.spec.budget.gen_tokens == 75_000 and type(run.spec.budget.gen_tokens) is int
    assert run.run_id == sweep_with(write_yaml, "gen_tokens: 75000").runs[0].run_id
    assert sweep_with(write_yaml, "steps: 1e2\n    checkpoint_every: 2.5e1").runs[0].spec.budget.checkpoint_every == 25


def test_a_fractional_number_in_scientific_notation_is_refused(write_yaml):
    issue = issue_of(write_yaml, "gen_tokens: 75.5e0")
    assert issue.path == "base.budget.gen_tokens" and issue.location.line == 8
    assert "fractional part" in issue.message and "(got 75.5)" in issue.message


def test_planned_compute_per_axis(write_yaml):
    steps, tokens, updates = (
        sweep_with(write_yaml, budget).runs[0].spec for budget in ("steps: 10", "gen_tokens: 90000", "update_steps: 41")
    )
    # 16 prompts x G 4 x 16 tokens a step at most; 4 mini-batches (optimizer steps) a step
    assert planned_compute(steps) == {"G": 4, "gen_tokens": 10 * 1024, "update_steps": 40}
    assert (planned_steps(tokens), planned_compute(tokens)) == (None, {"G": 4, "gen_tokens": 90000, "update_steps": None})
    assert (planned_steps(updates), planned_compute(updates)["update_steps"]) == (11, 44)  # the step reaching 41


def test_token_budget_arms_match_on_tokens_only(write_yaml):
    """reward_balanced does fewer updates for the same tokens: that is the point, not a mismatch."""
    sweep = sweep_with(write_yaml, "gen_tokens: 90000")
    assert not sweep.warnings and len(sweep.runs) == 2
    arms = "  default: {}\n  more:\n    budget: {gen_tokens: 99000}\n"
    with pytest.raises(UnmatchedArmsError, match="gen_tokens 90,000 vs 99,000"):
        sweep_with(write_yaml, "gen_tokens: 90000", arms)


def test_update_step_budget_arms_match_on_updates_only(write_yaml):
    """4 vs 2 mini-batches a step: 10 vs 20 steps, 40 optimizer steps each; tokens may differ."""
    arms = "  four: {}\n  two:\n    algorithm: {mini_batch_size: 8}\n"
    sweep = sweep_with(write_yaml, "update_steps: 40", arms)
    assert {r.arm: planned_steps(r.spec) for r in sweep.runs} == {"four": 10, "two": 20}
    arms = "  four: {}\n  two:\n    algorithm: {mini_batch_size: 8}\n    budget: {update_steps: 20}\n"
    with pytest.raises(UnmatchedArmsError, match="update_steps 40 vs 20"):
        sweep_with(write_yaml, "update_steps: 40", arms)


def test_arms_on_different_budget_axes_are_unmatched(write_yaml):
    arms = "  default: {}\n  tokens:\n    budget: {steps: null, gen_tokens: 10240}\n"
    with pytest.raises(UnmatchedArmsError, match="budget steps vs gen_tokens"):
        sweep_with(write_yaml, "steps: 10", arms)
