"""The `data` extra's libraries (datasets, math-verify, reasoning-gym), imported only where used:
the catalog, the checks and the reward dispatch stay importable without them."""

from __future__ import annotations

import importlib
from types import ModuleType

from cancelctl.errors import CancelctlError


class MissingExtra(CancelctlError, ImportError):
    """A library of the `data` extra is not installed."""


def require(module: str, purpose: str) -> ModuleType:
    """Import `module`, or say which extra brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(f"{purpose} needs the Python package {module!r}: pip install 'cancelctl[data]' ({exc})") from exc
