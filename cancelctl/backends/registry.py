"""Backend name -> Backend class, as the executors' registry (`cancelctl.executors.registry`); the
table itself is the spec's catalog (`cancelctl.spec.backends`), because a spec validates its
`backend:` against it and asks the backend for its defaults, and the spec wing imports nothing of
`cancelctl/backends/`.

Built-in backends are registered by module path, so naming them costs no import (the lab path
never imports verl). Adding a backend is one class (`cancelctl.backends.protocol.BaseBackend`) and
one `register` call, or an entry point in the `cancelctl.backends` group, which job processes
see too (docs/extending.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from cancelctl.spec import backends as catalog

if TYPE_CHECKING:
    from cancelctl.backends.protocol import Backend

DEFAULT_BACKEND = catalog.DEFAULT_BACKEND
ENTRY_POINT_GROUP = catalog.ENTRY_POINT_GROUP


def register(name: str, backend: Union[str, type]) -> None:
    """Make `name` usable as a spec's `backend: NAME` in this process (a class, or 'module:Class').
    Jobs run in other processes: a backend they train must be importable there and registered
    there too, which an entry point in the `cancelctl.backends` group does."""
    catalog.add_backend(name, backend)


def unregister(name: str) -> None:
    """Forget an extension's backend; a built-in name replaced by `register` gets its own class back."""
    catalog.remove_backend(name)


def backend_names() -> list[str]:
    return catalog.backend_names()


def get_backend(name: str) -> Backend:
    """The backend registered as `name`; ArgumentError (exit 2) naming the known ones otherwise."""
    return catalog.resolve_backend(name)
