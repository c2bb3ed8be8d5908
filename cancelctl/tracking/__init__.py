"""MLflow tracking for cancelctl: one MLflow run per RunSpec, buffered metrics, offline-safe sync, bulk collect.

Store
    ``default_tracking_uri(workdir)`` is ``sqlite:///<abs workdir>/mlflow.db``. Any ``scheme://`` URI
    MLflow understands is accepted (``http(s)://`` servers, ``postgresql://`` …). Bare paths and
    ``file:`` URIs are refused: the file store is deprecated in MLflow 3. ``resolve_tracking_uri``
    picks explicit URI > ``$MLFLOW_TRACKING_URI`` > the default. One MLflow experiment per sweep
    (name = sweep name); for sqlite stores the experiment's artifact root is ``<db dir>/mlartifacts``.

Runs
    ``run_tags`` / ``tracking_target`` (``tags.py``) are the one owner of cancelctl's tag names and of
    where a run logs. ``create_run`` makes one MLflow run per cancelctl ``run_id`` (tag ``cancelctl.run_id``, found by
    tag search, never duplicated) in status SCHEDULED, with provenance tags (git SHA of the cwd repo,
    package versions) and the flattened spec as params. ``finished_runs`` finds the ones a store
    already holds FINISHED (a shared server): the launcher adopts them instead of running them again.

Files in a run folder (``run_dir``)
    ``run.json`` — written by the executor (``write_run_json`` writes it), read by ``sync``/``collect``
    and by ``RunLogger`` when it has to create the MLflow run itself::

        {
          "run_id": "3f2a9c1b7e0d",          # cancelctl run id (required)
          "name": "grpo-G=8-s0",             # MLflow run name (required)
          "experiment": "lab-demo",          # sweep name = MLflow experiment (required)
          "tags": {"cancelctl.sweep": "...", "cancelctl.arm": "...", "cancelctl.seed": "0",
                   "cancelctl.group": "...", "cancelctl.G": "8", "cancelctl.spec_hash": "...",
                   "cancelctl.axes": "{\\"algo.G\\": 8}"},      # str -> str (required, may be {})
          "params": {...},                   # spec dict, nested or flat; flattened to dotted keys
          "mlflow_run_id": null,             # informational; the tag cancelctl.run_id is authoritative
          "tracking_uri": null,              # optional: where this run logs; sync's default target
          "status": null                     # optional final status hint (FINISHED|FAILED|KILLED)
        }

    ``metrics.jsonl`` — one line per ``RunLogger.log`` call, appended and flushed immediately::

        {"step": 12, "ts": 1763822400123, "metrics": {"actor/entropy": 0.91, "x": "NaN"}}

    ``ts`` is epoch milliseconds and is reused as the MLflow timestamp, so re-uploading a line is a
    no-op in MLflow (its metric primary key includes the timestamp). Non-finite values are written as
    the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (strict JSON); ``float()`` reads them back.

    ``sync_state.json`` — upload watermark per store (atomic tmp + os.replace writes)::

        {"version": 1, "final_status": "FINISHED",
         "stores": {"sqlite:////w/mlflow.db": {"mlflow_run_id": "ab12…", "bytes": 61234,
                                               "points": 10000, "status": "FINISHED"}}}

    ``bytes`` marks the prefix of metrics.jsonl already in that store; ``status`` is the
    run status last set there; ``final_status`` is what ``RunLogger.close`` asked for. A sqlite
    store's marks also name its file (``store_id``, device:inode): marks made in another file at
    the same URI (a store rebuilt after a cut migration, a copied work dir's) count as none.

NaN / inf
    NaN is sent to MLflow as NaN (the SQL store keeps it with ``is_nan``; REST sends "NaN"); ±inf is
    sent as ±1.7976931348623157e308 (what the SQL store stores for inf anyway, so all stores agree)
    and ``collect`` maps ±max-double back to ±inf.

Failure policy
    A RunLogger whose store is unreachable (connection refused, timeout, sqlite locked, …) logs ONE
    warning, keeps writing metrics.jsonl, stops using MLflow for ``retry_interval_s`` and retries at
    close. HTTP stores are probed first (GET /health, 2 s timeout: a dead or hung server costs ≤ 2 s
    per attempt) and MLflow's own HTTP retries are cut to 1 retry, no backoff, 5 s timeout inside
    cancelctl's calls. ``sync`` uploads the rest later. A store that cannot be used at all (a
    directory, not a sqlite file, read-only, …: ``uri.sqlite_problem``) fails in stat calls,
    before MLflow's minutes of retries; one whose migration was cut is rebuilt (``storerepair``).

Many runs, one sqlite store (``storelock.py``)
    cancelctl's writes to a sqlite store take turns on ``<db>.lock`` (POSIX lock): a RunLogger's
    flushes mid-run only try it (points wait in metrics.jsonl for a later step), opening, closing
    and ``sync`` wait ≤10 s; a new store's schema is created under it (MLflow 3.17 migrates
    without a lock). ``benchmarks/bench_tracking_scale.py`` measures 32 concurrent runs.
"""

from cancelctl.tracking.collect import collect
from cancelctl.tracking.logger import RunLogger
from cancelctl.tracking.runfiles import (
    METRICS_JSONL,
    RUN_JSON,
    SYNC_STATE,
    RunRecord,
    SyncState,
    read_metrics_jsonl,
    write_run_json,
)
from cancelctl.tracking.runs import create_run, finished_runs, flatten, flatten_params, provenance_tags
from cancelctl.tracking.tags import run_tags, tracking_target
from cancelctl.tracking.sync import RunSyncResult, SyncResult, sync
from cancelctl.tracking.uri import (
    TrackingUnavailable,
    default_tracking_uri,
    normalize_tracking_uri,
    resolve_tracking_uri,
)

__all__ = [
    "METRICS_JSONL",
    "RUN_JSON",
    "SYNC_STATE",
    "RunLogger",
    "RunRecord",
    "RunSyncResult",
    "SyncResult",
    "SyncState",
    "TrackingUnavailable",
    "collect",
    "create_run",
    "finished_runs",
    "flatten",
    "default_tracking_uri",
    "flatten_params",
    "normalize_tracking_uri",
    "provenance_tags",
    "read_metrics_jsonl",
    "resolve_tracking_uri",
    "run_tags",
    "sync",
    "tracking_target",
    "write_run_json",
]
