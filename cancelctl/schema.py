"""JSON Schema of a sweep file, for yaml-language-server and editors.

`base` and every arm patch are (partial) ExperimentSpecs: every ExperimentSpec field has a default,
so the same schema serves both; grid/zip keys are dotted spec paths.
"""

from __future__ import annotations

from typing import Any

from cancelctl.spec import ExperimentSpec, SweepSpec


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
