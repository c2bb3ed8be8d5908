"""The reward a configuration's verl run will call, called here on the first rows of its data.

verl's reward loop drops a score that is not a number without a word, and the run fails later with
`KeyError: 'rm_scores'` — far from the cause. So before any job starts the smoke calls the same
function verl will (the spec's `data.reward_function`, else cancelctl's rewards for data that
`cancelctl data prepare` made) on each first row, answering with the row's own ground truth, and
names the function, the row and what it returned. Data scored by verl's built-in scorers is left to
the run itself (importing verl's scorers here would cost the smoke process seconds for nothing).
"""

from __future__ import annotations

import importlib.util
import math
import numbers
from collections.abc import Callable
from pathlib import Path

ROWS_CALLED = 2


def reward_problem(reward_function: str | None, scored_by_cancelctl: bool, train_file: str) -> str | None:
    """Why the reward of a run on `train_file` is unusable, in one line, or None."""
    try:
        function, name = _reward_function(reward_function, scored_by_cancelctl)
    except Exception as exc:  # noqa: BLE001 - a reward file that does not import: its own error
        return f"data.reward_function: {reward_function} does not load: {type(exc).__name__}: {exc}".splitlines()[0]
    if function is None:
        return None
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(train_file).read_row_group(0).slice(0, ROWS_CALLED).to_pylist()
    for i, row in enumerate(rows):
        truth = (row.get("reward_model") or {}).get("ground_truth")
        try:
            score = function(row.get("data_source"), str(truth), truth, row.get("extra_info"))
        except Exception as exc:  # noqa: BLE001 - the reward's own error is the cause
            return f"{name} raised on row {i} ({type(exc).__name__}: {exc})".splitlines()[0]
        if not _a_score(score):
            return (f"{name} returned {score!r} (a {type(score).__name__}) on row {i}: verl needs a number, or a dict "
                    f"with a number under 'score'")
    return None


def _reward_function(reward_function: str | None, scored_by_cancelctl: bool) -> tuple[Callable | None, str]:
    if reward_function is not None:
        path, _, name = reward_function.partition(":")
        name = name or "compute_score"
        module_spec = importlib.util.spec_from_file_location(f"_cancelctl_smoke_reward_{abs(hash(path))}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return getattr(module, name), f"{Path(path).name}:{name}"
    if scored_by_cancelctl:
        from cancelctl.data.rewards import compute_score

        return compute_score, "cancelctl.data.rewards:compute_score"
    return None, ""


def _a_score(score: object) -> bool:
    if isinstance(score, dict):
        score = score.get("score")
    return isinstance(score, numbers.Real) and math.isfinite(float(score))
