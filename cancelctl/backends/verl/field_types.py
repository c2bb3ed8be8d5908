"""Field-type check of verl's config dataclasses.

verl converts its configs with `hydra.utils.instantiate`, which calls the dataclass constructor
without checking annotations: `ppo_max_token_len_per_gpu: lots` passes `validate_config` and fails
hours later inside a worker. This walks the converted dataclasses and reports scalar fields set by
an override whose value does not have the annotated type. Only overridden keys are checked: verl's
own defaults break their annotations in places (e.g. `None` for an `int` filled in later).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Union

_SCALARS = (bool, int, float, str)


def field_type_errors(obj: Any, path: str, keys: set[str]) -> list[tuple[str, str]]:
    """[(dotted key, message)] for the scalar fields of `obj` (recursively) named in `keys` that
    hold a value of the wrong type."""
    errors: list[tuple[str, str]] = []
    _walk(obj, path, keys, errors, set())
    return errors


def _walk(obj: Any, path: str, keys: set[str], errors: list, seen: set[int]) -> None:
    if not dataclasses.is_dataclass(obj) or id(obj) in seen:
        return
    seen.add(id(obj))
    try:
        hints = typing.get_type_hints(type(obj))
    except Exception:  # unresolvable forward references: skip this class, keep the rest
        hints = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name, None)
        key = f"{path}.{f.name}"
        allowed = _scalar_types(hints.get(f.name)) if key in keys else None
        if allowed is not None and not _matches(value, allowed):
            names = " or ".join(t.__name__ for t in allowed)
            errors.append((key, f"{value!r} is not {names}"))
        _walk(value, key, keys, errors, seen)


def _scalar_types(hint: Any) -> tuple[type, ...] | None:
    """The accepted types for a scalar annotation (None for Optional); None = not checked."""
    if hint in _SCALARS:
        return (hint,)
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = typing.get_args(hint)
        if all(a in _SCALARS or a is type(None) for a in args):
            return tuple(args)
    return None


def _matches(value: Any, allowed: tuple[type, ...]) -> bool:
    if value is None:
        return type(None) in allowed
    if isinstance(value, bool):
        return bool in allowed
    if isinstance(value, int) and (int in allowed or float in allowed):
        return True
    return isinstance(value, tuple(t for t in allowed if t is not type(None)))
