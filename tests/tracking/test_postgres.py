"""Tracking on a real database: a lab sweep logging to PostgreSQL directly (`postgresql://`, the
password in PGPASSWORD or a 0600 ~/.pgpass), and through MLflow's tracking server with its
basic-auth app backed by PostgreSQL (the user's name and password in MLFLOW_TRACKING_USERNAME and
MLFLOW_TRACKING_PASSWORD); the report reads the runs back from the store; a wrong password is one
line and exit 2, no traceback, no password. Each test starts its own PostgreSQL (Debian's package,
benchmarks/postgres_server.py) on 127.0.0.1; skipped where it is not installed."""

from __future__ import annotations

import pytest
from sweep_files import write_sweep
from typer.testing import CliRunner

from benchmarks.postgres_server import create_mlflow_user, missing_reason, mlflow_auth_server, postgres_server
from cancelctl.cli import app
from cancelctl.tracking import read_metrics_jsonl
from cancelctl.tracking.uri import probe_store

MISSING = missing_reason()
pytestmark = [pytest.mark.postgres, pytest.mark.skipif(MISSING is not None, reason=MISSING or ""),
              pytest.mark.timeout(300)]

runner = CliRunner()


@pytest.fixture
def pg(monkeypatch, tmp_path):
    for name in ("PGPASSWORD", "PGPASSFILE", "MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.pgpass or ~/.mlflow/credentials but the test's
    (tmp_path / "home").mkdir()
    with postgres_server() as server:
        yield server


def jsonl_points(workdir) -> int:
    return sum(1 for path in workdir.glob("sweeps/*/runs/*/metrics.jsonl") for _ in read_metrics_jsonl(path))


def files_holding(folder, text: str) -> list[str]:
    return [str(path) for path in folder.rglob("*") if path.is_file() and text.encode() in path.read_bytes()]


def sweep_and_report(tmp_path, name: str, uri: str):
    sweep_file = write_sweep(tmp_path, name, seeds=(0,), steps=2, baseline="grpo", base={"tracking": {"uri": uri}})
    workdir = tmp_path / "work"
    ran = runner.invoke(app, ["sweep", str(sweep_file), "-w", str(workdir), "--executor", "debug"])
    assert ran.exit_code == 0, ran.output
    reported = runner.invoke(app, ["report", name, "-w", str(workdir), "--out", str(tmp_path / "report"),
                                   "--allow-unmatched"], env={"COLUMNS": "200"})
    assert reported.exit_code == 0, reported.output
    assert "reported from the run folders" not in reported.output  # read back from the store
    assert (tmp_path / "report" / "report.md").is_file()
    return sweep_file, workdir, ran.output + reported.output


def refused_launch(tmp_path, sweep_file, password: str, words: str) -> None:
    ran = runner.invoke(app, ["sweep", str(sweep_file), "-w", str(tmp_path / "work-refused"), "--executor", "debug"])
    assert ran.exit_code == 2, ran.output
    assert ran.output.count(words) == 1, ran.output
    assert password not in ran.output and "Traceback" not in ran.output
    assert not list((tmp_path / "work-refused").glob("sweeps/*/runs/*/metrics.jsonl"))


def test_a_lab_sweep_logs_to_postgresql_with_the_password_from_the_environment(pg, tmp_path, monkeypatch):
    uri = pg.create_database("mlflow")
    assert pg.password not in uri
    monkeypatch.setenv("PGPASSWORD", pg.password)
    sweep_file, workdir, output = sweep_and_report(tmp_path, "pgsweep", uri)
    stored = pg.query("mlflow", "SELECT COUNT(*) FROM metrics")[0][0]
    assert stored == jsonl_points(workdir) > 0  # every point in the database, once
    runs = pg.query("mlflow", "SELECT COUNT(*) FROM runs r JOIN experiments e USING (experiment_id) WHERE e.name = 'pgsweep'")
    assert runs[0][0] == 2
    assert pg.password not in output and not files_holding(tmp_path, pg.password)

    # the same password from a 0600 ~/.pgpass, which libpq reads itself
    monkeypatch.delenv("PGPASSWORD")
    pgpass = tmp_path / "home" / ".pgpass"
    pgpass.write_text(f"{pg.host}:{pg.port}:*:{pg.user}:{pg.password}\n")
    pgpass.chmod(0o600)
    assert probe_store(uri) is None
    pgpass.chmod(0o644)
    assert "chmod 600" in probe_store(uri)
    pgpass.unlink()

    monkeypatch.setenv("PGPASSWORD", "Wr0ng-password")
    refused_launch(tmp_path, sweep_file, "Wr0ng-password", "password authentication failed")


def test_a_lab_sweep_through_mlflow_basic_auth_server_on_postgresql(pg, tmp_path, monkeypatch):
    pytest.importorskip("flask_wtf", reason="MLflow's basic-auth app needs mlflow[auth]: pip install -e '.[tracking-server]'")
    admin_password, password = "Adm1n-Pl4nted", "Al1ce-Pl4nted"
    with mlflow_auth_server(pg, tmp_path / "server", admin_password=admin_password) as uri:
        create_mlflow_user(uri, admin_password, "alice", password)
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
        sweep_file, workdir, output = sweep_and_report(tmp_path, "authsweep", uri)
        stored = pg.query("mlflow", "SELECT COUNT(*) FROM metrics")[0][0]
        assert stored == jsonl_points(workdir) > 0
        users = pg.query("mlflow_auth", "SELECT username FROM users ORDER BY username")
        assert users == [("admin",), ("alice",)], users  # the server's users live in PostgreSQL too
        for secret in (password, admin_password):
            assert secret not in output and not files_holding(workdir, secret)

        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "Wr0ng-password")
        refused_launch(tmp_path, sweep_file, "Wr0ng-password", "refused user 'alice'")
        reported = runner.invoke(app, ["report", "authsweep", "-w", str(workdir), "--out", str(tmp_path / "r2")])
        assert reported.exit_code == 2 and "refused user 'alice'" in reported.output, reported.output
        assert "Wr0ng-password" not in reported.output and "Traceback" not in reported.output
