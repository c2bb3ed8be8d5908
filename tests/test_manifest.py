"""The sweep manifest: round trip, atomic writes under SIGKILL, the update lock, and the submit
lock that a child process (sbatch) keeps holding after its parent died."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cancelctl.executors import get_executor
from cancelctl.executors.slurm_states import TaskStates
from cancelctl.manifest import (
    ABANDONED,
    INTENT,
    Manifest,
    ManifestBusy,
    ManifestStore,
    RunEntry,
    atomic_write_json,
    file_lock,
)
from cancelctl.workdir import sweep_paths


def manifest_with(n_runs: int) -> Manifest:
    manifest = Manifest(sweep="demo", executor="slurm", file="demo.yaml")
    for i in range(n_runs):
        manifest.runs[f"run{i:04d}"] = RunEntry(name=f"grpo-s{i}", arm="grpo", seed=i, steps=10)
    return manifest


def test_round_trip_keeps_sweep_order_and_submissions(tmp_path):
    store = ManifestStore(tmp_path / "manifest.json")
    manifest = manifest_with(3)
    manifest.runs = dict(reversed(list(manifest.runs.items())))  # not alphabetical
    sub = manifest.add_submission("slurm", ["run0002", "run0000"], job_name="cancelctl:demo:x")
    sub.job_id = "812"
    store.save(manifest)
    loaded = store.load()
    assert list(loaded.runs) == ["run0002", "run0001", "run0000"]
    assert loaded.latest_submission("run0000") == (loaded.submissions[sub.token], 1)
    restored = loaded.submissions[sub.token]
    job = get_executor(restored.executor).handle(sweep_paths(tmp_path, "demo"), restored, 1, TaskStates(), tmp_path)
    assert job.job_id == "812_1" and job.run_id == "run0000"
    assert loaded.latest_submission("run0001") is None
    assert loaded.intents() == [loaded.submissions[sub.token]] and loaded.submissions[sub.token].state == INTENT
    assert loaded.to_json() == manifest.to_json()


def test_newer_version_is_refused(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"version": 99, "sweep": "x", "executor": "local"}))
    with pytest.raises(ValueError, match="version"):
        ManifestStore(path).load()


def test_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "manifest.json"
    atomic_write_json(path, {"old": True})

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_json(path, {"new": True})
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_writer_killed_mid_write_never_leaves_a_torn_manifest(tmp_path):
    """A writer rewriting a ~1 MB manifest in a loop is SIGKILLed at random points; every read
    in between and after parses."""
    path = tmp_path / "manifest.json"
    ManifestStore(path).save(manifest_with(2000))
    writer = textwrap.dedent(
        f"""
        from pathlib import Path
        from cancelctl.manifest import ManifestStore
        store = ManifestStore(Path({str(path)!r}))
        i = 0
        while True:
            with store.update() as m:
                m.launched_at = i
            i += 1
        """
    )
    for delay in (0.3, 0.55, 0.8, 1.1):
        proc = subprocess.Popen([sys.executable, "-c", writer])
        kill_at = time.monotonic() + delay
        while time.monotonic() < kill_at:
            ManifestStore(path).load()  # never a half-written file
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert len(ManifestStore(path).load().runs) == 2000
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) <= 4  # a killed writer may leave its temp file, never a bad manifest


def test_concurrent_updates_lose_nothing(tmp_path):
    path = tmp_path / "manifest.json"
    ManifestStore(path).save(Manifest(sweep="demo", executor="local"))
    code = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from cancelctl.manifest import ManifestStore, RunEntry
        store = ManifestStore(Path({str(path)!r}))
        for i in range(25):
            with store.update() as m:
                m.runs[f"{{sys.argv[1]}}-{{i}}"] = RunEntry(name="x", arm="a", seed=i)
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, f"w{k}"]) for k in range(4)]
    for proc in procs:
        assert proc.wait(120) == 0
    assert len(ManifestStore(path).load().runs) == 100


def test_update_creates_once_and_abandoned_intent_is_kept(tmp_path):
    store = ManifestStore(tmp_path / "sweeps" / "demo" / "manifest.json")
    with pytest.raises(FileNotFoundError):
        with store.update():
            pass
    with store.update(create=manifest_with(1)) as manifest:
        sub = manifest.add_submission("slurm", ["run0000"])
        sub.state = ABANDONED
    with store.update(create=Manifest(sweep="other", executor="local")) as manifest:
        assert manifest.sweep == "demo"  # the existing file wins over `create`
    assert store.load().submissions[sub.token].state == ABANDONED


def test_lock_times_out_instead_of_hanging(tmp_path):
    lock = tmp_path / "submit.lock"
    with file_lock(lock):  # no wall-time limit here: a loaded machine is slow, the timeout still raises
        with pytest.raises(ManifestBusy, match="held by another process"):
            with file_lock(lock, timeout_s=0.3):
                pass


def test_lock_if_free_says_whether_it_got_the_lock_instead_of_raising(tmp_path):
    from cancelctl.fileio import file_lock_if_free

    lock = tmp_path / "run" / ".attempt.lock"
    with file_lock(lock):
        with file_lock_if_free(lock, 0.2) as held:
            assert held is False
    with file_lock_if_free(lock, 0) as held:
        assert held is True
        with pytest.raises(ManifestBusy):  # and it holds it
            with file_lock(lock, timeout_s=0):
                pass


def test_lock_passed_to_a_child_outlives_a_killed_parent(tmp_path):
    """The launcher passes its submit lock to sbatch: if the launcher is SIGKILLed mid-call, the
    next launch still waits for sbatch to finish before it asks the scheduler what was submitted."""
    lock = tmp_path / "submit.lock"
    parent = textwrap.dedent(
        f"""
        import subprocess, time
        from pathlib import Path
        from cancelctl.manifest import file_lock
        with file_lock(Path({str(lock)!r})) as fd:
            subprocess.Popen(["sleep", "3"], pass_fds=(fd,))
            print("locked", flush=True)
            time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    with pytest.raises(ManifestBusy):
        with file_lock(lock, timeout_s=0.5):
            pass
    with file_lock(lock, timeout_s=10):  # free once the child ("sbatch") has exited (it sleeps 3 s)
        pass
    assert Path(lock).exists()


def test_read_json_reads_or_returns_the_default(tmp_path):
    from cancelctl.fileio import atomic_write_json, read_json

    path = tmp_path / "x.json"
    assert read_json(path) is None and read_json(path, {}) == {}
    atomic_write_json(path, {"a": [1, 2]})
    assert read_json(path) == {"a": [1, 2]}
    path.write_text('{"a": [1, ')  # torn by a writer that is not atomic
    assert read_json(path, "absent") == "absent"
