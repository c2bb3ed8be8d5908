"""The CLI's one error path (`cli.common.VerbGroup`): whatever verb meets a scheduler, work-dir, lock,
network or input error, the user gets one screen with the error's own message and the exit code
(1 runtime, 2 bad input) — never a traceback, never only a class name."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from cancelctl.cli import app
from cancelctl.errors import WorkdirStateError
from cancelctl.errors import SchedulerError
from cancelctl.fileio import LockBusy

runner = CliRunner()

ERRORS = [
    (SchedulerError("sacct -X -n ... did not answer within 30 s"), "did not answer within 30 s", 1),
    (TimeoutError("sweep s: still active 60 s after cancel: grpo-s0, gspo-s1"), "still active 60 s after cancel: grpo-s0, gspo-s1", 1),
    (LockBusy("submit lock /w/sweeps/s/submit.lock held by another process for 120 s"), "held by another process for 120 s", 1),
    (ConnectionError("the tracking server 127.0.0.1:5000 refused the connection"), "refused the connection", 1),
    (WorkdirStateError("manifest.json is truncated: run `cancelctl status` to rebuild it"), "is truncated", 1),
    (PermissionError(13, "Permission denied", "/w/sweeps"), "Permission denied: /w/sweeps", 1),
    (OSError(28, "No space left on device", "/w/sweeps/s/manifest.json"), "No space left on device: /w/sweeps/s/manifest.json", 1),
]
VERBS = [  # (argv, the library call the verb makes: where the error is raised)
    (["status", "s"], "cancelctl.launch.sweep_status"),
    (["cancel", "s"], "cancelctl.launch.cancel_sweep"),
    (["watch", "s"], "cancelctl.launch.sweep_status"),
    (["list"], "cancelctl.launch.control.list_sweeps"),
    (["report", "s"], "cancelctl.report.sweep_report.report_sweep"),
    (["logs", "run", "-s", "s"], "cancelctl.launch.logs.run_logs"),
]


@pytest.mark.parametrize("error, says, code", ERRORS, ids=[type(e[0]).__name__ for e in ERRORS])
@pytest.mark.parametrize("argv, call", VERBS, ids=[v[0][0] for v in VERBS])
def test_every_verb_shows_the_errors_message_and_its_exit_code(tmp_path, monkeypatch, argv, call, error, says, code):
    def raises(*args, **kwargs):
        raise error

    module, name = call.rsplit(".", 1)
    monkeypatch.setattr(f"{module}.{name}", raises)
    result = runner.invoke(app, [*argv, "-w", str(tmp_path)])
    assert result.exit_code == code and isinstance(result.exception, SystemExit), result.output
    text = " ".join(result.output.split())
    assert text.startswith("error: ") and says in text and text.count("error:") == 1, result.output
    assert "Traceback" not in result.output


def test_a_hub_that_cannot_be_reached_is_said_at_once_with_what_to_do(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # loopback, nothing listens: no traffic leaves
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    started = time.monotonic()
    result = runner.invoke(app, ["data", "prepare", "aime24", "--out", str(tmp_path)])
    assert time.monotonic() - started < 10 and result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "the Hugging Face Hub is not reachable from this machine" in text and "HF_HUB_OFFLINE=1" in text, text
    assert "Traceback" not in result.output
