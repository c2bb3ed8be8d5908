"""A tracking store that cannot be used (a directory, a folder that is a file, not a sqlite file, a
read-only file or mount) is named with its cause at once by every verb that opens it; MLflow
itself retries each of these for minutes. The runs go on with their points in metrics.jsonl."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sweep_files import write_sweep
from typer.testing import CliRunner

from cancelctl.cli import app
from cancelctl.tracking import RunLogger, TrackingUnavailable, read_metrics_jsonl, write_run_json
from cancelctl.tracking.runs import client_for

# MLflow's own engine retries cost ~100 s per store open: a verb past this bound is that retry.
pytestmark = pytest.mark.timeout(60)

runner = CliRunner()


def bad_stores(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (database path, the words the cause is named with)."""
    (tmp_path / "a-dir.db").mkdir()
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "notes.db").write_text("these are notes, not a database\n")
    return {
        "directory": (tmp_path / "a-dir.db", "is a directory"),
        "folder is a file": (tmp_path / "a-file" / "mlflow.db", "is a file, not a folder"),
        "not sqlite": (tmp_path / "notes.db", "is not a sqlite database"),
    }


def make_run_folder(workdir: Path, uri: str, name: str = "r0") -> Path:
    run_dir = workdir / "sweeps" / "s" / "runs" / f"{name}__{name}id"
    write_run_json(run_dir, run_id=f"{name}id", name=name, experiment="s", tags={}, params={"a": 1}, tracking_uri=uri)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "ts": 1, "metrics": {"x": 1.0}}) + "\n")
    return run_dir


@pytest.mark.parametrize("kind", ["directory", "folder is a file", "not sqlite"])
def test_sqlite_problem_names_each_kind(tmp_path, kind):
    from cancelctl.tracking.uri import sqlite_problem

    path, words = bad_stores(tmp_path)[kind]
    assert words in sqlite_problem(path)
    assert words in sqlite_problem(path, write=False)


def test_a_new_or_empty_store_is_usable(tmp_path):
    from cancelctl.tracking.uri import sqlite_problem

    assert sqlite_problem(tmp_path / "new.db") is None
    (tmp_path / "empty.db").touch()  # sqlite's own new-database file
    assert sqlite_problem(tmp_path / "empty.db") is None


@pytest.mark.parametrize("kind", ["directory", "folder is a file", "not sqlite"])
def test_opening_an_unusable_store_fails_at_once(tmp_path, kind):
    path, words = bad_stores(tmp_path)[kind]
    with pytest.raises(TrackingUnavailable, match=words):
        client_for(f"sqlite:///{path}")


@pytest.mark.parametrize("kind", ["directory", "folder is a file", "not sqlite"])
def test_sync_names_the_store_and_cause_once(tmp_path, kind, caplog):
    path, words = bad_stores(tmp_path)[kind]
    workdir = tmp_path / "work"
    for name in ("r0", "r1", "r2"):
        make_run_folder(workdir, f"sqlite:///{path}", name)
    result = runner.invoke(app, ["sync", "-w", str(workdir)])
    assert result.exit_code == 1, result.output
    # what the terminal shows: the screen and the warnings logged beside it (stderr)
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    shown = result.output + "\n".join(logged)
    assert shown.count(words) == 1 and str(path) in result.output, shown
    assert "3 run(s) not synced" in result.output


def test_report_of_a_directory_store_reports_from_the_run_folders(tmp_path):
    """`report --uri` of a store that is a directory: the report from metrics.jsonl, the store named."""
    path, words = bad_stores(tmp_path)["directory"]
    sweep_file = write_sweep(tmp_path, "dirstore", seeds=(0,), steps=2, baseline="grpo", base={"tracking": {"uri": f"sqlite:///{path}"}})
    workdir = tmp_path / "work"
    ran = runner.invoke(app, ["sweep", str(sweep_file), "-w", str(workdir), "--executor", "debug"])
    assert ran.exit_code == 0, ran.output
    assert words in ran.output and str(path) in ran.output  # said once at launch, and again in the summary
    for metrics in workdir.glob("sweeps/dirstore/runs/*/metrics.jsonl"):
        assert {step for step, *_ in read_metrics_jsonl(metrics)} >= {1, 2}
    reported = runner.invoke(app, ["report", "dirstore", "-w", str(workdir), "--uri", f"sqlite:///{path}",
                                   "--out", str(tmp_path / "out"), "--allow-unmatched"], env={"COLUMNS": "200"})
    assert reported.exit_code == 0, reported.output
    # the note may fold at the console's width (fixed by the first console this process made): words, not lines
    shown = " ".join(reported.output.split())
    assert words in shown and "reported from the run folders" in shown, reported.output


def test_ui_of_an_unusable_store_says_why(tmp_path):
    path, words = bad_stores(tmp_path)["directory"]
    sweep_file = write_sweep(tmp_path, "uistore", seeds=(0,), steps=1, base={"tracking": {"uri": f"sqlite:///{path}"}})
    workdir = tmp_path / "work"
    assert runner.invoke(app, ["sweep", str(sweep_file), "-w", str(workdir), "--executor", "debug"]).exit_code == 0
    shown = runner.invoke(app, ["ui", "uistore", "-w", str(workdir)])
    assert shown.exit_code == 1 and words in shown.output and str(path) in shown.output, shown.output


def test_a_run_logging_to_a_directory_store_goes_on(tmp_path):
    path, _ = bad_stores(tmp_path)["directory"]
    run_dir = make_run_folder(tmp_path / "work", f"sqlite:///{path}")
    with RunLogger(run_dir, f"sqlite:///{path}") as logger:
        for step in range(2, 5):
            logger.log(step, {"x": float(step)})
    assert logger.store_failures >= 1
    assert [step for step, *_ in read_metrics_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]


def _read_only_mount_works() -> bool:
    if shutil.which("unshare") is None or sys.platform != "linux":
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount --bind / /mnt 2>/dev/null || mount -t tmpfs none /mnt"],
                           capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not _read_only_mount_works(), reason="needs unshare -rm (user and mount namespaces)")
def test_sync_to_a_store_on_a_read_only_mount_says_so(tmp_path, template_db):
    """A real read-only bind mount, in a user+mount namespace of its own (chmod does not stop root)."""
    store_dir = tmp_path / "ro-store"
    store_dir.mkdir()
    shutil.copy(template_db, store_dir / "mlflow.db")
    workdir = tmp_path / "work"
    make_run_folder(workdir, f"sqlite:///{store_dir}/mlflow.db")
    script = (f"mount --bind {store_dir} {store_dir} && mount -o remount,bind,ro {store_dir} && "
              f"exec {sys.executable} -m cancelctl.cli sync -w {workdir}")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=50, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "read-only" in output and str(store_dir / "mlflow.db") in output, output
    assert "Traceback" not in output
