"""The rewards verl calls for the datasets `prepare` makes, dispatched on each row's `data_source`.

verl loads `compute_score` through `reward.custom_reward_function`: by package (`REWARD_MODULE`,
the form that holds on a cluster node or in the image, wherever cancelctl is installed there) or by
file (`reward_function_path()`, the `FILE.py:NAME` form of a spec's `data.reward_function`, valid only
where the path is); a module loaded from a file has no package, which is why this one imports
absolutely. Every reward returns a float; an answer that cannot be read scores
0.0. A data_source with no reward raises UnknownDataSource: silently scoring a whole dataset 0 would
train on nothing, so it must be loud (and `check_parquet` finds it before a run).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cancelctl.data import gym_reward, math_reward
from cancelctl.data.inventory import GYM_DATA_SOURCE_PREFIX, GYM_SCORE_ANSWER, GYM_SCORE_NUMBER, MATH_VERIFY, catalog, entry_for_data_source
from cancelctl.errors import ArgumentError

REWARD_MODULE = "pkg://cancelctl.data.rewards"  # verl's custom_reward_function.path
REWARD_FUNCTION = "compute_score"  # and its .name

RewardFn = Callable[..., float]  # (data_source, solution_str, ground_truth, extra_info=None) -> float

VERIFIERS: dict[str, RewardFn] = {
    MATH_VERIFY: math_reward.compute_math_score,
    GYM_SCORE_ANSWER: gym_reward.compute_gym_score,
    GYM_SCORE_NUMBER: gym_reward.compute_gym_number_score,
}


class UnknownDataSource(ArgumentError, KeyError):
    """A data_source no reward here scores: bad input (exit 2 at the CLI); a KeyError to a lookup."""

    def __init__(self, message: str):
        super().__init__(message, title="unknown data source")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def known_data_sources() -> tuple[str, ...]:
    """The data_source of every catalog dataset (reasoning-gym tasks beyond the catalog are scored too)."""
    return tuple(sorted(entry.data_source for entry in catalog()))


def reward_for(data_source: str) -> RewardFn:
    """The reward function for rows of `data_source`, with verl's custom reward signature."""
    entry = entry_for_data_source(data_source)
    if entry is not None:
        return VERIFIERS[entry.verifier]
    if data_source.startswith(GYM_DATA_SOURCE_PREFIX) and gym_reward.is_gym_task(gym_reward.task_of(data_source)):
        return VERIFIERS[GYM_SCORE_ANSWER]
    raise UnknownDataSource(
        f"no reward for data_source {data_source!r}; known: {', '.join(known_data_sources())} "
        f"and {GYM_DATA_SOURCE_PREFIX}<any reasoning-gym task>"
    )


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None, **_verl: Any
) -> float:
    """verl's entry point. `_verl` takes what verl's reward loop may add (reward_router_address, …)."""
    return float(reward_for(data_source)(data_source, solution_str, ground_truth, extra_info))


def reward_function_path() -> str:
    """`FILE.py:NAME` for a spec's `data.reward_function` (and verl's custom_reward_function)."""
    return f"{Path(__file__).resolve()}:{REWARD_FUNCTION}"
