"""Whether a module is installed, found without importing it (verl costs seconds and `losses` imports
torch): the one check the verbs, the backends' hooks and the benchmarks ask. Importing a module to
use it, and saying which extra brings it when it is missing, is `cancelctl.data.extras.require`.
`load_target` imports a registry's 'module:Class' entry (backends, executors) when it is first used."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any


def installed(module: str) -> bool:
    """`module` ('verl', 'losses.verl_plugin') can be imported here. A dotted name is looked up as a
    file under its top-level package's folder, so neither that package nor any parent is imported."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):  # a broken or half-imported top-level module
        return False
    if spec is None:
        return False
    if not rest:
        return True
    if not spec.submodule_search_locations:  # a plain module has no submodules
        return False
    base = Path(list(spec.submodule_search_locations)[0]).joinpath(*rest)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def load_target(target: str | Any) -> Any:
    """A registry's entry: a 'module:Class' string is imported now (registering one costs no import);
    anything else is the object itself."""
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
