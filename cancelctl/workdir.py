"""The work-dir layout: where a sweep's files and a run's files live. Below launch, jobs, tracking
and report, so none of them reaches into another for a path.

    <workdir>/
      mlflow.db, mlartifacts/       default MLflow store (sqlite) and its artifact root
      cache/                        shared by runs (lab warm-start policies)
      sweeps/<sweep>/
        manifest.json, manifest.lock, submit.lock, driver.log
        launch.lock, cancel.json    a launcher starting, a `cancel` it must honour (cancelctl.launch.starting)
        seed_rounds.json            the looks of a sweep run until decided (cancelctl.seed_rounds)
        runs/<name>__<run_id>/      one RunFolder per run (readable: arm, grid point, seed, run id)
        runs/<run_id>/              the same, as work dirs made before readable names: still used
        submitit/                   scheduler scripts, pickles and logs

A run's folder is found by its run id: a folder named by bare hash (older work dirs) or
`<anything>__<run_id>` (a renamed arm keeps its folder) wins over making a new one.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cancelctl.errors import ArgumentError, SweepNotFound
from cancelctl.fileio import read_json
from cancelctl.manifest import Manifest, ManifestStore, RunEntry
from cancelctl.names import SWEEP_NAME, name_problem
from cancelctl.seed_rounds import SEED_ROUNDS_JSON

SWEEPS = "sweeps"
RUNS = "runs"
MANIFEST_JSON = "manifest.json"

# The files of a run folder (what writes each: see RunFolder).
RUN_JSON = "run.json"
METRICS_JSONL = "metrics.jsonl"
SYNC_STATE = "sync_state.json"
TRACKING_LOCK = ".tracking.lock"
ATTEMPT_LOCK = ".attempt.lock"  # held by the run's process from start to its last word
CHECKPOINT = "checkpoint.pt"
RESULT_JSON = "result.json"
ERROR_TXT = "error.txt"
ERROR_PREV_TXT = "error.prev.txt"
JOB_JSON = "job.json"
ATTEMPTS_JSONL = "attempts.jsonl"
ALERTS_JSONL = "alerts.jsonl"
STOPPED_JSON = "stopped.json"
STOPPED_PREV_JSON = "stopped.prev.json"

ID_SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+@-]+")


def run_folder_name(name: str, run_id: str) -> str:
    """`gspo-G=8-s0__01be704be275`: readable in `ls`, still unique (the run id ends it)."""
    readable = _UNSAFE.sub("_", name).strip("._")[:100]
    return f"{readable}{ID_SEPARATOR}{run_id}" if readable else run_id


@dataclass(frozen=True)
class RunFolder:
    """One run's folder and the files in it.

    run.json (launch), metrics.jsonl + sync_state.json + .tracking.lock (tracking), checkpoint.pt
    (backend), result.json / error.txt / error.prev.txt / job.json / attempts.jsonl / .attempt.lock /
    fence.json + .fence.lock (jobs: the attempt number that may write, `cancelctl.fencing`),
    alerts.jsonl / stopped.json (the in-job monitor), stopped.prev.json (jobs: an earlier attempt's stop)."""

    path: Path

    @property
    def run_json(self) -> Path:
        return self.path / RUN_JSON

    @property
    def metrics(self) -> Path:
        return self.path / METRICS_JSONL

    @property
    def sync_state(self) -> Path:
        return self.path / SYNC_STATE

    @property
    def tracking_lock(self) -> Path:
        return self.path / TRACKING_LOCK

    @property
    def attempt_lock(self) -> Path:
        return self.path / ATTEMPT_LOCK

    @property
    def fence(self) -> Path:
        return self.path / "fence.json"

    @property
    def fence_lock(self) -> Path:
        return self.path / ".fence.lock"

    @property
    def checkpoint(self) -> Path:
        return self.path / CHECKPOINT

    @property
    def result(self) -> Path:
        return self.path / RESULT_JSON

    @property
    def error(self) -> Path:
        return self.path / ERROR_TXT

    @property
    def error_prev(self) -> Path:
        return self.path / ERROR_PREV_TXT

    @property
    def job(self) -> Path:
        return self.path / JOB_JSON

    @property
    def attempts(self) -> Path:
        return self.path / ATTEMPTS_JSONL

    @property
    def alerts(self) -> Path:
        return self.path / ALERTS_JSONL

    @property
    def stopped(self) -> Path:
        return self.path / STOPPED_JSON

    @property
    def stopped_prev(self) -> Path:
        return self.path / STOPPED_PREV_JSON

    def last_step(self) -> int | None:
        """The step of the last complete line of metrics.jsonl (reads only the file's tail)."""
        try:
            with open(self.metrics, "rb") as handle:
                size = handle.seek(0, 2)
                handle.seek(max(0, size - 8192))
                tail = handle.read()
        except OSError:
            return None
        for raw in reversed(tail.split(b"\n")):
            try:
                return int(json.loads(raw)["step"])
            except (ValueError, KeyError, TypeError):
                continue
        return None

    def metrics_damage(self) -> str | None:
        """Why metrics.jsonl cannot be trusted whole, or None: its last line is cut short (a write
        interrupted by a full disk or a crash, a copy cut off) — the points after the last complete
        line are lost, which a reader must say instead of reporting a shorter run."""
        try:
            with open(self.metrics, "rb") as handle:
                size = handle.seek(0, 2)
                if size == 0:
                    return None
                handle.seek(max(0, size - 65536))
                tail = handle.read()
        except OSError:
            return None
        if tail.endswith(b"\n"):
            return None
        complete = tail.rpartition(b"\n")[0].rpartition(b"\n")[2]
        try:
            after = f"after step {int(json.loads(complete)['step'])}"
        except (ValueError, KeyError, TypeError):
            after = "in its first line"
        return f"{self.metrics} is truncated {after} (its last line is cut short at byte {size}): later points are lost"

    @property
    def workdir(self) -> Path | None:
        """The work dir this folder is in now (<workdir>/sweeps/<sweep>/runs/<folder>); None when
        the folder is not laid out so (a run folder made by hand)."""
        runs, sweeps = self.path.parent, self.path.parent.parent.parent
        return sweeps.parent if runs.name == RUNS and sweeps.name == SWEEPS else None

    def relocated(self, recorded: str | Path, recorded_workdir: str | Path | None) -> Path:
        """`recorded` (a path run.json pinned at launch), moved along with the work dir: a path
        inside the work dir the run was launched in is the same path inside the work dir this
        folder is in now (`mv` or `cp -r` of a work dir); any other path stays as it is."""
        recorded, now = Path(recorded), self.workdir
        if recorded_workdir is None or now is None:
            return recorded
        try:
            inside = recorded.relative_to(Path(recorded_workdir))
        except ValueError:
            return recorded
        return now / inside

    @property
    def sweep_manifest(self) -> Path:
        """The manifest of the sweep this folder belongs to (runs/<folder> -> <sweep>/manifest.json)."""
        return self.path.parent.parent / MANIFEST_JSON


@dataclass(frozen=True)
class SweepPaths:
    workdir: Path
    sweep: str

    @property
    def sweep_dir(self) -> Path:
        return self.workdir / SWEEPS / self.sweep

    @property
    def manifest(self) -> Path:
        return self.sweep_dir / MANIFEST_JSON

    @property
    def store(self) -> ManifestStore:
        return ManifestStore(self.manifest, recover=lambda: rebuild_manifest(self))

    @property
    def seed_rounds(self) -> Path:
        """The seeds each look of a sweep run until decided holds (`cancelctl.seed_rounds`)."""
        return self.sweep_dir / SEED_ROUNDS_JSON

    @property
    def launch_lock(self) -> Path:
        """Held (shared) by each launcher of the sweep from its first moment: `cancel` knows it is starting."""
        return self.sweep_dir / "launch.lock"

    @property
    def cancel_request(self) -> Path:
        """A `cancel` made while a launch was still starting (`cancelctl.launch.starting`)."""
        return self.sweep_dir / "cancel.json"

    @property
    def submit_lock(self) -> Path:
        """Held by a launcher while it talks to the scheduler, and by every sbatch it starts."""
        return self.sweep_dir / "submit.lock"

    @property
    def runs_dir(self) -> Path:
        return self.sweep_dir / RUNS

    def run_dir(self, run_id: str, name: str | None = None) -> Path:
        """The folder of run `run_id`: an existing one (bare hash, or any `*__<run_id>`), else
        `<name>__<run_id>` (the bare hash when no name is given)."""
        if name:
            named = self.runs_dir / run_folder_name(name, run_id)
            if named.is_dir():
                return named
        legacy = self.runs_dir / run_id
        if legacy.is_dir():
            return legacy
        found = self._existing_folders.get(run_id)
        if found is None and not name:
            found = _scan(self.runs_dir).get(run_id)  # made since this object first looked
        if found is not None:
            return self.runs_dir / found
        return self.runs_dir / run_folder_name(name, run_id) if name else legacy

    def run_folder(self, run_id: str, name: str | None = None) -> RunFolder:
        return RunFolder(self.run_dir(run_id, name))

    @functools.cached_property
    def _existing_folders(self) -> dict[str, str]:
        return _scan(self.runs_dir)

    @property
    def submitit_dir(self) -> Path:
        return self.sweep_dir / "submitit"

    @property
    def driver_log(self) -> Path:
        return self.sweep_dir / "driver.log"

    @property
    def cache_dir(self) -> Path:
        return self.workdir / "cache"


def _scan(runs_dir: Path) -> dict[str, str]:
    """run id -> folder name of every `<name>__<run_id>` folder (one directory listing)."""
    try:
        entries = os.listdir(runs_dir)
    except OSError:
        return {}
    return {entry.rpartition(ID_SEPARATOR)[2]: entry for entry in entries if ID_SEPARATOR in entry}


def check_name(name: str, what: str = "sweep name", pattern: re.Pattern[str] | None = None) -> str:
    """`name` if `names.name_problem` finds none; the one check every verb's sweep and run names go
    through (and the sweep file's, in `validate`), so none reads or writes outside the work dir or
    results/. ArgumentError (exit 2)."""
    problem = name_problem(name, pattern)
    if problem is not None:
        raise ArgumentError(f"{what} {name!r}: {problem}, as `cancelctl plan` shows it")
    return name


def check_sweep_name(name: str) -> str:
    """`name` if it is a sweep name (the sweep file's `name:`, one path component)."""
    return check_name(name, "sweep name", SWEEP_NAME)


def sweep_paths(workdir: Path, sweep: str) -> SweepPaths:
    return SweepPaths(Path(workdir).resolve(), check_sweep_name(sweep))


def known_sweeps(workdir: Path) -> list[str]:
    root = Path(workdir) / SWEEPS
    if not root.is_dir():
        return []
    found = {p.parent.name for pattern in (f"*/{MANIFEST_JSON}", f"*/{RUNS}") for p in root.glob(pattern)}
    return sorted(name for name in found if SWEEP_NAME.match(name))  # a lost manifest: its run folders remain


def latest_sweep(workdir: Path) -> str | None:
    """The sweep launched last in `workdir` (None if there is none)."""
    best: tuple[float, str] | None = None
    for name in known_sweeps(workdir):
        try:
            manifest = sweep_paths(workdir, name).store.load()
        except (OSError, ValueError):
            continue
        stamp = manifest.launched_at or manifest.created_at
        if best is None or stamp > best[0]:
            best = (stamp, name)
    return best[1] if best else None


def existing_sweep(workdir: Path, sweep: str | None) -> SweepPaths:
    """Paths of `sweep` (the latest when None); SweepNotFound (a FileNotFoundError, exit 2) when no
    sweep of that name has been run in `workdir`."""
    name = sweep or latest_sweep(workdir)
    if name is None:
        raise SweepNotFound(f"no sweep has been run in {Path(workdir).resolve()} yet (run `cancelctl sweep FILE` first)")
    paths = sweep_paths(workdir, name)
    if not paths.store.exists() and not paths.runs_dir.is_dir():
        raise SweepNotFound(
            f"sweep {name!r} has not been run in {paths.workdir} (known: {', '.join(known_sweeps(workdir)) or 'none'}); "
            "run `cancelctl sweep FILE` first, or pass --workdir"
        )
    return paths


def sweep_run_records(workdir: Path, sweep: str) -> list[dict]:
    """The run.json records of a sweep's run folders (unreadable ones skipped), in folder order."""
    return [record for record, _ in sweep_run_folders(workdir, sweep)]


def sweep_run_folders(workdir: Path, sweep: str) -> list[tuple[dict, RunFolder]]:
    """(run.json record, folder) of each of a sweep's run folders (unreadable run.json skipped)."""
    runs_dir = sweep_paths(workdir, sweep).runs_dir
    found = ((read_json(path), RunFolder(path.parent)) for path in sorted(runs_dir.glob(f"*/{RUN_JSON}")))
    return [(record, folder) for record, folder in found if isinstance(record, dict)]


def rebuild_manifest(paths: SweepPaths) -> Manifest | None:
    """A manifest rebuilt from the sweep's run folders (run.json), for a manifest lost or damaged;
    None when there are no run folders. Runs keep their folders, so a finished run stays finished
    (result.json) and an interrupted one resumes from its checkpoint; submissions (job ids) are
    not in the run folders: a run without a result is submitted again by the next launch."""
    runs: dict[str, RunEntry] = {}
    executors: set[str] = set()
    stamp = None
    for record, folder in sweep_run_folders(paths.workdir, paths.sweep):
        run = record.get("run") if isinstance(record.get("run"), dict) else {}
        run_id, name = record.get("run_id") or run.get("run_id"), record.get("name") or run.get("name")
        if not run_id or not name:
            continue
        spec = run.get("spec") or {}
        runs[run_id] = RunEntry(name, str(run.get("arm", "")), int(run.get("seed", 0)), str(run.get("group", "")),
                                steps=(spec.get("budget") or {}).get("steps"))
        executors.add(str(spec.get("executor") or "local"))
        try:
            mtime = folder.run_json.stat().st_mtime
        except OSError:
            continue
        stamp = mtime if stamp is None else min(stamp, mtime)
    if not runs:
        return None
    return Manifest(sweep=paths.sweep, executor=min(executors), created_at=stamp or 0.0, runs=runs)
