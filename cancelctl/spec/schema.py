"""JSON Schema of a sweep file, for yaml-language-server and editors; the guide's spec reference and
`lab:` table, as Markdown, from the same models (`python -m cancelctl.spec.schema` prints the reference).

`base` and every arm patch are (partial) ExperimentSpecs: every ExperimentSpec field has a default,
so the same schema serves both; grid/zip keys are dotted spec paths.
"""

from __future__ import annotations

import re
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, WithJsonSchema
from pydantic.fields import FieldInfo

from cancelctl.spec.experiment import ExperimentSpec
from cancelctl.spec.sweep import SweepSpec


def sweep_json_schema() -> dict[str, Any]:
    schema = SweepSpec.model_json_schema()
    experiment = ExperimentSpec.model_json_schema(ref_template="#/$defs/{model}")
    defs = schema.setdefault("$defs", {})
    defs.update(experiment.pop("$defs", {}))
    defs["ExperimentSpec"] = experiment
    props = schema["properties"]
    props["base"] = {"$ref": "#/$defs/ExperimentSpec", "description": props["base"].get("description", "")}
    props["arms"]["additionalProperties"] = {"$ref": "#/$defs/ExperimentSpec"}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "cancelctl sweep"
    return schema


def _type_name(annotation: Any) -> str:
    """A field's type as the reference tables spell it: `int or null`, `one of `a`, `b``, `list of str`, `MoeSpec`."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is Literal:
        return "one of " + ", ".join(f"`{_yaml_value(a)}`" for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type_name(a) for a in args)
    if origin in (list, set, tuple):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {_type_name(args[0])} to {_type_name(args[1])}" if args else "mapping"
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _yaml_value(value: Any) -> str:
    """A default as a sweep file writes it (`true`, `[a, b]`, `""`); numbers as Python prints them."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, (list, tuple, set, dict)) or value == "":
        return yaml.safe_dump(list(value) if isinstance(value, (tuple, set)) else value, default_flow_style=True,
                              width=10**6).strip()
    return str(value)


def _is_model(annotation: Any) -> type[BaseModel] | None:
    """The spec model a field holds (alone or `| None`), or None."""
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _union_models(field: FieldInfo) -> list[type[BaseModel]]:
    """The models of a union discriminated on a field (a claim's `metric` by `kind`); [] otherwise."""
    if not field.discriminator:
        return []
    return [arg for arg in get_args(field.annotation) if isinstance(arg, type) and issubclass(arg, BaseModel)]


def _per_loss_defaults() -> dict[str, str]:
    """The defaults that depend on `algorithm.loss`, as the reference's default cell shows them: each value
    with the losses that take it ("per loss: `0.2` grpo, dapo; `0.0003` gspo, dfpo")."""
    from losses import catalog

    def cell(value_of) -> str:
        by_value: dict[str, list[str]] = {}
        for name, info in catalog.LOSSES.items():
            by_value.setdefault(_yaml_value(value_of(info)), []).append(name)
        return "per loss: " + "; ".join(f"`{value}` {', '.join(names)}" for value, names in by_value.items())

    return {
        "algorithm.loss_agg_mode": cell(lambda info: info.default_agg_mode),
        "algorithm.clip_low": cell(lambda info: info.default_clip[0]),
        "algorithm.clip_high": cell(lambda info: info.default_clip[1]),
    }


def _linked(kind: str, links: dict[type, str]) -> str:
    """A type cell with each spec model it names linked to the section that lists its fields."""
    for model, anchor in links.items():
        kind = re.sub(rf"\b{model.__name__}\b", f"[{model.__name__}](#{anchor})", kind)
    return kind


def _row(name: str, field: FieldInfo, links: dict[type, str] | None = None,
         per_loss: dict[str, str] | None = None) -> str:
    kind = _linked(_type_name(field.annotation), links or {})
    if _union_models(field):
        kind = f"mapping by `{field.discriminator}`: the fields of its kind (below)"
    choices = next((m.json_schema.get("enum") for m in field.metadata
                    if isinstance(m, WithJsonSchema) and isinstance(m.json_schema, dict)), None)
    if choices:  # a name checked against a live catalog (losses, executors): its choices today
        kind = "one of " + ", ".join(f"`{c}`" for c in choices)
    if per_loss and name in per_loss:
        default = per_loss[name]
    elif field.is_required():
        default = "required"
    elif field.default_factory is not None:
        default = f"`{_yaml_value(field.default_factory())}`"
    elif isinstance(field.default, BaseModel):
        default = "its fields"
    else:
        default = "—" if field.default is None else f"`{_yaml_value(field.default)}`"
    ops = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "at least", "max_length": "at most"}
    bounds = ", ".join(f"{sym} {getattr(m, op)}" for m in field.metadata for op, sym in ops.items()
                       if getattr(m, op, None) is not None)
    meaning = "; ".join(filter(None, [(field.description or "").replace("|", "\\|").replace("<", "&lt;"), bounds]))
    return f"| `{name}` | {kind} | {default} | {meaning} |"


def fields_table(model: type[BaseModel], prefix: str, links: dict[type, str] | None = None,
                 per_loss: dict[str, str] | None = None) -> str:
    """A Markdown table of a spec model's fields (type, default, description), each nested model's fields
    right after its own row: the guide's `lab:` table and every table of its spec reference."""
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]

    def add(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            path = f"{prefix}.{name}" if prefix else name
            rows.append(_row(path, field, links, per_loss))
            inner = _is_model(field.annotation)
            if inner is not None and not _union_models(field):
                add(inner, path + ("[]" if get_origin(field.annotation) is list else ""))

    add(model, prefix)
    return "\n".join(rows)


def lab_fields_markdown() -> str:
    """The `lab:` block's fields (and `lab.moe`'s), as the guide's Science page documents them."""
    from cancelctl.spec.lab import LabSpec

    return fields_table(LabSpec, "lab")


REFERENCE_PATH = "docs/reference.md"


def _sections() -> dict[type, str]:
    """Each spec model -> the anchor of the reference section whose table lists its fields: a block of
    the experiment spec (`model`, `algorithm`, ...) and the models nested in it, or the claims'."""
    from cancelctl.spec.claims import ClaimSpec

    def nested(model: type[BaseModel]) -> list[type[BaseModel]]:
        inner = [m for field in model.model_fields.values() for m in _models_in(field.annotation)]
        return [model] + [n for m in inner for n in nested(m)]

    links: dict[type, str] = {}
    for name, field in ExperimentSpec.model_fields.items():
        for model in _models_in(field.annotation):
            links.update((m, name) for m in nested(model) if m not in links)
    links.update((m, "claims-each-entry-of-claims") for m in nested(ClaimSpec) if m not in links)
    links[ExperimentSpec] = "experiment-spec-base-and-every-arm"
    return links


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The spec models a type names, at any depth (`X | None`, `list[X]`, a union of models)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _doc(model: type) -> str:
    """A model's own docstring as one paragraph (none: empty)."""
    return " ".join((model.__dict__.get("__doc__") or "").split())


def spec_reference_markdown() -> str:
    """The guide's spec reference (docs/reference.md): every field a sweep file and its `base` and arms
    take, one table per block, from the spec models; tests/test_readme.py fails when the page is stale."""
    from cancelctl.spec.claims import ClaimSpec

    links = _sections()
    out = [
        "# Spec reference",
        "",
        "<!-- generated from the spec models: python -m cancelctl.spec.schema > docs/reference.md -->",
        "",
        "Every field of a sweep file, generated from cancelctl's spec models (`cancelctl.spec`); a test",
        "fails when this page falls behind them. [Sweep files](sweep-files.md) shows how they combine;",
        "`cancelctl schema` writes the same models as a JSON Schema for editors.",
        "",
        "## Sweep file",
        "",
        _doc(SweepSpec),
        "",
        _top_level(SweepSpec, links),
        "",
        "## Experiment spec: `base` and every arm",
        "",
        "`base` is an experiment spec and every arm a patch on it (nested mappings, merged). Fields with no",
        "block:",
        "",
        _top_level(ExperimentSpec, links),
    ]
    blocks = [(name, field) for name, field in ExperimentSpec.model_fields.items() if _is_model(field.annotation)]
    per_loss = _per_loss_defaults()
    for name, field in blocks:
        model = _is_model(field.annotation)
        out += ["", f"### `{name}`", ""] + ([_doc(model), ""] if _doc(model) else [])
        out += [fields_table(model, name, links, per_loss)]
    out += ["", "## Claims: each entry of `claims`", "", _doc(ClaimSpec), "", fields_table(ClaimSpec, "claims[]", links)]
    metric = ClaimSpec.model_fields["metric"]
    out += ["", "### `claims[].metric`, by `kind`", "",
            "Each kind takes its own fields and no other (a field of another kind is an unknown field)."]
    for model in _union_models(metric):
        kinds = ", ".join(f"`{k}`" for k in get_args(model.model_fields["kind"].annotation))
        out += ["", f"#### `kind`: {kinds}", "", _doc(model), "", fields_table(model, "claims[].metric", links)]
    return "\n".join(out) + "\n"


def _top_level(model: type[BaseModel], links: dict[type, str]) -> str:
    """A model's own fields, nested models named but not expanded (they get tables of their own)."""
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    rows += [_row(name, field, links) for name, field in model.model_fields.items()]
    return "\n".join(rows)


if __name__ == "__main__":
    print(spec_reference_markdown(), end="")
