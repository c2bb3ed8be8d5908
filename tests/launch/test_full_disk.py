"""A work dir on a disk that fills up while a sweep runs — a real one: a small tmpfs, filled to the
last byte once the first run trains. The error screen names the path the launcher could not
write; the run that was training fails with "No space left on device: <its file>" as its reason
(torch's own error, "unexpected pos N vs M", said neither); the runs still queued end unsubmitted
saying why, not "queued, but no launcher is running"; once space is back, `--retry-failed` finishes
every run. Skipped where a tmpfs cannot be mounted (mounting needs root)."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from sweep_files import write_sweep
from typer.testing import CliRunner

from cancelctl.cli import app

runner = CliRunner()

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs of its own, unmounted afterwards (lazily: an orphaned run may still hold a file)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no byte left."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:
        for chunk in (1 << 20, 4096, 1):
            try:
                while True:
                    handle.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler


def fill_once_a_run_trains(workdir: Path, sweep: str, filled: list[Path]) -> threading.Thread:
    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            metrics = list((workdir / "sweeps" / sweep / "runs").glob("*/metrics.jsonl"))
            if metrics and metrics[0].stat().st_size:  # training: its next checkpoint no longer fits
                filled.append(fill(workdir.parent))
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def states(workdir: Path, sweep: str) -> dict[str, dict]:
    shown = runner.invoke(app, ["status", sweep, "-w", str(workdir), "--json"])
    assert shown.exit_code == 0, shown.output
    return {s["name"]: s for s in json.loads(shown.output)}


@pytest.mark.xfail(strict=False, reason="on a loaded machine the not-started reason can fail to be written "
                   "(the disk still full past the launch's reserve) and the runs then read 'queued' while this "
                   "in-process launcher's pytest lives: seen once in a fresh-clone CI; under investigation")
def test_a_disk_that_fills_mid_sweep_is_named_and_every_run_says_why(small_disk, tmp_path, template_db, monkeypatch):
    monkeypatch.setenv("CANCELCTL_LOCAL_PARALLEL", "1")  # one run trains, the others wait in the queue
    shutil.copy(template_db, tmp_path / "mlflow.db")  # the store is elsewhere: the full disk is the work dir's
    sweep_file = write_sweep(tmp_path, "full", arms={"grpo": {"algorithm": {"loss": "grpo"}}}, seeds=(0, 1, 2),
                             steps=40, base={"tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}})
    workdir = small_disk / "work"
    filled: list[Path] = []
    filler_thread = fill_once_a_run_trains(workdir, "full", filled)

    ran = runner.invoke(app, ["sweep", str(sweep_file), "-w", str(workdir)])
    filler_thread.join(timeout=5)
    assert filled, ran.output
    manifest = workdir / "sweeps" / "full" / "manifest.json"
    assert ran.exit_code == 1 and f"No space left on device: {manifest}" in " ".join(ran.output.split()), ran.output
    assert "Traceback" not in ran.output

    deadline = time.monotonic() + 120  # the run that was training goes on without its launcher, then fails
    while (every := states(workdir, "full")) and any(s["state"] == "running" for s in every.values()):
        assert time.monotonic() < deadline, every
        time.sleep(0.5)
    first = every.pop("grpo-s0")
    assert first["state"] == "failed" and f"No space left on device: {small_disk}/" in first["reason"], first
    assert "unexpected pos" not in first["reason"]
    # queued when the launcher stopped (or being started: then it started and failed, or it did not)
    assert every["grpo-s2"]["state"] == "unsubmitted", every
    for name, state in every.items():
        assert (state["state"] == "unsubmitted" and "not started: the launcher stopped on No space left on device"
                in state["reason"]) or (state["state"] == "failed" and "No space left on device" in state["reason"]), every

    filled[0].unlink()  # space is back
    again = runner.invoke(app, ["sweep", str(sweep_file), "-w", str(workdir), "--retry-failed"])
    assert again.exit_code == 0 and "full: 3 completed" in again.output, again.output
    final = states(workdir, "full")
    assert all(s["state"] == "completed" and s["step"] == 40 for s in final.values()), final
    assert not list((workdir / "sweeps" / "full").glob(".launch-*.reserve"))  # a launch leaves none behind


def test_a_checkpoint_that_does_not_fit_names_the_disks_error_and_the_file(small_disk):
    """The lab's checkpoint save alone: the OS's ENOSPC naming checkpoint.pt, no temp file left."""
    torch = pytest.importorskip("torch")
    from cancelctl.backends.lab.checkpoint import save_replacing

    run_dir = small_disk / "run"
    run_dir.mkdir()
    (small_disk / "big").write_bytes(b"\0" * (16 * 1024 * 1024 - 300 * 1024))  # ~300 KiB left
    with pytest.raises(OSError) as raised:
        save_replacing({"w": torch.zeros(200_000)}, run_dir / "checkpoint.pt")  # ~800 KB
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(run_dir / "checkpoint.pt")
    assert list(run_dir.iterdir()) == []
