"""Bad input: file:line:col, the dotted field path and what was expected; never a traceback."""

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from project_paths import EXPERIMENTS

from cancelctl.errors import SpecError
from cancelctl.spec.expand import load_sweep

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


def test_a_directory_is_said_to_be_one_with_the_sweep_files_in_it(tmp_path):
    [issue] = issues_of(EXPERIMENTS)
    assert issue.message.startswith(f"{EXPERIMENTS}: a directory, not a sweep file: pass a sweep file in it (")
    assert "batching.yaml" in issue.message and "no such file" not in issue.message
    [issue] = issues_of(tmp_path)
    assert issue.message == f"{tmp_path}: a directory, not a sweep file: pass a sweep file (.yaml)"


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


# --- encodings, limits, coercion, merge keys, cross-field errors with a field path -------


def write_bytes(tmp_path, raw: bytes):
    path = tmp_path / "sweep.yaml"
    path.write_bytes(raw)
    return path


def test_latin1_file_names_the_byte_and_the_fix(tmp_path):
    [issue] = issues_of(write_bytes(tmp_path, BASE.replace("arms:", "# caf\xe9\narms:").encode("latin-1")))
    assert (issue.location.line, issue.location.col) == (7, 6)
    assert "not a UTF-8 text file (byte 0xe9)" in issue.message and "save it as UTF-8" in issue.message


def test_binary_file_is_refused(tmp_path):
    [issue] = issues_of(write_bytes(tmp_path, b"name: t\n\x00\x01\x02"))
    assert issue.location.line == 2 and "NUL" in issue.message


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig"])
def test_utf16_and_bom_files_load_like_utf8(tmp_path, encoding):
    sweep = load_sweep(write_bytes(tmp_path, BASE.encode(encoding)))
    assert sweep.spec.name == "t"


def test_huge_file_is_refused_before_parsing(tmp_path):
    [issue] = issues_of(write_bytes(tmp_path, BASE.encode() + b"#" * (1 << 20)))
    assert "larger than 1024 KiB" in issue.message


def test_alias_bomb_is_bounded(tmp_path):
    levels = "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 9))
    [issue] = issues_of(write_bytes(tmp_path, (BASE + "x0: &l0 [1]\n" + levels).encode()))
    assert "aliases expanding without bound" in issue.message


def test_huge_grid_is_refused_before_expansion(write_yaml):
    grid = "grid:\n" + "".join(f"  algorithm.lr{i}: [{', '.join(['1.0e-3'] * 10)}]\n" for i in range(6))
    [issue] = issues_of(write_yaml(BASE + grid.replace("algorithm.lr", "x")))
    assert "expands to 1,000,000 runs" in issue.message and "limit is 20,000" in issue.message


@pytest.mark.parametrize(
    ("old", "new", "path", "expected"),
    [
        ("G: 4", 'G: "4"', "base.rollout.G", "valid integer"),
        ("loss: grpo", "loss: grpo\n  budget: {steps: true}", "base.budget.steps", "valid integer"),
        ("{lr: 1.0e-3}", "{lr: .inf}", "arms.a.algorithm.lr", "finite number"),
        ("a:\n", "a:\n    seed: 18446744073709551616\n", "arms.a.seed", "less than or equal"),
    ],
)
def test_no_coercion_and_no_out_of_range_numbers(write_yaml, old, new, path, expected):
    [issue] = issues_of(write_yaml(BASE.replace(old, new)))
    assert issue.path == path and expected in issue.message, issue


def test_seed_beyond_63_bits_in_the_seed_list(write_yaml):
    [issue] = issues_of(write_yaml(BASE + "seeds: [0, 9223372036854775808]\n"))
    assert issue.path == "seeds[1]" and issue.location.line == 10


def test_a_key_may_override_one_merged_with_merge_key(write_yaml):
    text = BASE.replace("arms:\n", "arms:\n  b:\n    <<: &shared {algorithm: {lr: 1.0e-3}}\n    rollout: {G: 4}\n")
    text = text.replace("  a:\n    algorithm: {lr: 1.0e-3}\n", "  a:\n    <<: *shared\n    algorithm: {lr: 2.0e-3}\n")
    sweep = load_sweep(write_yaml(text))
    lrs = {run.arm: run.spec.algorithm.lr for run in sweep.runs}
    assert lrs == {"a": 2.0e-3, "b": 1.0e-3}


@pytest.mark.parametrize(
    ("tail", "path", "line", "message"),
    [
        ("baseline: nope\n", "baseline", 10, "baseline 'nope' is not an arm"),
        ("zip:\n  rollout.G: [2, 4]\n  budget.steps: [5]\n", "zip", 10, "equal lengths"),
        ("seeds: [1, 1]\n", "seeds", 10, "duplicates"),
    ],
)
def test_cross_field_errors_point_at_their_field(write_yaml, tail, path, line, message):
    [issue] = issues_of(write_yaml(BASE + tail))
    assert issue.path == path and issue.location.line == line and message in issue.message


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=st.one_of(
        st.binary(max_size=400),
        st.text(max_size=200).map(lambda t: t.encode("utf-16")),
        st.text(alphabet=st.characters(max_codepoint=255), max_size=200).map(lambda t: t.encode("latin-1")),
        st.builds(
            lambda prefix, text: (prefix + text).encode("utf-8"),
            st.sampled_from(["", "name: t\n", "name: t\nbase: ", "a: &a ", "<<: ", "? ", "!!python/object "]),
            st.text(alphabet=string.printable + "&*!|>%@`{}[]", max_size=200),
        ),
    )
)
def test_fuzz_random_bytes_and_encodings_never_traceback(tmp_path, raw):
    path = tmp_path / "fuzz.yaml"
    path.write_bytes(raw)
    try:
        load_sweep(path)
    except SpecError as exc:
        assert exc.issues and all(issue.message for issue in exc.issues)


def test_a_cpu_device_with_gpus_and_a_reward_function_that_is_no_python_file_point_at_their_lines(write_yaml):
    text = BASE.replace("  rollout:\n", "  cluster: {device: cpu, gpus_per_node: 8}\n  rollout:\n")
    [issue] = issues_of(write_yaml(text))
    assert issue.location.line == 3 and issue.path.startswith("base.cluster")
    assert "requests no GPU" in issue.message
    text = BASE.replace("  rollout:\n", "  data: {reward_function: 'rewards.txt'}\n  rollout:\n")
    [issue] = issues_of(write_yaml(text))
    assert issue.location.line == 3 and issue.path == "base.data.reward_function" and "FILE.py" in issue.message

# ---------------------------------------------------------------- YAML 1.1 booleans


def _word_fields(model, prefix=""):
    """(dotted path, its YAML boolean words) of every words field of the spec that a word YAML reads
    as a boolean can reach (e.g. monitor rules' action: warn | stop | off)."""
    from pydantic import BaseModel

    from cancelctl.spec.strict import YAML_FALSE_WORDS, YAML_TRUE_WORDS, _word_choices

    out = []
    for name, info in model.model_fields.items():
        words, takes_bool = _word_choices(info.annotation)
        boolish = [w for w in words if w.lower() in YAML_TRUE_WORDS + YAML_FALSE_WORDS]
        if boolish and not takes_bool:
            out.append((prefix + name, boolish))
        for sub in (info.annotation, *getattr(info.annotation, "__args__", ())):
            if isinstance(sub, type) and issubclass(sub, BaseModel):
                out.extend(_word_fields(sub, f"{prefix}{name}."))
    return out


def test_every_words_field_takes_the_word_yaml_read_as_a_boolean(write_yaml):
    from cancelctl.spec.experiment import ExperimentSpec

    fields = _word_fields(ExperimentSpec)
    assert len(fields) >= 5  # the monitor rules' actions today
    for dotted, words in fields:
        *parents, leaf = dotted.split(".")
        for word in words:
            block = "".join(f"\n{'  ' * (i + 1)}{p}:" for i, p in enumerate(parents))
            path = write_yaml(f"name: t\nbase:{block} {{{leaf}: {word}}}\narms:\n  a: {{}}\n")
            [run] = load_sweep(path).runs
            value = run.spec
            for key in dotted.split("."):
                value = getattr(value, key)
            assert value == word, (dotted, word)


def test_readme_monitor_action_off_unquoted(write_yaml):
    path = write_yaml("name: t\nbase:\n  monitor:\n    reward_collapse:\n      action: off\narms:\n  a: {}\n"
                      "  b:\n    monitor: {pcc_drop: {action: on}}\n")
    with pytest.raises(SpecError) as exc:
        load_sweep(path)
    [issue] = exc.value.issues  # `on` is no choice of warn | stop | off: the message says to quote
    assert issue.path == "arms.b.monitor.pcc_drop.action" and "quote the word" in issue.message
    sweep = load_sweep(write_yaml("name: t\nbase:\n  monitor:\n    reward_collapse:\n      action: off\narms:\n  a: {}\n"))
    assert sweep.runs[0].spec.monitor.reward_collapse.action == "off"


@pytest.mark.parametrize("word", ["off", "'off'", '"off"'])
def test_a_monitor_rule_given_a_word_says_to_write_its_action_and_that_works(write_yaml, word):
    """`entropy_collapse: off` (quoted or not) is refused: the hint is the one that works, not 'quote it'."""
    [issue] = issues_of(write_yaml(f"name: t\nbase:\n  monitor:\n    entropy_collapse: {word}\narms:\n  a: {{}}\n"))
    assert issue.path == "base.monitor.entropy_collapse" and "quote the word" not in issue.message
    assert "a monitor rule is a section, not a word (quoted or not): write `entropy_collapse: {action: off}`" in issue.message
    fixed = "name: t\nbase:\n  monitor:\n    entropy_collapse: {action: off}\narms:\n  a: {}\n"
    assert load_sweep(write_yaml(fixed)).runs[0].spec.monitor.entropy_collapse.action == "off"


def test_a_section_given_a_word_says_it_is_a_section(write_yaml):
    [issue] = issues_of(write_yaml("name: t\nbase:\n  budget: off\narms:\n  a: {}\n"))
    assert issue.path == "base.budget" and "budget is a section" in issue.message and "quote the word" not in issue.message


def test_a_text_field_given_a_yaml_boolean_says_quote_it(write_yaml):
    [issue] = issues_of(write_yaml(BASE + "    model: {template: yes}\n"))
    assert issue.path == "arms.a.model.template" and "(got True)" in issue.message and "quote the word" in issue.message


@pytest.mark.parametrize("name", ["a" * 300, "a" * 201, "a..b", "a" * 200, "lab-demo.v2"])
def test_validate_applies_the_sweep_name_rule_every_verb_applies(write_yaml, name):
    from cancelctl.errors import ArgumentError
    from cancelctl.workdir import check_sweep_name

    try:
        check_sweep_name(name)
        verbs_accept = True
    except ArgumentError:
        verbs_accept = False
    path = write_yaml(f"name: {name}\narms:\n  a: {{}}\n")
    if verbs_accept:
        assert load_sweep(path).name == name
    else:
        [issue] = issues_of(path)
        assert issue.path == "name" and issue.location.line == 1 and "sweep name" in issue.message


def test_an_arm_name_follows_the_same_rule(write_yaml):
    [issue] = issues_of(write_yaml(f"name: t\narms:\n  {'a' * 250}: {{}}\n"))
    assert issue.path == "arms" and "at most 200" in issue.message


def test_a_run_name_over_200_characters_is_refused_at_its_arms_line(write_yaml):
    """An arm name of 200 is one, but its runs' names (arm, axis values, seed) are longer: `logs --run`
    and every verb that takes a run name would refuse them, so the sweep file is refused first."""
    from cancelctl.workdir import check_name

    arm = "a" * 193  # -G=4-s0: 200 characters; -G=16-s0: 201
    issues = issues_of(write_yaml(f"name: t\narms:\n  ok: {{}}\n  {arm}: {{rollout: {{temperature: 0.9}}}}\n"
                                  "grid:\n  rollout.G: [4, 16]\n"))
    [issue] = issues  # once for the arm, not once per run
    assert issue.path == f"arms.{arm}" and (issue.location.line, issue.location.col) == (4, 3)
    assert "is 201 characters long; at most 200" in issue.message and "shorten" in issue.message
    [run] = load_sweep(write_yaml(f"name: t\narms:\n  {'a' * 197}: {{}}\n")).runs
    assert len(run.name) == 200 and check_name(run.name, "run name") == run.name
