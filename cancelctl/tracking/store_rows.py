"""A sweep's runs and raw metric rows as its MLflow store holds them, read in bulk.

Two ways to read the store:
- fast path (sqlite stores): three SQL queries on MLflow's tables through the stdlib sqlite3
  module, read-only, without importing mlflow. It relies on MLflow's schema (experiments, runs,
  tags, metrics tables); if anything there does not fit, it falls back to the general path.
- general path (any store): MlflowClient.search_runs + one get_metric_history per (run, key).
`benchmarks/bench_tracking.py` measures both; `collect` makes the tidy frames of what is read here.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from cancelctl.tracking.runs import client_for, search_all_runs
from cancelctl.tracking.tags import PREFIX, RUN_ID_TAG
from cancelctl.tracking.uri import fast_fail_http, sqlite_path

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("cancelctl.tracking")

BUDGET_PARAM = "budget.steps"  # the run's planned training steps (a param of every MLflow run cancelctl creates)
# the budget on each of its axes (steps, generated tokens, update steps): a run has one of them
BUDGET_PARAMS = (BUDGET_PARAM, "budget.gen_tokens", "budget.update_steps")
RAW_METRIC_COLUMNS = ["mlflow_run_id", "step", "key", "value", "timestamp"]
API_HTTP_WORKERS = 8  # get_metric_history calls in flight against an HTTP server

Method = Literal["auto", "sql", "api"]


class _FastPathUnavailable(Exception):
    pass


@dataclass
class StoreRun:
    mlflow_run_id: str
    name: str
    state: str
    start_time: int
    tags: dict[str, str] = field(default_factory=dict)
    budget: dict[str, str] = field(default_factory=dict)  # the BUDGET_PARAMS it has -> value


def read_store(uri: str, experiment: str, method: Method) -> tuple[list[StoreRun], pd.DataFrame]:
    db_path = sqlite_path(uri)
    if method == "sql" and db_path is None:
        raise ValueError(f"method='sql' needs a sqlite store, not {uri}")
    if method != "api" and db_path is not None:
        try:
            return _read_sqlite(db_path, experiment)
        except _FastPathUnavailable as exc:
            if method == "sql":
                raise RuntimeError(f"sqlite fast path unavailable: {exc}") from exc
            log.info("sqlite fast path unavailable (%s); using the MLflow API", exc)
    return _read_mlflow_api(uri, experiment)


def _read_sqlite(db_path: Path, experiment: str) -> tuple[list[StoreRun], pd.DataFrame]:
    """Runs, cancelctl tags and all metric rows of the experiment in three queries."""
    if not db_path.exists():
        return [], empty_raw_metrics()
    try:
        con = sqlite3.connect(db_path.as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise _FastPathUnavailable(str(exc)) from exc
    try:
        return _query_sqlite(con, experiment)
    except sqlite3.Error as exc:
        raise _FastPathUnavailable(f"{type(exc).__name__}: {exc}") from exc
    finally:
        con.close()


def _query_sqlite(con: sqlite3.Connection, experiment: str) -> tuple[list[StoreRun], pd.DataFrame]:
    import pandas as pd

    ids = con.execute(
        "SELECT experiment_id FROM experiments WHERE name = ? AND lifecycle_stage = 'active'", (experiment,)
    ).fetchall()
    if not ids:
        return [], empty_raw_metrics()
    if len(ids) > 1:  # same name in several MLflow workspaces: let MLflow decide which one
        raise _FastPathUnavailable(f"{len(ids)} active experiments named {experiment!r}")
    active_runs = "FROM runs r WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active'"
    runs = {
        uuid: StoreRun(uuid, name or "", status, start or 0)
        for uuid, name, status, start in con.execute(
            f"SELECT r.run_uuid, r.name, r.status, r.start_time {active_runs}", ids[0]
        )
    }
    for uuid, key, value in con.execute(
        "SELECT t.run_uuid, t.key, t.value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
        "WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active' AND t.key LIKE 'cancelctl.%'",
        ids[0],
    ):
        runs[uuid].tags[key] = value
    for uuid, key, value in con.execute(
        "SELECT p.run_uuid, p.key, p.value FROM params p JOIN runs r ON r.run_uuid = p.run_uuid "
        "WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active' AND p.key IN (?, ?, ?)",
        (ids[0][0], *BUDGET_PARAMS),
    ):
        runs[uuid].budget[key] = value
    with _gc_paused():  # a million row tuples would trigger full collections, each one finding nothing
        rows = con.execute(
            "SELECT m.run_uuid, m.step, m.key, CASE WHEN m.is_nan THEN NULL ELSE m.value END, m.timestamp "
            "FROM metrics m JOIN runs r ON r.run_uuid = m.run_uuid "
            "WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active'",
            ids[0],
        ).fetchall()  # NULL -> NaN in the float column
        return list(runs.values()), pd.DataFrame(rows, columns=RAW_METRIC_COLUMNS)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_mlflow_api(uri: str, experiment: str) -> tuple[list[StoreRun], pd.DataFrame]:
    import pandas as pd

    client = client_for(uri)
    with fast_fail_http():
        found = client.get_experiment_by_name(experiment)
        if found is None or found.lifecycle_stage != "active":
            return [], empty_raw_metrics()
        mlflow_runs = search_all_runs(client, found.experiment_id)
        store_runs = [
            StoreRun(run.info.run_id, run.info.run_name or "", run.info.status, run.info.start_time or 0,
                      {k: v for k, v in run.data.tags.items() if k.startswith(PREFIX)},
                      {k: v for k, v in run.data.params.items() if k in BUDGET_PARAMS})
            for run in mlflow_runs
        ]
        requests = [(run.info.run_id, key) for run in mlflow_runs if RUN_ID_TAG in run.data.tags for key in run.data.metrics]
        histories = _metric_histories(client, requests, workers=API_HTTP_WORKERS if uri.startswith("http") else 1)
    columns: dict[str, list] = {name: [] for name in RAW_METRIC_COLUMNS}
    for (mlflow_run_id, _), history in zip(requests, histories, strict=True):
        for point in history:
            columns["mlflow_run_id"].append(mlflow_run_id)
            columns["step"].append(point.step)
            columns["key"].append(point.key)
            columns["value"].append(point.value)
            columns["timestamp"].append(point.timestamp)
    return store_runs, pd.DataFrame(columns)


def _metric_histories(client, requests: list[tuple[str, str]], workers: int) -> Iterable[list]:
    def history(request: tuple[str, str]) -> list:
        return client.get_metric_history(*request)

    if workers <= 1:
        return [history(request) for request in requests]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(history, requests))


def empty_raw_metrics() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({"mlflow_run_id": [], "step": [], "key": [], "value": [], "timestamp": []}).astype(
        {"mlflow_run_id": "str", "step": "int64", "key": "str", "value": "float64", "timestamp": "int64"}
    )
