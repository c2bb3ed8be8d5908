"""`sweep`'s summary of a launch whose runs fail: the counts never say "0 failed" above the FAILED
lines (the skipped runs that failed before are counted only when there are some, and named so), and
each FAILED line names the run and says its cause without repeating the word."""

from __future__ import annotations

from sweep_files import TINY_LAB, write_sweep
from typer.testing import CliRunner

from cancelctl.cli import app

runner = CliRunner()


def test_failed_runs_are_not_counted_as_none_and_their_lines_say_failed_once(tmp_path, workdir):
    sweep_file = write_sweep(tmp_path, "breaks", seeds=(0,), steps=2, base={"lab": {**TINY_LAB, "fail_at_step": 1}})
    first = runner.invoke(app, ["sweep", str(sweep_file), "-w", str(workdir), "--executor", "debug"])
    assert first.exit_code == 1, first.output
    summary = next(line for line in first.output.splitlines() if line.startswith("breaks (debug): "))
    assert summary == "breaks (debug): submitted 2, skipped 0 finished, 0 running", summary
    failed = [line for line in first.output.splitlines() if line.startswith("FAILED ")]
    assert len(failed) == 2 and all(line.count("FAILED") == 1 for line in failed), failed
    assert {line.split(" (")[0] for line in failed} == {"FAILED grpo-s0", "FAILED gspo-s0"}, failed
    assert all("injected failure" in line for line in failed), failed

    again = runner.invoke(app, ["sweep", str(sweep_file), "-w", str(workdir), "--executor", "debug"])
    assert again.exit_code == 1, again.output
    assert "submitted 0, skipped 0 finished, 0 running, 2 failed before (use --retry-failed)" in again.output
