"""Tracking credentials never travel in a URI: a password written in `tracking.uri` (or in
$MLFLOW_TRACKING_URI, or `--uri`) is refused, naming where to put it instead, and is printed
nowhere — validate, render (the sbatch script), a launch, the run folder, a job's log; a
credentials file its group or others may read is refused (docs/slurm.md, Tracking)."""

from __future__ import annotations

import logging
import os

import pytest
from sweep_files import write_sweep
from typer.testing import CliRunner

from cancelctl.cli import app
from cancelctl.tracking import RunLogger, write_run_json
from cancelctl.tracking.uri import (
    CredentialsRefused,
    check_credentials,
    credentials_file_problem,
    normalize_tracking_uri,
    probe_store,
    redact_uri,
)

pytestmark = pytest.mark.timeout(120)

runner = CliRunner()
PLANTED = "Pl4nted-s3cret"
DEAD = "127.0.0.1:1"  # nothing listens on port 1: refused at once


def planted_uris() -> list[str]:
    return [f"postgresql://alice:{PLANTED}@{DEAD}/mlflow", f"postgresql+psycopg2://alice:{PLANTED}@{DEAD}/mlflow",
            f"http://alice:{PLANTED}@{DEAD}"]


def files_holding(folder, text: str) -> list[str]:
    return [str(path) for path in folder.rglob("*") if path.is_file() and text.encode() in path.read_bytes()]


def test_redact_uri_hides_only_the_password():
    assert redact_uri(f"postgresql://alice:{PLANTED}@db.example:5432/mlflow?sslmode=require") == \
        "postgresql://alice:***@db.example:5432/mlflow?sslmode=require"
    for uri in ("postgresql://alice@db/mlflow", "http://127.0.0.1:5000", "sqlite:////w/mlflow.db"):
        assert redact_uri(uri) == uri


@pytest.mark.parametrize("uri", planted_uris())
def test_validate_refuses_a_password_in_tracking_uri(tmp_path, uri):
    sweep_file = write_sweep(tmp_path, "pw", seeds=(0,), base={"tracking": {"uri": uri}})
    result = runner.invoke(app, ["validate", str(sweep_file)])
    assert result.exit_code == 2, result.output
    assert PLANTED not in result.output
    # file:line:col, the field, and where the password goes instead
    assert f"{sweep_file}:" in result.output and "base.tracking.uri" in result.output, result.output
    assert "PGPASSWORD" in result.output and "~/.pgpass" in result.output and "holds a password" in result.output


def test_render_never_shows_the_password(tmp_path):
    """`render` prints the sbatch script and the run's config: the spec is refused before either."""
    sweep_file = write_sweep(tmp_path, "pws", seeds=(0,), base={"executor": "slurm", "tracking": {"uri": planted_uris()[0]}})
    result = runner.invoke(app, ["render", str(sweep_file), "--run", "grpo-s0", "-w", str(tmp_path / "work")])
    assert result.exit_code == 2, result.output
    assert PLANTED not in result.output and "holds a password" in result.output


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_launch_refuses_a_password_from_the_environment(tmp_path, monkeypatch, dry_run):
    """$MLFLOW_TRACKING_URI with a password: nothing launched, nothing written holding it."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://alice:{PLANTED}@{DEAD}")
    sweep_file = write_sweep(tmp_path, "envpw", seeds=(0,), steps=1)
    workdir = tmp_path / "work"
    result = runner.invoke(app, ["sweep", str(sweep_file), "-w", str(workdir), "--executor", "debug",
                                 *(["--dry-run"] if dry_run else [])])
    assert result.exit_code == 2, result.output
    assert PLANTED not in result.output and "http://alice:***@127.0.0.1:1" in result.output, result.output
    assert "MLFLOW_TRACKING_PASSWORD" in result.output
    assert not files_holding(tmp_path, PLANTED)
    assert not list(workdir.glob("sweeps/*/runs/*/run.json"))


def test_a_job_log_never_shows_the_password(tmp_path, caplog):
    """A run folder whose run.json names a URI with a password (written before it was refused): the
    job's logger refuses it, and says so without it; before, the store's failure printed it."""
    uri = f"http://alice:{PLANTED}@{DEAD}"
    run_dir = tmp_path / "run"
    write_run_json(run_dir, run_id="r1", name="r", experiment="e", tags={}, params={}, tracking_uri=uri)
    said = ""
    with caplog.at_level(logging.DEBUG, logger="cancelctl"):
        try:
            with RunLogger(run_dir, uri) as logger:
                logger.log(1, {"x": 1.0})
        except ValueError as exc:
            said = str(exc)
    assert PLANTED not in caplog.text + said
    assert "alice:***@" in said


def test_a_store_failure_in_a_job_log_names_no_password(tmp_path, monkeypatch, caplog):
    """The password in PGPASSWORD, the store down: the warning names the store and libpq's cause."""
    monkeypatch.setenv("PGPASSWORD", PLANTED)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    uri = f"postgresql://alice@{DEAD}/mlflow"
    run_dir = tmp_path / "run"
    write_run_json(run_dir, run_id="r1", name="r", experiment="e", tags={}, params={}, tracking_uri=uri)
    with caplog.at_level(logging.WARNING, logger="cancelctl"):
        with RunLogger(run_dir, uri) as logger:
            logger.log(1, {"x": 1.0})
    assert uri in caplog.text and PLANTED not in caplog.text, caplog.text
    assert logger.store_failures >= 1


@pytest.mark.parametrize("uri", planted_uris())
def test_normalize_refuses_a_password_with_exit_2(uri):
    with pytest.raises(ValueError, match="holds a password") as raised:
        normalize_tracking_uri(uri)
    assert PLANTED not in str(raised.value) and raised.value.exit_code == 2


def test_a_pgpass_others_may_read_is_refused(tmp_path, monkeypatch):
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:1:*:alice:{PLANTED}\n")
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    uri = f"postgresql://alice@{DEAD}/mlflow"
    pgpass.chmod(0o644)
    problem = probe_store(uri)
    assert f"chmod 600 {pgpass}" in problem and "644" in problem and PLANTED not in problem
    with pytest.raises(CredentialsRefused, match="chmod 600"):
        check_credentials(uri)
    pgpass.chmod(0o600)
    assert credentials_file_problem(uri) is None
    assert "chmod" not in probe_store(uri)  # the file is fine (the server is down, or the driver absent)
    check_credentials(uri)  # a server that cannot be reached is not a refusal


def test_mlflow_credentials_others_may_read_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    credentials = tmp_path / ".mlflow" / "credentials"
    credentials.parent.mkdir()
    credentials.write_text(f"[mlflow]\ntracking_username = alice\ntracking_password = {PLANTED}\n")
    os.chmod(credentials, 0o640)
    problem = credentials_file_problem(f"http://{DEAD}")
    assert "chmod 600" in problem and PLANTED not in problem
    os.chmod(credentials, 0o600)
    assert credentials_file_problem(f"http://{DEAD}") is None


def test_a_launch_with_an_unsafe_credentials_file_submits_nothing(tmp_path, monkeypatch):
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"*:*:*:alice:{PLANTED}\n")
    pgpass.chmod(0o604)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    sweep_file = write_sweep(tmp_path, "unsafe", seeds=(0,), steps=1,
                             base={"tracking": {"uri": f"postgresql://alice@{DEAD}/mlflow"}})
    result = runner.invoke(app, ["sweep", str(sweep_file), "-w", str(tmp_path / "work"), "--executor", "debug"])
    assert result.exit_code == 2, result.output
    assert "chmod 600" in result.output and PLANTED not in result.output and "Traceback" not in result.output
    assert not list((tmp_path / "work").glob("sweeps/*/runs/*/metrics.jsonl"))
