"""Where in the sweep file a bad value came from: pydantic's errors mapped to `file:line:col` of the
line that supplied the value (a grid/zip axis, the arm's patch, or the base), with the dotted field
path and what was expected; axis paths checked against the spec; arms that set a field an axis
sweeps refused, naming both lines; trend claims' axes checked against the grid.
"""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from cancelctl.errors import SpecError, SpecIssue
from cancelctl.spec.claims import claims_axis_errors
from cancelctl.spec.experiment import ExperimentSpec
from cancelctl.spec.run import group_label
from cancelctl.spec.sweep import SweepSpec
from cancelctl.spec.yamlpos import Location


def _model_at(model: type[BaseModel], keys: tuple) -> type[BaseModel] | None:
    return _walk(model, keys)[0]


def _walk(model: type[BaseModel] | None, keys: tuple) -> tuple[type[BaseModel] | None, tuple]:
    """The spec model at `keys` below `model` (None: not a model), and `keys` without the tags
    pydantic puts in the path of a discriminated union (`claims.0.metric.final.window`: the
    `final` kind's model, at `claims.0.metric.window`). A list index stays on the list's model."""
    kept: list = []
    index = 0
    while index < len(keys):
        key = keys[index]
        kept.append(key)
        index += 1
        if isinstance(key, int) or model is None:
            continue
        field = model.model_fields.get(key)
        if field is None:
            model = None
            continue
        candidates = [field.annotation, *get_args(field.annotation)]
        models = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        tag = keys[index] if index < len(keys) else None
        if field.discriminator and isinstance(tag, str):
            tagged = [m for m in models if tag in get_args(m.model_fields[str(field.discriminator)].annotation)]
            if tagged:
                model, index = tagged[0], index + 1
                continue
        model = models[0] if models else None
    return model, tuple(kept)


def check_axis_paths(sweep: SweepSpec, positions: dict, file: str) -> None:
    issues = []
    for kind, axes in (("grid", sweep.grid), ("zip", sweep.zip)):
        for dotted in axes:
            keys = tuple(dotted.split("."))
            parent = _model_at(ExperimentSpec, keys[:-1])
            if parent is None or keys[-1] not in parent.model_fields:
                allowed = ", ".join(parent.model_fields) if parent is not None else ", ".join(ExperimentSpec.model_fields)
                issues.append(
                    SpecIssue(positions.get((kind, dotted)), f"{kind}.{dotted}", f"unknown spec path; expected one of: {allowed}")
                )
    if issues:
        raise SpecError(issues)


def check_claim_axes(sweep: SweepSpec, positions: dict, file: str) -> None:
    """A trend claim's `along.axis` must be a grid axis that can carry a slope (`claims_axis_errors`);
    each error points at the claim's `axis:` line."""
    issues = []
    for index, message in claims_axis_errors(sweep.claims, sweep.grid, sweep.zip):
        key = ("claims", index, "along", "axis")
        location, _ = _nearest(positions, (), key)
        issues.append(SpecIssue(location or Location(file, 1, 1), _dotted(key), message))
    if issues:
        raise SpecError(issues)


def _arm_overlap(patch: Any, keys: tuple[str, ...]) -> tuple[str, ...] | None:
    """The path in an arm's patch whose value an axis at `keys` would replace (None: none): the
    axis's field itself, a mapping below it (the axis replaces it whole), or a scalar/null above it
    (where the axis path goes through)."""
    node = patch
    for depth, key in enumerate(keys, 1):
        if not isinstance(node, dict) or key not in node:
            return None
        if depth == len(keys) or not isinstance(node[key], dict):
            return keys[:depth]
        node = node[key]
    return None


def check_arm_axis_overlaps(sweep: SweepSpec, positions: dict, file: str) -> None:
    """An axis sets its field at every point, after the arm's patch: an arm that sets the same field
    (directly, or in a mapping the axis path goes through) would silently lose its value. Refused,
    naming both lines, before anything is expanded."""
    issues = []
    for arm, patch in sweep.arms.items():
        for kind, axes in (("grid", sweep.grid), ("zip", sweep.zip)):
            for dotted in axes:
                overlap = _arm_overlap(patch, tuple(dotted.split(".")))
                if overlap is None:
                    continue
                key = ("arms", arm, *overlap)
                axis_at = positions.get((kind, dotted))
                issues.append(SpecIssue(
                    positions.get(key, positions.get(("arms", arm), Location(file, 1, 1))),
                    _dotted(key),
                    f"arm {arm!r} sets {'.'.join(overlap)}, which {kind} axis {dotted!r}"
                    f"{f' ({axis_at})' if axis_at else ''} also sets at every point: the arm's value would be "
                    f"overridden. Remove it from the arm, or drop the axis and give each value its own arm",
                ))
    if issues:
        raise SpecError(issues, title="an arm sets a field a grid/zip axis sweeps")


def describe(err: dict, model: type[BaseModel] | None, loc: tuple) -> str:
    if err["type"] == "extra_forbidden":
        parent = _model_at(model, loc[:-1]) if model is not None else None
        allowed = f"; expected one of: {', '.join(parent.model_fields)}" if parent is not None else ""
        return f"unknown field {loc[-1]!r}{allowed}"
    msg = err["msg"]
    if err["type"] == "missing":
        return "required field is missing"
    if "input" in err and not isinstance(err["input"], (dict, list)):
        msg += f" (got {_shown(err['input'])!r})"
    if err["type"] == "model_type" and isinstance(err.get("input"), (bool, str)):
        msg += _section_hint(err["input"], model, loc)
    elif isinstance(err.get("input"), bool) and not err["type"].startswith("bool"):
        # YAML 1.1 (PyYAML) reads unquoted on/off/yes/no as booleans; a words field takes them back
        msg += "; YAML reads an unquoted yes/no/on/off/true/false as a boolean: quote the word (e.g. 'off')"
    return msg


def _shown(value):
    """A value as an issue quotes it: a password in a URI is `***` (the message goes to the screen, CI logs)."""
    from cancelctl.uri_secrets import redact_uri

    return redact_uri(value) if isinstance(value, str) else value


def _section_hint(given: bool | str, model: type[BaseModel] | None, loc: tuple) -> str:
    """A word (quoted or not) where a section goes: quoting cannot help, the section's fields do. A
    monitor rule is turned off by its `action` (`entropy_collapse: {action: off}`)."""
    section = _model_at(model, tuple(loc)) if model is not None else None
    name = loc[-1] if loc else "this field"
    if section is not None and "action" in section.model_fields:
        word = given if given in ("warn", "stop", "off") else "off" if given is False else None
        example = f"`{name}: {{action: {word}}}`" if word else f"`{name}: {{action: warn}}` or `{{action: stop}}`"
        return f"; a monitor rule is a section, not a word (quoted or not): write {example}"
    return f"; {name} is a section (a mapping of its fields), not a word (quoted or not)"


def _dotted(parts: tuple) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _nearest(positions: dict, prefix: tuple, loc: tuple) -> tuple[Location | None, tuple]:
    for k in range(len(loc), -1, -1):
        key = prefix + tuple(loc[:k])
        if key in positions:
            return positions[key], key
    return None, prefix


def sweep_issues(exc: ValidationError, positions: dict, file: str) -> list[SpecIssue]:
    issues = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = _walk(SweepSpec, loc)[1]
        location, _ = _nearest(positions, (), path)
        issues.append(SpecIssue(location or Location(file, 1, 1), _dotted(path), describe(err, SweepSpec, loc)))
    return issues


def run_issues(exc: ValidationError, positions: dict, file: str, arm: str, axes: dict, sweep: SweepSpec) -> list[SpecIssue]:
    context = f"arm {arm!r}" + (f", {group_label(axes)}" if axes else "")
    issues = []
    for err in exc.errors():
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and x.startswith("function-")))
        location, key = _source_of(loc, positions, arm, axes, sweep)
        message = describe(err, ExperimentSpec, loc)
        if loc and _dotted(loc) not in _dotted(key):
            message += f" (field {_dotted(loc) or 'spec'})"
        issues.append(SpecIssue(location or Location(file, 1, 1), _dotted(key), message, context))
    return issues


def _source_of(loc: tuple, positions: dict, arm: str, axes: dict, sweep: SweepSpec) -> tuple[Location | None, tuple]:
    """Which line supplied the value at `loc`: a grid/zip axis, the arm patch, or the base."""
    for dotted in axes:
        keys = tuple(dotted.split("."))
        if loc[: len(keys)] == keys:
            kind = "grid" if dotted in sweep.grid else "zip"
            idx = next(i for i, v in enumerate(getattr(sweep, kind)[dotted]) if v == axes[dotted])
            return positions.get((kind, dotted, idx), positions.get((kind, dotted))), (kind, dotted, idx)
    arm_key = ("arms", arm)
    node: Any = sweep.arms.get(arm, {})
    depth = 0
    for key in loc:
        if not (isinstance(node, dict) and key in node):
            break
        node, depth = node[key], depth + 1
    if not loc or (depth and (depth == len(loc) or not isinstance(node, dict))):
        key = arm_key + tuple(loc[:depth])  # the arm set this value (or the whole spec is at fault)
        return positions.get(key, positions.get(arm_key)), key
    location, key = _nearest(positions, ("base",), loc)
    if location is not None and len(key) > 1:
        return location, key
    key = arm_key + tuple(loc[:depth])
    return positions.get(key, positions.get(arm_key)), key
