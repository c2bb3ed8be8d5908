"""Tracking against a real MLflow sqlite store (no mocks); a dead and a hung HTTP server for the
offline paths. One migrated template DB is copied per test: creating the schema costs ~3 s."""

from __future__ import annotations

from figures import record_figure
import json
import logging
import math
import shutil
import socket
import time
from pathlib import Path

import pandas as pd
import pytest

from cancelctl.tracking import (
    METRICS_JSONL,
    SYNC_STATE,
    RunLogger,
    collect,
    create_run,
    default_tracking_uri,
    flatten_params,
    normalize_tracking_uri,
    read_metrics_jsonl,
    sync,
    write_run_json,
)

SWEEP = "lab-demo"


@pytest.fixture
def workdir(tmp_path, template_db) -> Path:
    shutil.copy(template_db, tmp_path / "mlflow.db")
    return tmp_path


@pytest.fixture
def uri(workdir) -> str:
    return default_tracking_uri(workdir)


@pytest.fixture
def client(uri):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


@pytest.fixture
def dead_uri() -> str:
    """An HTTP URI on a free port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def run_tags(arm: str, seed: int, G: int) -> dict[str, str]:
    return {
        "cancelctl.sweep": SWEEP,
        "cancelctl.arm": arm,
        "cancelctl.seed": str(seed),
        "cancelctl.group": f"algo.G={G}",
        "cancelctl.G": str(G),
        "cancelctl.spec_hash": f"hash-{arm}-{G}-{seed}",
        "cancelctl.axes": json.dumps({"algo.G": G, "algo.lr": 1e-3}),
    }


def make_run_dir(workdir: Path, run_id: str, arm: str = "grpo", seed: int = 0, G: int = 8, **extra) -> Path:
    run_dir = workdir / SWEEP / run_id
    write_run_json(
        run_dir,
        run_id=run_id,
        name=f"{arm}-G{G}-s{seed}",
        experiment=SWEEP,
        tags=run_tags(arm, seed, G),
        params={"algo": {"name": arm, "G": G}, "seed": seed},
        **extra,
    )
    return run_dir


def plan(uri: str, workdir: Path, run_id: str, **kwargs) -> tuple[Path, str]:
    """What the planner does: run.json plus the MLflow run."""
    run_dir = make_run_dir(workdir, run_id, **kwargs)
    data = json.loads((run_dir / "run.json").read_text())
    mlflow_run_id = create_run(
        uri, SWEEP, run_id=run_id, name=data["name"], tags=data["tags"], params=data["params"]
    )
    return run_dir, mlflow_run_id


def log_steps(logger: RunLogger, steps: range, keys=("reward", "entropy", "mismatch/rho_std")) -> int:
    for step in steps:
        logger.log(step, {key: step * (index + 1) * 0.5 for index, key in enumerate(keys)})
    return len(steps) * len(keys)


def history_points(client, mlflow_run_id: str) -> int:
    run = client.get_run(mlflow_run_id)
    return sum(len(client.get_metric_history(mlflow_run_id, key)) for key in run.data.metrics)


# -- create_run ---------------------------------------------------------------------------------


def test_create_run_is_idempotent_and_tagged(uri, workdir, client):
    first = create_run(uri, SWEEP, run_id="abc123", name="grpo-s0", tags=run_tags("grpo", 0, 8),
                       params={"algo": {"G": 8, "clip": [0.2, 0.28]}, "note": "x" * 7000})
    again = create_run(uri, SWEEP, run_id="abc123", name="grpo-s0", tags={}, params={})
    assert again == first
    experiment = client.get_experiment_by_name(SWEEP)
    assert len(client.search_runs([experiment.experiment_id])) == 1
    run = client.get_run(first)
    assert run.info.status == "SCHEDULED"
    tags = run.data.tags
    assert tags["cancelctl.run_id"] == "abc123" and tags["mlflow.runName"] == "grpo-s0"
    assert tags["cancelctl.arm"] == "grpo" and tags["cancelctl.seed"] == "0"
    assert tags["cancelctl.git_sha"] and tags["cancelctl.version.mlflow"] == "3.17.2"
    assert {"cancelctl.version.torch", "cancelctl.version.cancelctl", "cancelctl.version.python"} <= set(tags)
    assert run.data.params["algo.G"] == "8"
    assert run.data.params["algo.clip"] == "[0.2, 0.28]"
    assert len(run.data.params["note"]) == 6000
    assert experiment.artifact_location == (workdir / "mlartifacts").as_uri()


def test_flatten_params_many_keys_in_batches(uri, client):
    spec = {"block": {f"k{i}": i for i in range(250)}, "empty": {}, "none": None}
    flat = flatten_params(spec)
    assert flat["block.k7"] == "7" and flat["empty"] == "{}" and flat["none"] == "None"
    mlflow_run_id = create_run(uri, SWEEP, run_id="many", name="many", tags={}, params=spec)
    assert len(client.get_run(mlflow_run_id).data.params) == 252


def test_uri_rules(tmp_path):
    assert default_tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert normalize_tracking_uri("sqlite:///rel/x.db") == f"sqlite:///{Path('rel/x.db').resolve()}"
    assert normalize_tracking_uri("http://host:5000/") == "http://host:5000"
    for file_store in (str(tmp_path / "mlruns"), f"file://{tmp_path}/mlruns"):
        with pytest.raises(ValueError, match="file store"):
            normalize_tracking_uri(file_store)


# -- RunLogger ----------------------------------------------------------------------------------


def test_logger_points_land_in_mlflow_and_jsonl(uri, workdir, client):
    run_dir, mlflow_run_id = plan(uri, workdir, "live1")
    with RunLogger(run_dir, uri, mlflow_run_id, flush_every=50) as logger:
        assert client.get_run(mlflow_run_id).info.status == "RUNNING"
        expected = log_steps(logger, range(100))
        logger.log(100, {"odd/nan": math.nan, "odd/inf": math.inf, "odd/neg_inf": -math.inf})
    assert history_points(client, mlflow_run_id) == expected + 3
    assert len(client.get_metric_history(mlflow_run_id, "entropy")) == 100
    assert math.isnan(client.get_metric_history(mlflow_run_id, "odd/nan")[0].value)
    assert client.get_run(mlflow_run_id).info.status == "FINISHED"

    jsonl = run_dir / METRICS_JSONL
    lines = jsonl.read_text().splitlines()
    strict = [json.loads(line, parse_constant=pytest.fail) for line in lines]  # no bare NaN tokens
    assert strict[-1]["metrics"] == {"odd/nan": "NaN", "odd/inf": "Infinity", "odd/neg_inf": "-Infinity"}
    assert len(read_metrics_jsonl(jsonl)) == expected + 3
    state = json.loads((run_dir / SYNC_STATE).read_text())
    progress = state["stores"][uri]
    assert progress["bytes"] == jsonl.stat().st_size and progress["points"] == expected + 3
    assert state["final_status"] == progress["status"] == "FINISHED"
    assert sync(workdir, uri).uploaded == 0


def test_logger_refuses_bad_metric_keys(uri, workdir):
    run_dir, mlflow_run_id = plan(uri, workdir, "badkey")
    logger = RunLogger(run_dir, uri, mlflow_run_id, mark_running=False)
    for bad in ("a//b", "/abs", "x?", "../up", "trailing/"):
        with pytest.raises(ValueError, match="metric key"):
            logger.log(0, {bad: 1.0})
    logger.close()


def test_dead_server_run_completes_and_sync_uploads_everything(uri, workdir, client, dead_uri, caplog):
    run_dir = make_run_dir(workdir, "offline1", tracking_uri=dead_uri)  # MLflow run never created
    caplog.set_level(logging.WARNING, logger="cancelctl.tracking")
    started = time.perf_counter()
    with RunLogger(run_dir, dead_uri, None, flush_every=20, flush_interval_s=0.0) as logger:
        expected = log_steps(logger, range(300))
    elapsed = time.perf_counter() - started
    record_figure(f"logger against a dead server: {elapsed:.3f} s for {expected} points")
    assert elapsed < 30
    assert len([r for r in caplog.records if "unusable" in r.getMessage()]) == 1
    assert len(read_metrics_jsonl(run_dir / METRICS_JSONL)) == expected

    offline = sync(workdir)  # run.json's tracking_uri: still dead -> reported, nothing lost
    assert offline.runs["offline1"].error and offline.uploaded == 0

    first = sync(workdir, uri)
    outcome = first.runs["offline1"]
    assert outcome.error is None and outcome.created and outcome.uploaded == expected
    assert history_points(client, outcome.mlflow_run_id) == expected
    run = client.get_run(outcome.mlflow_run_id)
    assert run.info.status == "FINISHED" and run.data.tags["cancelctl.arm"] == "grpo"
    assert run.data.params["algo.G"] == "8"
    assert sync(workdir, uri).uploaded == 0


def test_hung_server_costs_seconds_not_minutes(workdir):
    """A server that accepts connections but never answers (probe times out)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        hung_uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
        run_dir = make_run_dir(workdir, "hung1", tracking_uri=hung_uri)
        started = time.perf_counter()
        with RunLogger(run_dir, hung_uri, None, flush_every=10) as logger:
            expected = log_steps(logger, range(50))
        elapsed = time.perf_counter() - started
    record_figure(f"logger against a hung server: {elapsed:.2f} s")
    assert elapsed < 15
    assert len(read_metrics_jsonl(run_dir / METRICS_JSONL)) == expected


def test_requeued_run_uploads_backlog_and_collect_keeps_latest(uri, workdir, client):
    run_dir, mlflow_run_id = plan(uri, workdir, "requeued")
    crashed = RunLogger(run_dir, uri, mlflow_run_id, flush_every=45)
    log_steps(crashed, range(40))  # 120 points: 90 uploaded, 30 only in the JSONL
    crashed._jsonl.write(b'{"step": 40, "ts": 1, "metr')  # killed mid-write
    crashed._jsonl.flush()
    assert history_points(client, mlflow_run_id) == 90

    with RunLogger(run_dir, uri, None, flush_every=1000) as resumed:  # finds the run by tag
        assert resumed.mlflow_run_id == mlflow_run_id
        resumed.log(39, {"reward": 100.0})  # the resumed run re-logs step 39
        log_steps(resumed, range(40, 50))
    assert history_points(client, mlflow_run_id) == 120 + 1 + 30
    _, metrics = collect(uri, SWEEP)
    reward = metrics[(metrics.run_id == "requeued") & (metrics.key == "reward")]
    assert len(reward) == 50 and reward.set_index("step").value[39] == 100.0


# -- collect ------------------------------------------------------------------------------------


def populate_sweep(uri: str, workdir: Path) -> dict[str, int]:
    """2 arms x G in {4, 8} x 1 seed, plus seed 1 for grpo G=8; returns points per run id."""
    points = {}
    for arm, G, seed in [("grpo", 4, 0), ("grpo", 8, 0), ("gspo", 4, 0), ("gspo", 8, 0), ("grpo", 8, 1)]:
        run_id = f"{arm}-{G}-{seed}"
        run_dir, mlflow_run_id = plan(uri, workdir, run_id, arm=arm, seed=seed, G=G)
        with RunLogger(run_dir, uri, mlflow_run_id) as logger:
            points[run_id] = log_steps(logger, range(10 * G))
    return points


def assert_metric_dtypes(metrics: pd.DataFrame) -> None:
    assert list(metrics.columns) == ["run_id", "step", "key", "value"]
    assert pd.api.types.is_string_dtype(metrics.run_id) and pd.api.types.is_string_dtype(metrics.key)
    assert str(metrics.step.dtype) == "int64" and str(metrics.value.dtype) == "float64"


def test_collect_frames(uri, workdir):
    points = populate_sweep(uri, workdir)
    create_run(uri, "other-sweep", run_id="elsewhere", name="x", tags={}, params={})
    runs, metrics = collect(uri, SWEEP)
    assert len(runs) == 5 and set(runs.run_id) == set(points)
    assert list(runs.columns[:10]) == ["run_id", "mlflow_run_id", "name", "sweep", "arm", "group", "seed", "G",
                                      "state", "spec_hash"]
    assert {"axis.algo.G", "axis.algo.lr"} <= set(runs.columns)
    assert str(runs.seed.dtype) == "int64" and str(runs.G.dtype) == "int64"
    assert (runs.state == "FINISHED").all()
    row = runs.set_index("run_id").loc["gspo-4-0"]
    assert (row.arm, row.G, row.seed, row["axis.algo.G"], row["axis.algo.lr"]) == ("gspo", 4, 0, 4, 1e-3)
    assert_metric_dtypes(metrics)
    assert metrics.groupby("run_id").size().to_dict() == points
    assert not metrics.duplicated(["run_id", "step", "key"]).any()

    runs_api, metrics_api = collect(uri, SWEEP, method="api")
    assert runs_api.equals(runs) and metrics_api.equals(metrics)

    runs_none, metrics_none = collect(uri, "no-such-sweep")
    assert runs_none.empty and pd.api.types.is_string_dtype(runs_none.run_id)
    assert metrics_none.empty
    assert_metric_dtypes(metrics_none)


def test_collect_merges_jsonl_of_runs_never_uploaded(uri, workdir, dead_uri):
    points = populate_sweep(uri, workdir)
    offline_dir = make_run_dir(workdir, "offline2", arm="gspo", seed=1, G=8, tracking_uri=dead_uri)
    with RunLogger(offline_dir, dead_uri, None) as logger:
        points["offline2"] = log_steps(logger, range(25))
        logger.log(25, {"reward": math.inf})
    points["offline2"] += 1

    runs, metrics = collect(uri, SWEEP)  # store only
    assert "offline2" not in set(runs.run_id)
    runs, metrics = collect(uri, SWEEP, workdir)
    assert len(runs) == 6 and metrics.groupby("run_id").size().to_dict() == points
    offline = runs.set_index("run_id").loc["offline2"]
    assert offline.state == "FINISHED" and pd.isna(offline.mlflow_run_id) and offline.seed == 1
    assert str(runs.seed.dtype) == "int64"
    assert_metric_dtypes(metrics)
    last_reward = metrics[(metrics.run_id == "offline2") & (metrics.step == 25)].value.item()
    assert last_reward == math.inf

    sync(workdir, uri)  # after sync the store alone has everything, inf included
    _, metrics_synced = collect(uri, SWEEP)
    assert metrics_synced.groupby("run_id").size().to_dict() == points
    assert metrics_synced[(metrics_synced.run_id == "offline2") & (metrics_synced.step == 25)].value.item() == math.inf


def test_collect_takes_the_final_status_the_store_missed(uri, workdir, client):
    """Every point reached the store but the closing status did not (a busy store at close): the
    run folder's final status wins over the store's RUNNING, so the report does not drop the run."""
    run_dir, mlflow_run_id = plan(uri, workdir, "closed1")
    with RunLogger(run_dir, uri, mlflow_run_id) as logger:
        log_steps(logger, range(5))
    client.update_run(mlflow_run_id, status="RUNNING")  # the lost set_status of close()
    state = json.loads((run_dir / SYNC_STATE).read_text())
    state["stores"][uri]["status"] = "RUNNING"
    (run_dir / SYNC_STATE).write_text(json.dumps(state))
    runs, _ = collect(uri, SWEEP, workdir=workdir)
    assert runs.set_index("run_id").loc["closed1", "state"] == "FINISHED"


def test_collect_reconciles_the_store_and_the_run_folder(uri, workdir):
    """Neither copy overrides the other blindly: the union by (step, key) — points only the store holds
    (the folder's file was cut and rewritten) and points only the folder holds (after the cut, below the
    old watermark) both kept — and a point the two copies hold with different values at the same time
    named, the run folder's value used. The run's budget comes from its `budget.steps` param."""
    run_dir, mlflow_run_id = plan(uri, workdir, "reconciled")
    with RunLogger(run_dir, uri, mlflow_run_id) as logger:
        log_steps(logger, range(10))
    path = run_dir / METRICS_JSONL
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[3]["metrics"]["reward"] = 99.0  # same step and ts as the store's copy, another value
    kept = lines[:6] + [{"step": 10, "ts": lines[5]["ts"] + 1, "metrics": {"reward": 5.0}}]
    path.write_text("".join(json.dumps(line) + "\n" for line in kept))  # shorter than the old watermark

    notes: list[str] = []
    _, metrics = collect(uri, SWEEP, workdir, notes=notes)
    reward = metrics[(metrics.run_id == "reconciled") & (metrics.key == "reward")].set_index("step").value
    assert list(reward.index) == list(range(11))
    assert reward[3] == 99.0 and reward[10] == 5.0 and reward[9] == 9 * 0.5
    assert len(notes) == 1 and "reward at step 3: store 1.5, run folder 99" in notes[0]
    assert_metric_dtypes(metrics)


def test_collect_reads_the_runs_budget(uri, workdir):
    run_dir = workdir / SWEEP / "budgeted"
    params = {"budget": {"steps": 80, "prompts_per_step": 4}}
    write_run_json(run_dir, run_id="budgeted", name="grpo-s0", experiment=SWEEP, tags=run_tags("grpo", 0, 8),
                   params=params)
    create_run(uri, SWEEP, run_id="budgeted", name="grpo-s0", tags=run_tags("grpo", 0, 8), params=params)
    for method in ("sql", "api"):
        runs, _ = collect(uri, SWEEP, method=method)
        assert runs.set_index("run_id").loc["budgeted", "budget_steps"] == 80
    offline = workdir / SWEEP / "offline"
    write_run_json(offline, run_id="offline", name="grpo-s1", experiment=SWEEP, tags=run_tags("grpo", 1, 8),
                   params={"budget": {"steps": 40}})
    runs, _ = collect(uri, SWEEP, workdir)
    assert runs.set_index("run_id")["budget_steps"].to_dict() == {"budgeted": 80, "offline": 40}
    assert runs.set_index("run_id")["budget_axis"].to_dict() == {"budgeted": "steps", "offline": "steps"}


def test_collect_reads_a_compute_budgets_axis(uri, workdir):
    """A token budget: no planned step count, the budget on its axis instead (compute matching reads it)."""
    params = {"budget": {"gen_tokens": 98304, "prompts_per_step": 16}}
    create_run(uri, SWEEP, run_id="tokens", name="grpo-s0", tags=run_tags("grpo", 0, 8), params=params)
    write_run_json(workdir / SWEEP / "offline", run_id="offline", name="grpo-s1", experiment=SWEEP,
                   tags=run_tags("grpo", 1, 8), params={"budget": {"update_steps": 400}})
    for method in ("sql", "api"):
        runs, _ = collect(uri, SWEEP, workdir, method=method)
        rows = runs.set_index("run_id")
        assert rows.loc["tokens", ["budget_axis", "budget_amount"]].tolist() == ["gen_tokens", 98304]
        assert rows.loc["offline", ["budget_axis", "budget_amount"]].tolist() == ["update_steps", 400]
        assert rows["budget_steps"].isna().all()


def test_one_flatten_behind_params_and_run_json():
    """`flatten` keeps values as they are (run.json); `flatten_params` is the same keys as MLflow text."""
    from cancelctl.tracking import flatten, flatten_params

    spec = {"algorithm": {"loss": "grpo", "clip": [0.2, 0.28]}, "rollout": {"G": 8}, "extra": {}, "a.b": 1}
    flat = flatten(spec)
    assert flat == {"algorithm.loss": "grpo", "algorithm.clip": [0.2, 0.28], "rollout.G": 8, "extra": {}, "a.b": 1}
    assert list(flatten_params(spec)) == list(flat)
    assert flatten_params(spec)["rollout.G"] == "8" and flatten_params(spec)["algorithm.clip"] == "[0.2, 0.28]"


def test_run_tags_are_what_collect_reads(tmp_path):
    """The tags launch sets are the ones collect turns into columns (one owner: tracking.tags)."""
    import yaml

    from cancelctl.spec.expand import load_sweep
    from cancelctl.tracking import run_tags
    from cancelctl.tracking.tags import AXES_TAG, RUN_ID_TAG, TAG_COLUMNS, hardware_tags

    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "base": {"backend": "lab"}, "arms": {"grpo": {}},
                                    "grid": {"rollout.G": [2, 4]}, "seeds": [3]}))
    run = load_sweep(path).runs[1]
    tags = run_tags(run)
    # the hardware tags are the job's to set: what a run ran on is known where it runs
    assert set(tags) == {*TAG_COLUMNS, AXES_TAG, RUN_ID_TAG} - set(hardware_tags({}))
    assert {TAG_COLUMNS[k]: v for k, v in tags.items() if k in TAG_COLUMNS} == {
        "sweep": "t", "arm": "grpo", "group": run.group, "seed": "3", "G": "4", "spec_hash": run.spec_hash}
    assert json.loads(tags[AXES_TAG]) == {"rollout.G": 4} and tags[RUN_ID_TAG] == run.run_id


# -- many runs at once ------------------------------------------------------------------------


def _concurrent_writer(run_dir: Path, uri: str, steps: int, go) -> None:
    """One job: a RunLogger as run_in_folder opens it (no MLflow run yet: it finds/creates it)."""
    from cancelctl.tracking.runs import client_for

    client_for.cache_clear()  # forked from pytest: open no store through the parent's clients
    warnings: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("cancelctl.tracking").addHandler(handler)
    go.wait()
    logger = RunLogger(run_dir, uri, None, flush_every=40)
    for step in range(steps):
        logger.log(step, {f"m/k{k}": step + k / 10 for k in range(8)})
    logger.close("FINISHED")
    (run_dir / "failures").write_text(f"{logger.store_failures} {warnings}")
    import os

    os._exit(0)


def store_points(db_path: Path) -> dict[str, list[tuple[int, str, int]]]:
    """(step, key, timestamp) of every metric row in the sqlite file, by cancelctl run id."""
    import sqlite3

    con = sqlite3.connect(db_path.as_uri() + "?mode=ro", uri=True)
    rows = con.execute(
        "SELECT t.value, m.step, m.key, m.timestamp FROM metrics m "
        "JOIN tags t ON t.run_uuid = m.run_uuid AND t.key = 'cancelctl.run_id'"
    ).fetchall()
    con.close()
    points: dict[str, list] = {}
    for run_id, step, key, ts in rows:
        points.setdefault(run_id, []).append((step, key, ts))
    return {run_id: sorted(rows) for run_id, rows in points.items()}


def test_concurrent_writers_on_a_fresh_sqlite_store_keep_every_point(tmp_path):
    """10 jobs start at once on a store that does not exist yet: they race on the schema
    migrations, the experiment and their runs, then flush every 5 steps. After `sync` (which has
    nothing to do unless a run gave up waiting for the store on a busy host) every point of every
    metrics.jsonl is in MLflow exactly once, and there is one MLflow run per run, FINISHED."""
    import multiprocessing

    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401 - imported once, before forking
    from mlflow import MlflowClient

    writers, steps = 10, 30
    uri = default_tracking_uri(tmp_path)
    run_dirs = [make_run_dir(tmp_path, f"w{index:02d}", seed=index) for index in range(writers)]
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    processes = [ctx.Process(target=_concurrent_writer, args=(run_dir, uri, steps, go)) for run_dir in run_dirs]
    try:
        for process in processes:
            process.start()
        go.set()
        for process in processes:
            process.join(timeout=120)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
    assert [process.exitcode for process in processes] == [0] * writers
    failures = [(run_dir / "failures").read_text() for run_dir in run_dirs]
    assert not [text for text in failures if "locked" in text or "already exists" in text]  # only timeouts may pause

    jsonl = {
        run_dir.name: sorted((step, key, ts) for step, key, _, ts in read_metrics_jsonl(run_dir / METRICS_JSONL))
        for run_dir in run_dirs
    }
    assert all(len(points) == steps * 8 for points in jsonl.values())
    synced = sync(tmp_path, uri)
    assert not synced.failed
    assert store_points(tmp_path / "mlflow.db") == jsonl  # none lost, none twice
    assert sync(tmp_path, uri).uploaded == 0

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(SWEEP)
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    assert sorted(run.data.tags["cancelctl.run_id"] for run in runs) == sorted(jsonl)
    assert {run.info.status for run in runs} == {"FINISHED"}
    _, metrics = collect(uri, SWEEP)
    assert metrics.groupby("run_id").size().to_dict() == {run_id: steps * 8 for run_id in jsonl}


def test_store_lock_a_try_gives_way_and_a_wait_is_bounded(tmp_path):
    """Another process holds the sqlite store lock: a try fails at once, a wait fails after its
    timeout, both with StoreBusy (the logger keeps the points in metrics.jsonl); once it is
    released a try gets it. Other stores take no lock."""
    import multiprocessing

    from cancelctl.tracking.storelock import StoreBusy, store_write_lock

    uri = default_tracking_uri(tmp_path)
    ctx = multiprocessing.get_context("fork")
    held, release = ctx.Event(), ctx.Event()

    def holder() -> None:
        with store_write_lock(uri):
            held.set()
            release.wait(30)

    process = ctx.Process(target=holder)
    process.start()
    try:
        assert held.wait(30)
        with pytest.raises(StoreBusy), store_write_lock(uri, 0):
            pass
        started = time.perf_counter()
        with pytest.raises(StoreBusy, match="busy for over"), store_write_lock(uri, 0.3):
            pass
        assert 0.3 <= time.perf_counter() - started < 5
    finally:
        release.set()
        process.join(30)
    with store_write_lock(uri, 0), store_write_lock(uri, 0):  # free now; reentrant in one process
        pass
    with store_write_lock("http://127.0.0.1:9", 0):
        pass
