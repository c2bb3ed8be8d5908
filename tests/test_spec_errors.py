"""Bad input: file:line:col, the dotted field path and what was expected; never a traceback."""

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from project_paths import EXPERIMENTS

from cancelctl.errors import SpecError
from cancelctl.plan import load_sweep

BASE = """\
name: t
base:
  rollout:
    G: 4
  algorithm:
    loss: grpo
arms:
  a:
    algorithm: {lr: 1.0e-3}
"""


def issues_of(path):
    with pytest.raises(SpecError) as exc:
        load_sweep(path)
    return exc.value.issues


def test_typo_key_points_at_line_and_lists_fields(write_yaml):
    [issue] = issues_of(write_yaml(BASE.replace("    loss: grpo", "    los: grpo")))
    assert (issue.location.line, issue.location.col) == (6, 5)
    assert issue.path == "base.algorithm.los"
    assert "unknown field 'los'" in issue.message and "loss" in issue.message


def test_wrong_type_points_at_value(write_yaml):
    [issue] = issues_of(write_yaml(BASE.replace("G: 4", "G: four")))
    assert issue.location.line == 4 and issue.path == "base.rollout.G"
    assert "integer" in issue.message and "'four'" in issue.message


def test_unknown_loss_in_arm_points_at_arm(write_yaml):
    [issue] = issues_of(write_yaml(BASE.replace("{lr: 1.0e-3}", "{lr: 1.0e-3, loss: gspoo}")))
    assert issue.location.line == 9 and issue.path == "arms.a.algorithm.loss"
    assert "'gspo'" in issue.message and "gspoo" in issue.message


def test_yaml_syntax_error_has_position(write_yaml):
    [issue] = issues_of(write_yaml(BASE + "  b: [unclosed\n"))
    assert issue.location.file.endswith("sweep.yaml") and issue.location.line >= 10
    assert "YAML" in issue.message


def test_duplicate_key_is_an_error(write_yaml):
    [issue] = issues_of(write_yaml(BASE.replace("    G: 4", "    G: 4\n    G: 8")))
    assert issue.location.line == 5 and "duplicate" in issue.message


def test_unknown_grid_path(write_yaml):
    [issue] = issues_of(write_yaml(BASE + "grid:\n  rollout.group: [2]\n"))
    assert issue.path == "grid.rollout.group" and issue.location.line == 11


def test_bad_grid_value_points_at_the_item(write_yaml):
    [issue] = issues_of(write_yaml(BASE + "grid:\n  rollout.G: [2, 1]\n"))
    assert issue.path == "grid.rollout.G[1]" and (issue.location.line, issue.location.col) == (11, 18)


def test_missing_file():
    [issue] = issues_of(EXPERIMENTS / "does-not-exist.yaml")
    assert "no such file" in issue.message


# --- property-based fuzz: malformed specs give SpecError, never another exception -------------

VALID = (EXPERIMENTS / "lab-demo.yaml").read_text().splitlines(keepends=True)
junk = st.text(alphabet=string.printable, max_size=12)


@st.composite
def mutated(draw):
    lines = list(VALID)
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["replace_value", "rename_key", "insert", "delete", "indent", "truncate"]))
        line = lines[i]
        if op == "replace_value" and ":" in line:
            key = line.split(":", 1)[0]
            lines[i] = f"{key}: {draw(junk)}\n"
        elif op == "rename_key" and ":" in line:
            indent = line[: len(line) - len(line.lstrip())]
            lines[i] = indent + draw(st.from_regex(r"[a-z_]{1,8}", fullmatch=True)) + ":" + line.split(":", 1)[1]
        elif op == "insert":
            lines.insert(i, draw(junk) + "\n")
        elif op == "delete":
            del lines[i]
        elif op == "indent":
            lines[i] = " " * draw(st.integers(0, 5)) + line.lstrip()
        elif op == "truncate":
            lines = lines[:i]
    return "".join(lines)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=mutated())
def test_fuzz_malformed_specs_never_traceback(tmp_path, text):
    path = tmp_path / "fuzz.yaml"
    path.write_text(text)
    try:
        load_sweep(path)
    except SpecError as exc:
        assert exc.issues
        for issue in exc.issues:
            assert issue.location is None or issue.location.line >= 1
            assert issue.message


def test_complex_mapping_key(write_yaml):
    [issue] = issues_of(write_yaml("name: t\n? {a: 1}\n: x\n"))
    assert "plain scalar" in issue.message and issue.location.line == 2


def test_unknown_yaml_tag(write_yaml):
    [issue] = issues_of(write_yaml("name: !0 t\n"))
    assert issue.location.line == 1 and "YAML" in issue.message
