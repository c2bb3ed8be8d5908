"""The spec's fields that name something registered — a loss, an executor, a backend: each checked
against its live catalog (`losses.catalog`, `cancelctl.spec.executors`, `cancelctl.spec.backends`),
not a Literal frozen at import, so one an extension registers validates; a wrong name gets
pydantic's literal message with the catalog's names.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from cancelctl.spec.backends import BUILT_IN_BACKENDS, expected_backends, is_backend
from cancelctl.spec.executors import executor_names, expected_executors
from cancelctl.spec.strict import one_of
from losses import catalog


def _registered_loss(name: str) -> str:
    # checked against the live catalog (not a Literal frozen at import), so a loss registered by an
    # extension validates; the message is pydantic's literal message
    if name not in catalog.LOSSES:
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": one_of(catalog.loss_names())})
    return name


LossName = Annotated[
    str, AfterValidator(_registered_loss), WithJsonSchema({"enum": list(catalog.loss_names()), "type": "string"})
]


def _registered_executor(name: str) -> str:
    # the catalog the executor registry keeps in step: one registered by an extension validates
    if name not in executor_names():
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected_executors()})
    return name


ExecutorName = Annotated[
    str, AfterValidator(_registered_executor), WithJsonSchema({"enum": executor_names(), "type": "string"})
]


def _registered_backend(name: str) -> str:
    # the catalog the backend registry keeps: one registered by an extension (or an entry point) validates
    if not is_backend(name):
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected_backends()})
    return name


BackendName = Annotated[
    str, AfterValidator(_registered_backend), WithJsonSchema({"enum": list(BUILT_IN_BACKENDS), "type": "string"})
]
