"""The executor names a spec may give (`executor:`, `--executor`): the catalog, as `losses.catalog`
is for losses — no scheduler code, so validating a spec never imports an executor.

`cancelctl.executors.registry` maps each name to its `Executor` class and keeps this list in step:
`register_executor` adds an extension's name here, `unregister_executor` takes it out (a test
checks that the registry registers exactly the built-in names below).
"""

from __future__ import annotations

from cancelctl.errors import ArgumentError

BUILT_IN_EXECUTORS = ("local", "slurm", "debug")
DEFAULT_EXECUTOR = "local"

_NAMES: list[str] = list(BUILT_IN_EXECUTORS)


def executor_names() -> list[str]:
    """Every name a spec may use, built-in ones first, then extensions in registration order."""
    return list(_NAMES)


def add_executor_name(name: str) -> None:
    if name not in _NAMES:
        _NAMES.append(name)


def remove_executor_name(name: str) -> None:
    if name in _NAMES:
        _NAMES.remove(name)


def expected_executors() -> str:
    """The names a spec may give, as every refusal spells them: 'local', 'slurm' or 'debug'."""
    from cancelctl.spec.strict import one_of  # pydantic's spelling; imported here: naming costs no pydantic

    return one_of(tuple(_NAMES))


def check_executor_name(name: str, what: str = "--executor") -> str:
    """`name`, when a registered executor has it; else ArgumentError (exit 2) naming the known ones —
    the one refusal of an unknown executor name (`--executor`, `get_executor`; the spec's field says
    it in pydantic's words with the same list)."""
    if name not in _NAMES:
        raise ArgumentError(f"{what} {name!r}: expected {expected_executors()}")
    return name
