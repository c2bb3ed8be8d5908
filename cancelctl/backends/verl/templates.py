"""Base verl settings as data: `templates/verl/<name>.yaml`, one file per strategy / model scale.

A template is a mapping with `overrides` (verl Hydra keys, dotted or nested, → values) and optional
`description`, `strategy` (the model.strategy values it is meant for) and `extends` (another
template applied first). A user adds one by dropping a file into a template directory:
`$CANCELCTL_TEMPLATES` (os.pathsep-separated; each holds `verl/<name>.yaml`) is searched before
the repository's `templates/`. `model.template` may also be a path to a `.yaml` file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cancelctl.backends.verl.overrides import OverrideSet

REPO_TEMPLATES = Path(__file__).resolve().parents[3] / "templates"
DEFAULT_BY_STRATEGY = {"fsdp": "fsdp", "fsdp2": "fsdp", "megatron": "megatron"}
_TOP_LEVEL = {"description", "strategy", "extends", "overrides"}


class TemplateError(ValueError):
    pass


@dataclass
class Template:
    name: str
    path: Path
    description: str = ""
    strategies: tuple[str, ...] = ()
    overrides: OverrideSet = field(default_factory=OverrideSet)


def template_dirs() -> list[Path]:
    extra = [Path(p) for p in os.environ.get("CANCELCTL_TEMPLATES", "").split(os.pathsep) if p]
    return [d / "verl" for d in [*extra, REPO_TEMPLATES]]


def available_templates() -> list[str]:
    names = {p.stem for d in template_dirs() if d.is_dir() for p in d.glob("*.yaml")}
    return sorted(names)


def default_template(strategy: str) -> str:
    return DEFAULT_BY_STRATEGY[strategy]


def find_template(name: str) -> Path:
    if name.endswith((".yaml", ".yml")) or os.sep in name:
        path = Path(name).expanduser()
        if path.is_file():
            return path
        raise TemplateError(f"verl template file {name} does not exist")
    for d in template_dirs():
        path = d / f"{name}.yaml"
        if path.is_file():
            return path
    known = ", ".join(available_templates()) or "none"
    searched = ", ".join(map(str, template_dirs()))
    raise TemplateError(f"unknown verl template {name!r}; available: {known} (searched {searched})")


def load_template(name: str, _chain: tuple[str, ...] = ()) -> Template:
    """The template's settings, with those of the template it `extends` first (later wins)."""
    if name in _chain:
        raise TemplateError(f"verl template {name!r} extends itself: {' -> '.join((*_chain, name))}")
    path = find_template(name)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise TemplateError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise TemplateError(f"{path}: a template is a mapping with 'overrides'")
    unknown = set(data) - _TOP_LEVEL
    if unknown:
        raise TemplateError(f"{path}: unknown template field(s) {sorted(unknown)}; expected {sorted(_TOP_LEVEL)}")
    overrides = data.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise TemplateError(f"{path}: 'overrides' must map verl keys to values")
    strategies = data.get("strategy") or ()
    strategies = (strategies,) if isinstance(strategies, str) else tuple(strategies)

    merged = OverrideSet()
    if data.get("extends"):
        parent = load_template(str(data["extends"]), (*_chain, name))
        merged.update(parent.overrides)
        strategies = strategies or parent.strategies
    own = OverrideSet()
    for key, value in _flatten(overrides):
        add = key.startswith("+")
        # Template strings keep `${...}` as OmegaConf references (literal=False).
        own.set(key.lstrip("+"), value, add=add, literal=False)
    merged.update(own)
    return Template(name, path, str(data.get("description", "")), strategies, merged)


def _flatten(mapping: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for key, value in mapping.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.extend(_flatten(value, dotted))
        else:
            out.append((dotted, value))
    return out
