"""MLflow experiments and runs: one run per cancelctl run_id, provenance tags, flattened params.

mlflow is imported inside functions: it costs seconds (benchmarks/bench_tracking.py prints it) and
`import cancelctl.tracking` must stay cheap.
"""

from __future__ import annotations

import functools
import json
import logging
import platform
import sqlite3
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cancelctl.tracking.storelock import STORE_CREATE_TIMEOUT_S, sqlite_schema_exists, store_write_lock
from cancelctl.tracking.storerepair import cut_migration, rebuild_store
from cancelctl.tracking.tags import GIT_SHA_TAG, MLFLOW_GIT_COMMIT_TAG, RUN_ID_TAG, RUN_NAME_TAG, VERSION_TAG_PREFIX
from cancelctl.tracking.uri import TrackingUnavailable, fast_fail_http, normalize_tracking_uri, sqlite_path, sqlite_problem

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger("cancelctl.tracking")

VERSIONED_PACKAGES = ("cancelctl", "torch", "mlflow")

MAX_PARAM_VALUE_CHARS = 6000  # MLflow's limit
MAX_TAG_VALUE_CHARS = 8000
MAX_PARAMS_PER_BATCH = 100


@functools.lru_cache(maxsize=8)
def client_for(uri: str) -> MlflowClient:
    """One MlflowClient per store per process (MLflow caches the SQL engine behind it too).

    A new sqlite store is created under the store lock: the client's constructor builds the store,
    which on a new file runs MLflow's schema migrations, and MLflow 3.17 runs them without a lock,
    so concurrent first opens (a sweep's jobs starting together) corrupt the schema for good
    (`table _alembic_tmp_experiments already exists`). Opening an existing store (MLflow's schema
    check) needs no lock."""
    from mlflow import MlflowClient

    # MLflow announces creating/migrating a new sqlite store at INFO on every first sweep: noise
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    db_path = sqlite_path(uri)
    if db_path is not None:
        problem = sqlite_problem(db_path, write=False)  # MLflow would retry these for minutes
        if problem:
            raise TrackingUnavailable(f"tracking store {uri} unusable: {problem}")
        if not sqlite_schema_exists(db_path):  # a store only read (a read-only archive) takes no lock
            with store_write_lock(uri, STORE_CREATE_TIMEOUT_S):
                if not sqlite_schema_exists(db_path):  # whoever created it did so under this lock: complete
                    return open_sqlite_store(uri, db_path)
        if sqlite_problem(db_path) is None and _artifact_roots_elsewhere(db_path):  # a read, no lock: the rare case writes
            with store_write_lock(uri, STORE_CREATE_TIMEOUT_S):
                follow_moved_store(db_path)
        return open_sqlite_store(uri, db_path)
    return MlflowClient(tracking_uri=uri)


def open_sqlite_store(uri: str, db_path: Path) -> MlflowClient:
    """MlflowClient of a sqlite store; a store whose schema migration was cut part way (a full disk
    mid-migration leaves `_alembic_tmp_*` tables or half a migration, and every later open fails
    for good) is rebuilt once space is back (`storerepair`)."""
    from mlflow import MlflowClient

    try:
        return MlflowClient(tracking_uri=uri)
    except Exception as exc:  # noqa: BLE001 - only a cut migration is handled; the rest is raised as it was
        why = cut_migration(db_path, exc)
        if why is None:
            raise
    with store_write_lock(uri, STORE_CREATE_TIMEOUT_S):
        try:
            return MlflowClient(tracking_uri=uri)  # rebuilt by another process while this one waited
        except Exception as exc:  # noqa: BLE001
            why = cut_migration(db_path, exc)
            if why is None:
                raise
        rebuild_store(db_path, why)
        _forget_engine(uri)
        return MlflowClient(tracking_uri=uri)


def _forget_engine(uri: str) -> None:
    """Drop MLflow's cached engine of `uri`: its pooled connections are to the file moved aside."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    engine = getattr(SqlAlchemyStore, "_engine_map", {}).pop(uri, None)
    if engine is not None:
        engine.dispose()


_DEFAULT_ROOTS = "SELECT DISTINCT artifact_location FROM experiments WHERE artifact_location LIKE 'file://%/mlartifacts'"


def _artifact_roots_elsewhere(db_path: Path) -> bool:
    """Whether experiments of the store keep artifacts in an `mlartifacts` not beside it now."""
    own = (db_path.parent / "mlartifacts").as_uri()
    try:
        con = sqlite3.connect(db_path.as_uri() + "?mode=ro", uri=True, timeout=STORE_CREATE_TIMEOUT_S)
        try:
            return any(root != own for (root,) in con.execute(_DEFAULT_ROOTS))
        finally:
            con.close()
    except sqlite3.Error:  # MLflow's own open says what is wrong with the store
        return False


def follow_moved_store(db_path: Path) -> None:
    """A sqlite store copied or moved with its work dir (`cp -r`, `mv`) still names the artifact
    root beside it where it was made (`<old dir>/mlartifacts`, see `_artifact_location`): point
    its experiments and runs at the one beside it now, so a copy never writes into the original's."""
    own = (db_path.parent / "mlartifacts").as_uri()
    con = sqlite3.connect(db_path, timeout=STORE_CREATE_TIMEOUT_S)
    try:
        with con:
            found = con.execute(_DEFAULT_ROOTS).fetchall()
            for (old,) in found:
                if old == own:
                    continue
                con.execute("UPDATE experiments SET artifact_location = ? WHERE artifact_location = ?", (own, old))
                con.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE substr(artifact_uri, 1, ?) = ?",
                            (own, len(old) + 1, len(old) + 1, old + "/"))
    except sqlite3.Error as exc:  # MLflow's own open says what is wrong with the store
        log.debug("%s: artifact roots not checked (%s)", db_path, exc)
    finally:
        con.close()


def create_run(
    uri: str,
    experiment: str,
    *,
    run_id: str,
    name: str,
    tags: Mapping[str, str],
    params: Mapping[str, Any],
) -> str:
    """The MLflow run id of cancelctl run `run_id` in `experiment`, creating it (status SCHEDULED) if
    no run of the experiment carries tag cancelctl.run_id == run_id. Never creates duplicates
    (within one process at a time: the planner creates runs sequentially)."""
    mlflow_run_id, _ = get_or_create_run(uri, experiment, run_id=run_id, name=name, tags=tags, params=params)
    return mlflow_run_id


def get_or_create_run(
    uri: str,
    experiment: str,
    *,
    run_id: str,
    name: str,
    tags: Mapping[str, str],
    params: Mapping[str, Any],
) -> tuple[str, bool]:
    """(mlflow run id, whether it was created now)."""
    uri = normalize_tracking_uri(uri)
    client = client_for(uri)
    flat_params = flatten_params(params)
    # under the store lock, find-then-create is atomic on sqlite: no duplicate runs for one run id
    with fast_fail_http(), store_write_lock(uri):
        experiment_id = get_or_create_experiment(client, uri, experiment)
        existing = find_run(client, experiment_id, run_id)
        if existing is not None:
            # A crash between creating the run and logging its params leaves it without them.
            if flat_params and not existing.data.params:
                log_params(client, existing.info.run_id, flat_params)
            return existing.info.run_id, False
        all_tags = {**provenance_tags(), **{k: str(v) for k, v in tags.items()}, RUN_ID_TAG: run_id, RUN_NAME_TAG: name}
        all_tags = {key: value[:MAX_TAG_VALUE_CHARS] for key, value in all_tags.items()}
        run = client.create_run(experiment_id, tags=all_tags, run_name=name)
        log_params(client, run.info.run_id, flat_params)
        client.update_run(run.info.run_id, status="SCHEDULED")  # planned, not started
        return run.info.run_id, True


def get_or_create_experiment(client: MlflowClient, uri: str, name: str) -> str:
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return client.create_experiment(name, artifact_location=_artifact_location(uri))
        except MlflowException as exc:  # created concurrently by another process
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            experiment = client.get_experiment_by_name(name)
    if experiment.lifecycle_stage == "deleted":
        log.warning("restoring deleted MLflow experiment %r to log into it", name)
        client.restore_experiment(experiment.experiment_id)
    return experiment.experiment_id


def _artifact_location(uri: str) -> str | None:
    """Next to the sqlite file instead of MLflow's default './mlruns' under whatever the cwd is."""
    path = sqlite_path(uri)
    return (path.parent / "mlartifacts").as_uri() if path is not None else None


def finished_runs(uri: str, experiment: str, run_ids: set[str]) -> dict[str, Any]:
    """The FINISHED MLflow runs of `experiment` tagged with one of `run_ids`: run_id -> mlflow Run
    (its `data.metrics` holds each metric's last value). One paged search, not one per run."""
    if not run_ids:
        return {}
    uri = normalize_tracking_uri(uri)
    client = client_for(uri)
    with fast_fail_http():
        experiment_obj = client.get_experiment_by_name(experiment)
        if experiment_obj is None:
            return {}
        found: dict[str, Any] = {}
        for run in search_all_runs(client, experiment_obj.experiment_id, "attributes.status = 'FINISHED'"):
            run_id = run.data.tags.get(RUN_ID_TAG)
            if run_id in run_ids and run_id not in found:
                found[run_id] = run
        return found


def search_all_runs(client: MlflowClient, experiment_id: str, filter_string: str = "") -> list:
    """Every run of the experiment matching `filter_string`, through all of search_runs' pages."""
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=filter_string, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def find_run(client: MlflowClient, experiment_id: str, run_id: str):
    """The active MLflow run tagged cancelctl.run_id == run_id (the oldest if several), or None."""
    if "'" in run_id or "\\" in run_id:
        raise ValueError(f"run_id {run_id!r} must not contain quotes or backslashes")
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'",
        max_results=10,
        order_by=["attributes.start_time ASC"],
    )
    return runs[0] if runs else None


def log_params(client: MlflowClient, mlflow_run_id: str, flat_params: Mapping[str, str]) -> None:
    from mlflow.entities import Param

    items = [Param(key, value) for key, value in flat_params.items()]
    for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
        client.log_batch(mlflow_run_id, params=items[start : start + MAX_PARAMS_PER_BATCH], synchronous=True)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'algo': {'G': 8}} -> {'algo.G': 8}: nested mappings to dotted keys, values as they are
    (empty mappings stay values). Already-dotted keys pass through unchanged."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, prefix=f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def flatten_params(spec: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{'algo': {'G': 8}} -> {'algo.G': '8'}: `flatten`, then lists and empty dicts become JSON and
    values are cut to MLflow's 6000-char limit."""
    return {key: _param_text(value)[:MAX_PARAM_VALUE_CHARS] for key, value in flatten(spec, prefix).items()}


def _param_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, Mapping)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


@functools.lru_cache(maxsize=1)
def provenance_tags() -> dict[str, str]:
    """Git SHA of the cwd's repo ("unknown" outside one) and versions of cancelctl, torch, mlflow,
    python. Versions come from package metadata, so nothing heavy gets imported."""
    sha = _git_sha()
    tags = {GIT_SHA_TAG: sha, MLFLOW_GIT_COMMIT_TAG: sha}
    for package in VERSIONED_PACKAGES:
        try:
            tags[VERSION_TAG_PREFIX + package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            tags[VERSION_TAG_PREFIX + package] = "not installed"
    tags[VERSION_TAG_PREFIX + "python"] = platform.python_version()
    return tags


def _git_sha() -> str:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    sha = result.stdout.strip()
    return sha if result.returncode == 0 and sha else "unknown"
