"""A finished run's folder with one of its files damaged from outside (a byte that is not UTF-8: a
disk error, a copy gone wrong, a hand edit in another encoding): `status`, `logs` and `sweep` on the
same spec go on — a damaged line of a JSONL file is skipped, a damaged JSON file reads as missing —
say so once, naming the file, and never show a traceback. Before, a non-UTF-8 byte in attempts.jsonl
crashed all three (UnicodeDecodeError in `read_attempts`)."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sweep_files import write_sweep
from typer.testing import CliRunner

from cancelctl.cli import app

runner = CliRunner()

BAD = b"\xff\xfe"  # never UTF-8


def damage(path: Path) -> None:
    """A JSONL file gets a whole line with the bad bytes in it (the lines around it stay good); any
    other file gets them inside its first string (or is made of them, when the run has none)."""
    data = path.read_bytes() if path.exists() else b""
    if path.suffix == ".jsonl":
        path.write_bytes(data + b'{"event": "' + BAD + b'", "step": 1}\n')
    elif data:
        quote = data.index(b'"') + 1
        path.write_bytes(data[:quote] + BAD + data[quote:])
    else:
        path.write_bytes(b'{"rule": "' + BAD + b'"}\n')


@pytest.fixture(scope="module")
def finished(tmp_path_factory, template_db):
    """A sweep of one lab run, completed: (sweep file, work dir)."""
    root = tmp_path_factory.mktemp("damaged-files")
    workdir = root / "work"
    workdir.mkdir()
    shutil.copy(template_db, workdir / "mlflow.db")
    sweep_file = write_sweep(root, "damaged", arms={"grpo": {"algorithm": {"loss": "grpo"}}}, seeds=(0,), steps=2)
    # in a process of its own: a debug run's record names its launcher's pid, which must not be this
    # process (alive: a run read as unfinished would look running for ever)
    ran = subprocess.run([sys.executable, "-m", "cancelctl.cli", "sweep", str(sweep_file), "-w", str(workdir),
                          "--executor", "debug"], capture_output=True, text=True, timeout=300, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return sweep_file, workdir


# (file, the run still reads as completed: a damaged result.json reads as missing, the run is resumed)
FILES = [
    ("attempts.jsonl", True),
    ("metrics.jsonl", True),
    ("alerts.jsonl", True),
    ("job.json", True),
    ("run.json", True),
    ("fence.json", True),
    ("sync_state.json", True),
    ("stopped.json", True),
    ("error.txt", True),
    ("result.json", False),
]


@pytest.mark.parametrize("name, completed", FILES, ids=[f[0] for f in FILES])
def test_a_damaged_run_file_is_skipped_and_said_once_never_a_traceback(finished, tmp_path, caplog, name, completed):
    sweep_file, original = finished
    workdir = tmp_path / "work"
    shutil.copytree(original, workdir)
    [run_dir] = (workdir / "sweeps" / "damaged" / "runs").iterdir()
    damage(run_dir / name)
    caplog.set_level(logging.WARNING)
    shown = []
    for argv in (["status", "damaged"], ["logs", "grpo-s0", "-s", "damaged"],
                 ["sweep", str(sweep_file), "--executor", "debug"]):
        result = runner.invoke(app, [*argv, "-w", str(workdir)])
        shown.append(result.output)
        assert result.exit_code == 0, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert "Traceback" not in result.output
    status, _, sweep = shown
    if completed:
        assert " completed " in status and "submitted 0, skipped 1 finished" in sweep, status + sweep
    else:  # read as missing: resumed from its checkpoint by the same sweep, completed again
        assert "submitted 1" in sweep and "damaged: 1 completed" in sweep, sweep
    said = [r.getMessage() for r in caplog.records if str(run_dir / name) in r.getMessage()]
    assert len(said) <= 1, said  # once, however often the verbs read it


@pytest.mark.parametrize("name", ["attempts.jsonl", "job.json", "result.json", "stopped.json"])
def test_the_damaged_files_status_reads_are_named(finished, tmp_path, caplog, name):
    """The files `status` itself reads for a finished run: the damage is said, naming the file."""
    _, original = finished
    workdir = tmp_path / "work"
    shutil.copytree(original, workdir)
    [run_dir] = (workdir / "sweeps" / "damaged" / "runs").iterdir()
    damage(run_dir / name)
    caplog.set_level(logging.WARNING)
    for _ in range(3):  # `watch` reads them at every refresh
        assert runner.invoke(app, ["status", "damaged", "-w", str(workdir)]).exit_code == 0
    said = [r.getMessage() for r in caplog.records if str(run_dir / name) in r.getMessage()]
    assert len(said) == 1 and "not UTF-8" in said[0], said


def test_read_jsonl_skips_damaged_lines_keeps_the_rest_and_a_torn_last_line_is_silent(tmp_path, caplog):
    from cancelctl.fileio import read_jsonl

    path = tmp_path / "attempts.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": "' + BAD + b'"}\nnot json\n\n{"c": 3}\n{"d": 4')
    caplog.set_level(logging.WARNING)
    assert read_jsonl(path) == [{"a": 1}, {"c": 3}]  # the last line is torn: left out, not said
    path.write_bytes(path.read_bytes() + b'}\n{"e": 5}')
    assert read_jsonl(path) == [{"a": 1}, {"c": 3}, {"d": 4}, {"e": 5}]  # whole, only its newline missing
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith(f"{path}: skipped 2 unreadable line(s), the first at line 2"), said
    assert read_jsonl(tmp_path / "missing.jsonl") == []
