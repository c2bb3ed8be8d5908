"""`cancelctl sweep FILE --until-decided` through the CLI: its arguments, the rounds it prints, the
report's claims table of the sweep, a plain rerun that keeps the added seeds, the dry run."""

from __future__ import annotations

import shutil

from sweep_files import UNTIL_DECIDED_CLAIMS as CLAIMS, write_sweep
from typer.testing import CliRunner

from cancelctl.cli import app

runner = CliRunner()


def test_until_decided_options_are_checked(tmp_path):
    plain = write_sweep(tmp_path, "plain", seeds=(0, 1))
    result = runner.invoke(app, ["sweep", str(plain), "--max-seeds", "4", "-w", str(tmp_path / "w")])
    assert result.exit_code == 2 and "--max-seeds and --batch go with --until-decided" in result.output
    result = runner.invoke(app, ["sweep", str(plain), "--until-decided", "-e", "debug", "-w", str(tmp_path / "w")])
    assert result.exit_code == 2 and "needs claims to decide" in result.output and "Traceback" not in result.output
    claims = write_sweep(tmp_path, "claims", seeds=(0, 1, 2), claims=CLAIMS)
    result = runner.invoke(app, ["sweep", str(claims), "--until-decided", "--max-seeds", "2", "-e", "debug",
                                 "-w", str(tmp_path / "w")])
    assert result.exit_code == 2 and "below the sweep file's 3 seeds" in result.output
    assert not (tmp_path / "w" / "sweeps" / "claims").exists()


def test_until_decided_prints_each_claims_decision_and_report_shows_looks_and_seeds(tmp_path, template_db):
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(template_db, workdir / "mlflow.db")
    path = write_sweep(tmp_path, "decided", seeds=(0, 1, 2), steps=2, claims=CLAIMS, baseline="grpo")
    args = ["sweep", str(path), "--until-decided", "--max-seeds", "4", "--batch", "1", "-e", "debug", "-w", str(workdir)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "decided: 2 look(s) (look 1: seeds 0–2; look 2: +3 (2 arm(s))); submitted 8 run(s) now; seed budget spent" in out
    assert "tokens: supported; decided look 2, 2 look(s), 4 seeds, safe t-test (e-process)" in out
    assert "score: inconclusive; decided no (seed budget spent), 2 look(s), 4 seeds" in out

    report = runner.invoke(app, ["report", "decided", "--claims-only", "-w", str(workdir), "--out", str(tmp_path / "r")])
    assert report.exit_code == 0, report.output
    assert "Claims (run until decided)" in report.output and "look 2" in report.output
    assert "claims only: nothing written" in report.output and not (tmp_path / "r").exists()  # printed, not written
    assert "stale" not in report.output  # the added seeds are the sweep's own runs

    plain = runner.invoke(app, ["sweep", str(path), "-e", "debug", "-w", str(workdir)])  # keeps the rounds' seeds
    assert plain.exit_code == 0 and "submitted 0, skipped 8 finished" in plain.output and "stale" not in plain.output
    dry = runner.invoke(app, ["sweep", str(path), "--until-decided", "--dry-run", "-e", "debug", "-w", str(workdir)])
    assert dry.exit_code == 0 and "would submit 0" in dry.output
