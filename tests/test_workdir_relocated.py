"""A work dir moved (`mv`) or copied (`cp -r`) uses the store it carries: its run folders find the
default store relative to where they are now, so a copy never reads or writes the original's."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from sweep_files import write_sweep
from typer.testing import CliRunner

from cancelctl.cli import app

pytestmark = pytest.mark.timeout(120)

runner = CliRunner()


def store_fingerprint(db: Path) -> tuple:
    """Bytes, mtime and row counts of a sqlite store: any write into it changes one of them."""
    con = sqlite3.connect(db.as_uri() + "?mode=ro", uri=True)
    try:
        rows = tuple(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in ("runs", "metrics", "tags"))
    finally:
        con.close()
    return hashlib.sha256(db.read_bytes()).hexdigest(), db.stat().st_mtime_ns, rows


def store_points(db: Path) -> int:
    con = sqlite3.connect(db.as_uri() + "?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM metrics").fetchone()[0]
    finally:
        con.close()


def artifact_roots(db: Path) -> set[str]:
    """Where the store's experiments and runs keep artifacts (the folder above each run's)."""
    con = sqlite3.connect(db.as_uri() + "?mode=ro", uri=True)
    try:
        roots = {row[0] for row in con.execute("SELECT artifact_location FROM experiments WHERE name != 'Default'")}
        return roots | {row[0].rsplit("/", 2)[0] for row in con.execute("SELECT artifact_uri FROM runs")}
    finally:
        con.close()


def verbs_work(workdir: Path, out: Path) -> None:
    """report, sync and status on `workdir`, each from its own store (no 'unreachable' fallback)."""
    reported = runner.invoke(app, ["report", "moved", "-w", str(workdir), "--out", str(out), "--allow-unmatched"],
                             env={"COLUMNS": "200"})
    assert reported.exit_code == 0, reported.output
    assert "unreachable" not in reported.output and "unusable" not in reported.output, reported.output
    synced = runner.invoke(app, ["sync", "-w", str(workdir)])
    assert synced.exit_code == 0, synced.output
    assert runner.invoke(app, ["status", "moved", "-w", str(workdir)]).exit_code == 0


def lose_last_upload(workdir: Path) -> None:
    """A point only in a run folder's metrics.jsonl (its run lost the store race at close): the next
    `sync` writes it into the store."""
    metrics = sorted(workdir.glob("sweeps/moved/runs/*/metrics.jsonl"))[0]
    with metrics.open("a") as handle:
        handle.write(json.dumps({"step": 2, "ts": 1, "metrics": {"late/point": 1.0}}) + "\n")


def test_a_copied_then_moved_work_dir_keeps_to_its_own_store(tmp_path):
    sweep_file = write_sweep(tmp_path, "moved", seeds=(0,), steps=2, baseline="grpo")
    original = tmp_path / "original"
    ran = runner.invoke(app, ["sweep", str(sweep_file), "-w", str(original), "--executor", "debug"])
    assert ran.exit_code == 0, ran.output
    lose_last_upload(original)
    before = store_fingerprint(original / "mlflow.db")

    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(original, copy)  # cp -r
    verbs_work(copy, tmp_path / "report-copy")
    assert store_fingerprint(original / "mlflow.db") == before  # a copy never writes into the original's store
    assert store_points(copy / "mlflow.db") == store_points(original / "mlflow.db") + 1  # the late point, in the copy's
    assert artifact_roots(copy / "mlflow.db") == {(copy / "mlartifacts").as_uri()}  # artifacts too

    copied = store_fingerprint(copy / "mlflow.db")
    moved = tmp_path / "bigger-disk" / "moved"
    moved.parent.mkdir()
    shutil.move(original, moved)  # mv
    verbs_work(moved, tmp_path / "report-moved")
    assert store_points(moved / "mlflow.db") == store_points(copy / "mlflow.db")
    assert not original.exists()  # nothing recreated where the work dir was
    assert store_fingerprint(copy / "mlflow.db") == copied


def test_only_paths_inside_the_work_dir_follow_it(tmp_path):
    from cancelctl.tracking.runfiles import run_store_uri

    launched, now = tmp_path / "launched", tmp_path / "now"
    run_dir = now / "sweeps" / "s" / "runs" / "r__abc"
    inside = {"tracking_uri": f"sqlite:///{launched}/mlflow.db", "workdir": str(launched)}
    outside = {"tracking_uri": f"sqlite:///{tmp_path}/shared/mlflow.db", "workdir": str(launched)}
    server = {"tracking_uri": "http://127.0.0.1:5000", "workdir": str(launched)}
    assert run_store_uri(inside, run_dir) == f"sqlite:///{now}/mlflow.db"
    assert run_store_uri(outside, run_dir) == outside["tracking_uri"]
    assert run_store_uri(server, run_dir) == server["tracking_uri"]
    assert run_store_uri(inside, tmp_path / "hand-made") == inside["tracking_uri"]  # not in a work dir's layout
