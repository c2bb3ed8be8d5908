"""Executor name -> Executor class (as submitit's `core/plugins.py`); the names themselves are the
spec's catalog (`cancelctl.spec.executors`), which this registry keeps in step.

Built-in executors are registered by module path, so naming them costs no import (the CLI
validates `--executor` without importing submitit). Adding a scheduler (Kubernetes, SkyPilot) is
one module with an `Executor` subclass plus one `register_executor` call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

from cancelctl.installed import load_target
from cancelctl.spec import executors as catalog

if TYPE_CHECKING:
    from cancelctl.executors.base import Executor

_REGISTRY: dict[str, Union[str, type[Executor[Any, Any]]]] = {
    "local": "cancelctl.executors.local:LocalExecutor",
    "slurm": "cancelctl.executors.slurm:SlurmExecutor",
    "debug": "cancelctl.executors.debug:DebugExecutor",
}
DEFAULT_EXECUTOR = catalog.DEFAULT_EXECUTOR


def register_executor(name: str, executor: Union[str, type[Executor[Any, Any]]]) -> None:
    """Make `name` usable as `--executor NAME` / `executor: NAME` (a class, or 'module:Class')."""
    _REGISTRY[name] = executor
    catalog.add_executor_name(name)


def unregister_executor(name: str) -> None:
    _REGISTRY.pop(name, None)
    catalog.remove_executor_name(name)


def executor_names() -> list[str]:
    return list(_REGISTRY)


def get_executor(name: str) -> Executor[Any, Any]:
    """The executor registered as `name`; ArgumentError (exit 2) naming the known ones otherwise."""
    return load_target(_REGISTRY[catalog.check_executor_name(name, "executor")])()  # the catalog is kept in step
