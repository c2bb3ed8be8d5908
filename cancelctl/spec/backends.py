"""The backend names a spec may give (`backend:`), each with the class that implements it as a
'module:Class' target: the catalog, as `cancelctl.spec.executors` is for executors. Naming a backend
imports nothing; the spec resolves a backend's class only to ask it what the spec depends on (its
learning-rate default, its response cap, its own checks: `cancelctl.backends.protocol`), so a
backend's class module imports nothing heavy at module level (torch, verl: inside its methods).

`cancelctl.backends.registry` is the public face (`register`, `get_backend`); extensions register
there, or through the `cancelctl.backends` entry point group, read whenever a name is not among the
registered ones (so a job process knows the backends its environment installs, and a name is never
looked up in the installed packages on the common path).
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Union

from cancelctl.errors import ArgumentError
from cancelctl.installed import load_target

ENTRY_POINT_GROUP = "cancelctl.backends"
BUILT_IN_BACKENDS = {
    "lab": "cancelctl.backends.lab.backend:LabBackend",
    "verl": "cancelctl.backends.verl.backend:VerlBackend",
}
DEFAULT_BACKEND = "lab"

_TARGETS: dict[str, Union[str, type]] = dict(BUILT_IN_BACKENDS)
_INSTANCES: dict[str, Any] = {}


def _installed() -> dict[str, str]:
    """The installed `cancelctl.backends` entry points: backend name -> 'module:Class'."""
    return {point.name: point.value for point in entry_points(group=ENTRY_POINT_GROUP)}


def backend_names() -> list[str]:
    """Every name a spec may use: built-in ones first, then registered ones in registration order,
    then installed entry points no registration has named."""
    return [*_TARGETS, *(name for name in _installed() if name not in _TARGETS)]


def add_backend(name: str, target: Union[str, type]) -> None:
    _TARGETS[name] = target
    _INSTANCES.pop(name, None)


def remove_backend(name: str) -> None:
    """Forget an extension's backend; a built-in name gets its built-in class back."""
    if name in BUILT_IN_BACKENDS:
        _TARGETS[name] = BUILT_IN_BACKENDS[name]
    else:
        _TARGETS.pop(name, None)
    _INSTANCES.pop(name, None)


def expected_backends() -> str:
    """The names a spec may give, as every refusal spells them: 'lab' or 'verl'."""
    from cancelctl.spec.strict import one_of

    return one_of(tuple(backend_names()))


def is_backend(name: str) -> bool:
    """A built-in or registered name, or an installed entry point's (looked up only for a name not found)."""
    return name in _TARGETS or name in _installed()


def check_backend_name(name: str, what: str = "backend") -> str:
    """`name`, when a backend has it; else ArgumentError (exit 2) naming the known ones."""
    if not is_backend(name):
        raise ArgumentError(f"{what} {name!r}: expected {expected_backends()}")
    return name


def resolve_backend(name: str) -> Any:
    """The backend registered as `name`, one instance per process (backends hold no state).
    Typed `Backend` by `cancelctl.backends.registry.get_backend`, which callers outside the spec use."""
    if name not in _INSTANCES:
        check_backend_name(name)
        _INSTANCES[name] = load_target(_TARGETS[name] if name in _TARGETS else _installed()[name])()
    return _INSTANCES[name]
