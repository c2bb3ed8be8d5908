"""A sqlite store whose schema migration was cut (a full disk mid-migration) works again once space
is back: rebuilt, the damaged one kept with the reason, every point uploaded again from the run
folders."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sweep_files import write_sweep
from typer.testing import CliRunner

from cancelctl.cli import app
from cancelctl.tracking import read_metrics_jsonl
from cancelctl.tracking.runs import client_for

pytestmark = pytest.mark.timeout(120)

runner = CliRunner()

# what MLflow's alembic migration leaves when the disk fills while it rebuilds the experiments table
CUT_REVISION = "c8d9e0f1a2b3"


def cut_by_hand(db: Path) -> None:
    """The leftovers of a cut migration, built with sqlite3: its temporary table, the older revision,
    a table of a later migration not made yet."""
    con = sqlite3.connect(db)
    with con:
        con.execute("CREATE TABLE _alembic_tmp_experiments AS SELECT * FROM experiments WHERE 0")
        con.execute("UPDATE alembic_version SET version_num = ?", (CUT_REVISION,))
        con.execute("DROP TABLE job_locks")
    con.close()


def cut_by_a_full_disk(db: Path) -> None:
    """A real ENOSPC: MLflow migrates a new store on a tmpfs too small for it (in a user and mount
    namespace of its own); the store it leaves is copied out, as if space had come back."""
    db.unlink()
    mnt = db.parent / "small-disk"
    mnt.mkdir()
    size_kib = 700  # a migrated store takes ~950 KiB: the migration stops part way
    make = f"from mlflow import MlflowClient\ntry:\n MlflowClient(tracking_uri='sqlite:///{mnt}/mlflow.db')\nexcept Exception:\n pass\n"
    script = f"mount -t tmpfs -o size={size_kib}k none {mnt} && {sys.executable} -c \"{make}\" && cp {mnt}/mlflow.db {db}"
    subprocess.run(["unshare", "-rm", "sh", "-c", script], check=True, capture_output=True, timeout=100)


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False).returncode == 0


def as_a_new_process(uri: str) -> None:
    """Forget this process's open store (cancelctl's client, MLflow's store and engine): what
    follows opens it anew, as the next command would."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking._tracking_service.registry import TrackingStoreRegistry

    client_for.cache_clear()
    TrackingStoreRegistry._get_store_with_resolved_uri.cache_clear()
    engine = SqlAlchemyStore._engine_map.pop(uri, None)
    if engine is not None:
        engine.dispose()


def metrics_rows(db: Path) -> int:
    con = sqlite3.connect(db.as_uri() + "?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM metrics").fetchone()[0]
    finally:
        con.close()


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """A work dir with a tiny finished sweep (made once; each test cuts the store of its own copy)."""
    tmp = tmp_path_factory.mktemp("swept")
    sweep_file = write_sweep(tmp, "cut", seeds=(0,), steps=2, baseline="grpo")
    ran = runner.invoke(app, ["sweep", str(sweep_file), "-w", str(tmp / "work"), "--executor", "debug"])
    assert ran.exit_code == 0, ran.output
    return tmp / "work"


@pytest.mark.parametrize("cut", [
    cut_by_hand,
    pytest.param(cut_by_a_full_disk, marks=pytest.mark.skipif(not _namespaces_work(), reason="needs unshare -rm")),
])
def test_a_store_cut_mid_migration_is_rebuilt_with_every_point(tmp_path, swept, cut):
    workdir = tmp_path / "work"
    shutil.copytree(swept, workdir)
    points = sum(len(read_metrics_jsonl(path)) for path in workdir.glob("sweeps/cut/runs/*/metrics.jsonl"))
    db = workdir / "mlflow.db"
    cut(db)
    as_a_new_process(f"sqlite:///{db}")

    synced = runner.invoke(app, ["sync", "-w", str(workdir)])
    assert synced.exit_code == 0, synced.output
    assert metrics_rows(db) == points  # every point, from the run folders
    damaged = list(workdir.glob("mlflow.db.damaged-*.txt"))
    assert len(damaged) == 1 and "migration was cut part way" in damaged[0].read_text()
    assert Path(str(damaged[0]).removesuffix(".txt")).is_file()  # the damaged store is kept
    reported = runner.invoke(app, ["report", "cut", "-w", str(workdir), "--out", str(tmp_path / "out"),
                                   "--allow-unmatched"], env={"COLUMNS": "200"})
    assert reported.exit_code == 0 and "unreachable" not in reported.output, reported.output
