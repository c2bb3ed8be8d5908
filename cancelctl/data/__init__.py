"""Datasets and rewards for verl runs: what `cancelctl data` makes and what verl scores it with.

- `catalog()`: the datasets it can make (the papers' Hub sets, reasoning-gym's offline sets), each
  with its source, size and verifier; `entry(name)` for one;
- `prepare(names, out_dir, seed=, size=, progress=)`: writes `<out>/<name>/<split>.parquet` in verl's
  RLHFDataset format, atomically, and does nothing the second time;
- `reward_for(data_source)`, `known_data_sources()`, `compute_score` (verl's custom reward entry:
  `REWARD_MODULE` / `REWARD_FUNCTION` name it for verl, `reward_function_path()` for a spec);
- `check_parquet(path)`, `prepare_command(name)`, `dataset_for_path(path)`: for `validate`.

Modules, in data order: `inventory` (the catalog), `layout` (its files' paths); `sources` (Hub download, reasoning-gym
generation); `convert` (one function per source family) over `verl_rows` (the row and its schema);
`parquet_files` (atomic files, sidecar); `preparation`; `rewards` over `math_reward` and
`gym_reward`; `check`. The libraries of the `data` extra (datasets, math-verify, reasoning-gym) are
imported only where used (`extras`).
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> module: imported on first use, so a reward process or a renderer that needs one name does
# not pay for pyarrow, the converters and the sources (PEP 562)
_EXPORTS = {
    "check_parquet": "check",
    "dataset_for_path": "layout",
    "prepare_command": "layout",
    "MissingExtra": "extras",
    "DEFAULT_OUT_DIR": "inventory",
    "DatasetEntry": "inventory",
    "UnknownDataset": "inventory",
    "catalog": "inventory",
    "entry": "inventory",
    "PreparedDataset": "preparation",
    "ProgressEvent": "preparation",
    "prepare": "preparation",
    "REWARD_FUNCTION": "rewards",
    "REWARD_MODULE": "rewards",
    "UnknownDataSource": "rewards",
    "compute_score": "rewards",
    "known_data_sources": "rewards",
    "reward_for": "rewards",
    "reward_function_path": "rewards",
    "VERL_COLUMNS": "verl_rows",
    "ConversionError": "verl_rows",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
