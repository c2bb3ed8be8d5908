"""Run folders and MLflow runs, made when a sweep is launched (before anything is submitted)."""

from __future__ import annotations

import logging
from collections.abc import Container
from pathlib import Path
from typing import Any

from cancelctl.fileio import read_json
from cancelctl.jobs.outcome import write_result
from cancelctl.spec.run import RunSpec
from cancelctl.workdir import RunFolder, SweepPaths

log = logging.getLogger("cancelctl.launch")


def prepare_run(paths: SweepPaths, run: RunSpec, warnings: list[str], stores_down: Container[str] = ()) -> Path:
    """Write run.json and create the run's MLflow run (idempotent: an existing MLflow run of the
    same store is reused). A store that cannot be reached now is a warning, not a failure: the job
    creates the MLflow run from run.json when it starts, or `cancelctl sync` does later. Stores in
    `stores_down` (found unusable and said so once for the sweep) are not tried."""
    from cancelctl.tracking import create_run, flatten, run_tags, tracking_target, write_run_json
    from cancelctl.tracking.runfiles import run_store_uri

    run_dir = paths.run_dir(run.run_id, run.name)
    uri, experiment = tracking_target(run, paths.workdir)
    params = flatten(run.spec.model_dump(mode="json"))
    tags = run_tags(run)
    previous = read_json(RunFolder(run_dir).run_json) or {}
    same_store = previous.get("tracking_uri") and run_store_uri(previous, run_dir) == uri  # also after a move
    mlflow_run_id = previous.get("mlflow_run_id") if same_store else None
    if previous.get("experiment") != experiment:
        mlflow_run_id = None
    if mlflow_run_id is None and uri not in stores_down:
        try:
            mlflow_run_id = create_run(uri, experiment, run_id=run.run_id, name=run.name, tags=tags, params=params)
        except Exception as exc:  # noqa: BLE001 - reported below; the run still gets its folder
            warnings.append(f"{run.name}: MLflow run not created in {uri} ({type(exc).__name__}: {exc}); the job retries")
            log.warning(warnings[-1])
    write_run_json(
        run_dir,
        run_id=run.run_id,
        name=run.name,
        experiment=experiment,
        tags=tags,
        params=params,
        mlflow_run_id=mlflow_run_id,
        tracking_uri=uri,
        run=run.to_json(),
        cache_dir=str(paths.cache_dir),
        workdir=str(paths.workdir),
        launch_dir=str(Path.cwd()),  # what a spec's relative data paths are relative to, in the job
    )
    return run_dir


def write_adopted_result(run_dir: Path, mlflow_run: Any, uri: str) -> None:
    """result.json for a run found FINISHED in its MLflow store: `status` shows it completed, `report`
    reads its metrics from the store."""
    metrics = {str(k): float(v) for k, v in mlflow_run.data.metrics.items()}
    write_result(
        run_dir, metrics, token="", finished_at=(mlflow_run.info.end_time or 0) / 1000,
        adopted_from=f"{uri} run {mlflow_run.info.run_id}",
    )
