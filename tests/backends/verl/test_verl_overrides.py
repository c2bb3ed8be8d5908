"""Hydra value escaping, checked against Hydra's own override parser and OmegaConf."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cancelctl.backends.verl.overrides import OverrideSet, hydra_value

pytestmark = pytest.mark.verl  # Hydra and OmegaConf come with the verl extra
hydra_parser = pytest.importorskip("hydra.core.override_parser.overrides_parser")
omegaconf = pytest.importorskip("omegaconf")
PARSER = hydra_parser.OverridesParser.create()


def read_back(rendered: str):
    """What verl's config holds after `a=<rendered>`, interpolations resolved."""
    cfg = omegaconf.OmegaConf.create({"a": None})
    omegaconf.OmegaConf.update(cfg, "a", PARSER.parse_override(f"a={rendered}").value(), merge=True)
    return omegaconf.OmegaConf.to_container(cfg, resolve=True)["a"]


printable = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=24)


@settings(max_examples=400, deadline=None)
@given(printable)
def test_any_printable_string_round_trips(text):
    assert read_back(hydra_value(text)) == text


@settings(max_examples=100, deadline=None)
@given(st.lists(printable, max_size=4))
def test_string_lists_round_trip(items):
    assert read_back(hydra_value(items)) == items


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.none()))
def test_scalars_round_trip(value):
    assert read_back(hydra_value(value)) == value


@pytest.mark.parametrize(
    "text, rendered",
    [
        ("Qwen/Qwen3-4B", "Qwen/Qwen3-4B"),
        ("true", "'true'"),
        ("NULL", "'NULL'"),
        ("1e-3", "'1e-3'"),
        ("~/data", "'~/data'"),
        ("gspo-G=8-s0", "'gspo-G=8-s0'"),
        ("it's", r"'it\'s'"),
        ("${x}", r"'\${x}'"),
    ],
)
def test_quoting_rules(text, rendered):
    assert hydra_value(text) == rendered


def test_template_strings_keep_references():
    cfg = omegaconf.OmegaConf.create({"a": None, "b": 5})
    omegaconf.OmegaConf.update(cfg, "a", PARSER.parse_override("a=" + hydra_value("${b}", literal=False)).value())
    assert cfg.a == 5


def test_override_set_later_source_wins_and_moves():
    base, spec = OverrideSet(), OverrideSet()
    base.set("x", 1)
    base.set("y", 2)
    spec.set("x", 3)
    base.update(spec)
    assert base.lines() == ["y=2", "x=3"]
