"""Bulk read of a sweep from MLflow into two tidy frames, with the run folders' JSONL as fallback.

The store's rows come from `store_rows` (a sqlite fast path, or the MLflow API); this module makes
the frames of them and reconciles them with the run folders' copy of every point.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from cancelctl.tracking.runfiles import (
    METRICS_JSONL,
    RunRecord,
    StoreProgress,
    SyncState,
    find_run_dirs,
    iter_metrics_lines,
)
from cancelctl.tracking.runs import flatten
from cancelctl.tracking.store_rows import BUDGET_PARAMS, Method, StoreRun, empty_raw_metrics, read_store
from cancelctl.tracking.tags import AXES_TAG, HARDWARE_COLUMNS, RUN_ID_TAG, TAG_COLUMNS
from cancelctl.tracking.upload import MAX_DOUBLE
from cancelctl.tracking.uri import normalize_tracking_uri

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("cancelctl.tracking")

INT_COLUMNS = ("seed", "G", "budget_steps", "budget_amount")
TEXT_COLUMNS = ("run_id", "mlflow_run_id", "name", "sweep", "arm", "group", "state", "spec_hash", "budget_axis",
                *HARDWARE_COLUMNS.values())  # hardware: what each run's latest attempt ran on
RUN_COLUMNS = [
    "run_id", "mlflow_run_id", "name", "sweep", "arm", "group", "seed", "G", "state", "spec_hash", "budget_steps",
    "budget_axis", "budget_amount", *HARDWARE_COLUMNS.values(),
]
METRIC_COLUMNS = ["run_id", "step", "key", "value"]


def collect(
    uri: str, experiment: str, workdir: Path | None = None, *, method: Method = "auto",
    notes: list[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All runs of `experiment` (a sweep) and their metric points.

    runs: one row per cancelctl run — run_id (cancelctl id), mlflow_run_id (NA if never in the
    store), name, sweep, arm, group, seed and G (int64; nullable Int64 if a run lacks the tag),
    state (MLflow status, or the run folder's final status / "UNKNOWN" for runs only on disk),
    spec_hash, budget_steps (the `budget.steps` param: planned training steps; NA if unknown or a
    compute budget), budget_axis and budget_amount (steps | gen_tokens | update_steps: the `budget.*`
    param the run has, and its value; NA if unknown), and
    one `axis.<path>` column per key of the cancelctl.axes tag. MLflow runs without a
    cancelctl.run_id tag are ignored.
    metrics: run_id (str), step (int64), key (str), value (float64; NaN kept, ±inf restored),
    one row per (run_id, step, key) — the latest point wins (resumed runs re-log steps).

    With `workdir`, the run folders' copy (metrics.jsonl) of this sweep's runs is reconciled with the
    store's: the union of both by (run, step, key) (the part of a file below its upload watermark is
    the store's copy and not read again, unless the file was written anew: shorter than the watermark,
    or the watermark not at a line end); where both hold a point and the values differ,
    the later timestamp wins (a resumed run re-logged the step), and at the same timestamp the run
    folder's value is used and the conflict is appended to `notes` (when given). `method`: "sql"
    forces the sqlite fast path, "api" the MLflow client, "auto" the fast path where possible.
    """
    uri = normalize_tracking_uri(uri)
    store_runs, raw_metrics = read_store(uri, experiment, method)
    runs = _runs_frame(store_runs)
    metrics = _metrics_frame(raw_metrics, dict(zip(runs["mlflow_run_id"], runs["run_id"], strict=True)))
    if workdir is not None:
        runs, metrics = _merge_run_folders(runs, metrics, Path(workdir), uri, experiment, notes)
    return runs, metrics[METRIC_COLUMNS]


def collect_run_folders(uri: str, experiment: str, workdir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`collect` from the run folders alone (every point of metrics.jsonl), for when the tracking
    store cannot be reached: the same frames, states from the run folders."""
    runs = _runs_frame([])
    metrics = _metrics_frame(empty_raw_metrics(), {})
    runs, metrics = _merge_run_folders(runs, metrics, Path(workdir), normalize_tracking_uri(uri), experiment)
    return runs, metrics[METRIC_COLUMNS]


# -- building the frames ------------------------------------------------------------------------


def _runs_frame(store_runs: list[StoreRun]) -> pd.DataFrame:
    """One row per cancelctl run id (the oldest MLflow run if a run id appears twice)."""
    rows, seen = [], set()
    for run in sorted(store_runs, key=lambda run: run.start_time):
        run_id = run.tags.get(RUN_ID_TAG)
        if run_id is None or run_id in seen:
            continue
        seen.add(run_id)
        rows.append(_run_row(run_id, run.mlflow_run_id, run.name, run.state, run.tags, run.budget))
    return _typed_runs_frame(rows)


def _run_row(
    run_id: str, mlflow_run_id: str | None, name: str, state: str, tags: dict[str, str], budget: dict | None = None
) -> dict:
    row = {"run_id": run_id, "mlflow_run_id": mlflow_run_id, "name": name, "state": state, **_budget_columns(budget)}
    row.update({column: tags.get(tag) for tag, column in TAG_COLUMNS.items()})
    try:
        axes = json.loads(tags.get(AXES_TAG) or "{}")
    except ValueError:
        log.warning("run %s: tag %s is not JSON: %r", run_id, AXES_TAG, tags.get(AXES_TAG))
        axes = {}
    row.update({f"axis.{path}": value for path, value in axes.items()})
    return row


def _typed_runs_frame(rows: list[dict]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame(rows)
    axis_columns = sorted(column for column in frame.columns if column.startswith("axis."))
    frame = frame.reindex(columns=RUN_COLUMNS + axis_columns)
    if frame.empty:  # nothing to infer from: give text columns a text dtype, not float64
        frame = frame.astype(dict.fromkeys(TEXT_COLUMNS, str))
    for column in INT_COLUMNS:
        numbers = pd.to_numeric(frame[column], errors="coerce").astype("Int64")
        frame[column] = numbers.astype("int64") if len(numbers) and numbers.notna().all() else numbers
    return frame.reset_index(drop=True)


def _metrics_frame(raw: pd.DataFrame, run_ids: dict[str, str]) -> pd.DataFrame:
    """Raw store rows -> tidy frame keyed by cancelctl run id, ±max double back to ±inf, deduped."""
    import numpy as np

    raw = raw[raw["mlflow_run_id"].isin(run_ids.keys())]
    value = raw["value"].to_numpy(dtype="float64")
    value = np.where(value == MAX_DOUBLE, np.inf, np.where(value == -MAX_DOUBLE, -np.inf, value))
    frame = raw.assign(run_id=raw["mlflow_run_id"].map(run_ids), value=value)
    return _latest_per_point(frame)


def _latest_per_point(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (run_id, step, key), the latest timestamp winning (later rows win ties); the
    timestamp is kept for reconciling with the run folders (`collect` returns METRIC_COLUMNS)."""
    frame = frame.astype({"step": "int64", "timestamp": "int64", "value": "float64"})
    frame = frame.sort_values("timestamp", kind="stable")
    frame = frame.drop_duplicates(["run_id", "step", "key"], keep="last")
    frame = frame.sort_values(["run_id", "key", "step"], kind="stable")
    return frame[[*METRIC_COLUMNS, "timestamp"]].reset_index(drop=True)


# -- the run folders' copy ----------------------------------------------------------------------

CONFLICTS_SHOWN = 3  # per run, in its note


def _merge_run_folders(
    runs: pd.DataFrame, metrics: pd.DataFrame, workdir: Path, uri: str, experiment: str,
    notes: list[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Reconcile the store's copy with what the run folders of this sweep hold (`collect`)."""
    import pandas as pd

    in_store = set(runs["run_id"])
    new_rows, points, budgets, names = [], [], {}, {}
    for run_dir in find_run_dirs(workdir):
        try:
            record = RunRecord.load(run_dir)
        except (OSError, ValueError) as exc:
            log.warning("skipping %s: %s", run_dir, exc)
            continue
        if record.experiment != experiment:
            continue
        state = SyncState.load(run_dir)
        progress = state.stores.get(uri)
        names[record.run_id] = record.name
        flat = flatten(record.params)  # run.json: flattened, or nested
        budgets[record.run_id] = {k: flat[k] for k in BUDGET_PARAMS if flat.get(k) is not None}
        start = _uploaded_prefix(run_dir / METRICS_JSONL, progress) if record.run_id in in_store else 0
        lines = iter_metrics_lines(run_dir / METRICS_JSONL, start)
        # file order is the order the run logged in: a step re-logged after a resume comes later
        points.extend((record.run_id, line.step, key, value, line.ts) for line in lines for key, value in line.metrics.items())
        if record.run_id not in in_store:
            status = state.final_status or (record.status or "UNKNOWN").upper()
            mlflow_run_id = progress.mlflow_run_id if progress is not None else None
            new_rows.append(_run_row(record.run_id, mlflow_run_id, record.name, status, record.tags, budgets[record.run_id]))
        elif state.final_status and (
            progress is None or progress.status != state.final_status or _size(run_dir / METRICS_JSONL) > progress.bytes
        ):
            # the store missed the end of the run (its last points, or only the status: a busy store
            # at close); the run folder knows how it ended
            runs.loc[runs["run_id"] == record.run_id, "state"] = state.final_status
    if new_rows:
        runs = _typed_runs_frame(runs.to_dict("records") + new_rows)
    runs = _fill_budgets(runs, budgets)
    if points:
        local = pd.DataFrame(points, columns=["run_id", "step", "key", "value", "timestamp"])
        local = local.astype({"step": "int64", "timestamp": "int64", "value": "float64"})
        local = local.drop_duplicates(["run_id", "step", "key"], keep="last")
        metrics, conflicts = _reconcile(metrics, local)
        if notes is not None:
            notes.extend(_conflict_notes(conflicts, names))
    return runs, metrics


def _uploaded_prefix(path: Path, progress: StoreProgress | None) -> int:
    """Bytes of metrics.jsonl known to be in the store as they are (the watermark), so not read again;
    0 (read it all and compare point by point) when the file is not the one that was uploaded: shorter
    than the watermark, or the watermark not at a line end (the folder deleted and written anew)."""
    if progress is None or progress.bytes <= 0:
        return 0
    try:
        with open(path, "rb") as handle:
            handle.seek(progress.bytes - 1)
            return progress.bytes if handle.read(1) == b"\n" else 0
    except (FileNotFoundError, OSError, ValueError):
        return 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _budget_columns(budget: dict | None) -> dict[str, object]:
    """budget_steps, budget_axis, budget_amount from the `budget.*` params a run has."""
    budget = budget or {}
    key = next((k for k in BUDGET_PARAMS if budget.get(k) is not None), None)
    return {"budget_steps": budget.get(BUDGET_PARAMS[0]), "budget_axis": key and key.removeprefix("budget."),
            "budget_amount": key and budget[key]}


def _fill_budgets(runs: pd.DataFrame, budgets: dict[str, dict]) -> pd.DataFrame:
    """The budget the store lacks (a run created before its params were logged) from run.json."""
    missing = runs["budget_axis"].isna() & runs["run_id"].isin(budgets.keys())
    if not missing.any():
        return runs
    rows = runs.to_dict("records")
    for row, fill in zip(rows, missing, strict=True):
        if fill:
            row.update(_budget_columns(budgets[row["run_id"]]))
    return _typed_runs_frame(rows)


def _reconcile(store: pd.DataFrame, local: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Union of the store's points and the run folders' by (run_id, step, key). Where both hold a
    point with different values, the later timestamp wins (a resumed run re-logged the step and the
    store has not caught up, or the other way round); at the same timestamp the two copies of one
    logged point disagree: the run folder's value is used (the store's copy is an upload of it) and
    the conflict is returned. Returns (metrics, conflicts: run_id, step, key, store, folder)."""
    import numpy as np
    import pandas as pd

    merged = store.merge(
        local, on=["run_id", "step", "key"], how="outer", suffixes=("_store", "_folder"), indicator=True
    )
    both = merged["_merge"] == "both"
    v_store, v_folder = merged["value_store"].to_numpy(float), merged["value_folder"].to_numpy(float)
    same = (v_store == v_folder) | (np.isnan(v_store) & np.isnan(v_folder))
    store_newer = merged["timestamp_store"] > merged["timestamp_folder"]
    take_store = (merged["_merge"] == "left_only") | (both & same) | (both & ~same & store_newer)
    conflict = both & ~same & (merged["timestamp_store"] == merged["timestamp_folder"])
    value = np.where(take_store, v_store, v_folder)
    timestamp = np.where(take_store, merged["timestamp_store"].fillna(0), merged["timestamp_folder"].fillna(0))
    out = merged.assign(value=value, timestamp=timestamp)[[*METRIC_COLUMNS, "timestamp"]]
    out = out.astype({"step": "int64", "value": "float64", "timestamp": "int64"})
    out = out.sort_values(["run_id", "key", "step"], kind="stable")
    conflicts = merged.loc[conflict, ["run_id", "step", "key", "value_store", "value_folder"]]
    conflicts = pd.DataFrame(conflicts).rename(columns={"value_store": "store", "value_folder": "folder"})
    return out.reset_index(drop=True), conflicts.reset_index(drop=True)


def _conflict_notes(conflicts: pd.DataFrame, names: dict[str, str]) -> list[str]:
    notes = []
    for run_id, part in conflicts.groupby("run_id", sort=True):
        shown = "; ".join(
            f"{row.key} at step {row.step}: store {row.store:g}, run folder {row.folder:g}"
            for row in part.head(CONFLICTS_SHOWN).itertuples()
        )
        more = f" (and {len(part) - CONFLICTS_SHOWN} more)" if len(part) > CONFLICTS_SHOWN else ""
        notes.append(
            f"{names.get(run_id, run_id)}: {len(part)} point(s) differ between the tracking store and the run "
            f"folder's metrics.jsonl at the same step and time — {shown}{more}; the run folder's values are used"
        )
    return notes
