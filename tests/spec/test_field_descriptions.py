"""Every field a sweep file can set says what it is: the spec reference (docs/reference.md) and the JSON
Schema editors read both come from these descriptions, so an empty one is a blank cell for the user."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from pydantic import BaseModel

import cancelctl.spec as spec_package
from cancelctl.spec.schema import spec_reference_markdown


def spec_models() -> list[type[BaseModel]]:
    """Every pydantic model defined in `cancelctl.spec`."""
    models = []
    for info in pkgutil.iter_modules(spec_package.__path__):
        module = importlib.import_module(f"{spec_package.__name__}.{info.name}")
        models += [obj for obj in vars(module).values() if inspect.isclass(obj) and issubclass(obj, BaseModel)
                   and obj.__module__ == module.__name__]
    return models


def test_every_spec_field_has_a_description():
    models = spec_models()
    assert len(models) >= 20  # the walk found the spec's blocks, not an empty package
    empty = [f"{m.__module__}.{m.__name__}.{name}" for m in models for name, field in m.model_fields.items()
             if not (field.description or "").strip()]
    assert not empty, "fields without Field(description=...):\n" + "\n".join(empty)


def test_every_row_of_the_spec_reference_says_what_the_field_is():
    rows = [line for line in spec_reference_markdown().splitlines() if line.startswith("| `")]
    assert len(rows) > 100
    blank = [row for row in rows if not row.split("|")[-2].strip()]  # "| field | type | default | meaning |"
    assert not blank, "\n".join(blank)
