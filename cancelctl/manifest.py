"""The sweep manifest: what was planned, what was handed to which scheduler, under which job ids.

One JSON file per sweep (`<workdir>/sweeps/<sweep>/manifest.json`), rewritten atomically (tmp file,
fsync, os.replace): a reader sees the old or the new file, never half of one, even if the writer is
killed. Read-modify-write cycles go through `ManifestStore.update()`, which holds an flock on
`manifest.lock` so a launcher, a local driver and `cancel` never lose each other's changes.

Crash-safe submission is the reason for the two-step `Submission.state`: "intent" is written
BEFORE sbatch (or before a local process starts) with a random token that the scheduler job name
carries; "submitted" with the job id after. A launcher killed in between leaves an intent that the
next launch resolves by asking the scheduler for the token (`reconcile`): found means adopt the job
id, not found means the job never reached the scheduler and its runs are submitted again.

Schema (version 1)::

    {"version": 1, "sweep": "lab-demo", "file": "experiments/lab-demo.yaml", "executor": "slurm",
     "created_at": 1763822400.0, "launched_at": 1763822460.0, "cancelled_at": null,
     "driver": {"pid": 4242, "start": 1234567} | null,        # local/debug driver process
     "planned": ["3f2a9c1b7e0d", ...],                         # run ids of the last launch's sweep file
     "runs": {"3f2a9c1b7e0d": {"name": "grpo-G=8-s0", "arm": "grpo", "seed": 0, "group": "G=8",
                               "queued_at": null,           # local: waiting for a free core
                               "submissions": [["k2v8q1x0aa", 3]],   # (token, array index), oldest first
                               "cancelled_at": null}},
     "submissions": {"k2v8q1x0aa": {"token": "k2v8q1x0aa", "executor": "slurm", "state": "submitted",
                                    "run_ids": ["...", ...],  # array index i runs run_ids[i]
                                    "job_name": "cancelctl:lab-demo:k2v8q1x0aa", "job_id": "812",
                                    "created_at": ..., "submitted_at": ..., "error": null,
                                    "pid_start": null, "resources": {...}}}}
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
import types
import typing
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cancelctl import fileio
from cancelctl.errors import WorkdirStateError
from cancelctl.fileio import LockBusy, atomic_write_json, read_json, unreadable_cause

log = logging.getLogger("cancelctl.launch")

MANIFEST_VERSION = 1
LOCK_TIMEOUT_S = 60.0

# Submission.state
INTENT = "intent"  # recorded before the scheduler call; job_id unknown
SUBMITTED = "submitted"  # the scheduler accepted it; job_id known
ABANDONED = "abandoned"  # an intent the scheduler never saw (launcher died before sbatch)
SUBMIT_FAILED = "submit_failed"  # the scheduler refused it (error says why)
# sbatch ran but its answer was lost (timed out, controller unreachable, unreadable output, killed):
# the job may be queued. Looked up by its name before its runs count as unsubmitted (error says why).
UNCONFIRMED = "unconfirmed"


def new_token() -> str:
    """A short random id; the scheduler job name carries it so a lost job id can be found again."""
    return uuid.uuid4().hex[:10]


@dataclass
class Submission:
    token: str
    executor: str  # a name in cancelctl.executors' registry
    run_ids: list[str]
    state: str = INTENT
    created_at: float = field(default_factory=time.time)
    job_name: str | None = None
    job_id: str | None = None  # slurm: array job id; local: controller pid; debug: launcher pid
    pid_start: int | None = None  # local/debug: process start time (ticks), guards against pid reuse
    submitted_at: float | None = None
    error: str | None = None
    resources: dict[str, Any] = field(default_factory=dict)
    lookup_error: str | None = None  # why the last look for an unconfirmed submission's job got no answer
    # The scheduler's id of one run of it ('812_3' for array task 3): `JobHandle.job_id`.


@dataclass
class RunEntry:
    name: str
    arm: str
    seed: int
    group: str = ""
    steps: int | None = None  # planned training steps (progress display)
    queued_at: float | None = None
    submissions: list[tuple[str, int]] = field(default_factory=list)
    cancelled_at: float | None = None

    @property
    def latest(self) -> tuple[str, int] | None:
        return self.submissions[-1] if self.submissions else None


@dataclass
class Manifest:
    sweep: str
    executor: str
    file: str | None = None
    baseline: str | None = None  # the sweep file's baseline arm: `report`'s default
    created_at: float = field(default_factory=time.time)
    launched_at: float | None = None
    cancelled_at: float | None = None
    driver: dict[str, int] | None = None
    runs: dict[str, RunEntry] = field(default_factory=dict)
    submissions: dict[str, Submission] = field(default_factory=dict)
    # run ids the sweep file planned at its last launch (None: manifests written before it was kept);
    # the other runs are stale (an edited arm, another file reusing the name): kept, never counted
    planned: list[str] | None = None

    def is_current(self, run_id: str) -> bool:
        return self.planned is None or run_id in self.planned

    # -- queries ---------------------------------------------------------------------------

    def latest_submission(self, run_id: str) -> tuple[Submission, int] | None:
        entry = self.runs.get(run_id)
        if entry is None or entry.latest is None:
            return None
        token, index = entry.latest
        return self.submissions[token], index

    def intents(self) -> list[Submission]:
        """Submissions whose fate the scheduler has not confirmed: a killed launcher's intents, and
        submissions whose answer was lost; `reconcile` looks them up."""
        return [s for s in self.submissions.values() if s.state in (INTENT, UNCONFIRMED)]

    # -- changes ---------------------------------------------------------------------------

    def add_submission(self, executor: str, run_ids: list[str], **extra: Any) -> Submission:
        """Record the intent to submit `run_ids` (in array order) and link each run to it."""
        sub = Submission(token=new_token(), executor=executor, run_ids=list(run_ids), **extra)
        self.submissions[sub.token] = sub
        for index, run_id in enumerate(run_ids):
            entry = self.runs[run_id]
            entry.submissions.append((sub.token, index))
            entry.queued_at = None
            entry.cancelled_at = None
        return sub

    # -- (de)serialization -----------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["version"] = MANIFEST_VERSION
        for entry in data["runs"].values():
            entry["submissions"] = [list(pair) for pair in entry["submissions"]]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        version = data.get("version")
        if version != MANIFEST_VERSION:
            raise ValueError(f"manifest version {version!r} is not {MANIFEST_VERSION}")
        _check_types(cls, data, "manifest", skip=("runs", "submissions"))
        runs = {}
        for run_id, entry in _mapping(data.get("runs", {}), "runs").items():
            _check_types(RunEntry, entry, f"runs.{run_id}", skip=("submissions",))
            entry = dict(entry)
            entry["submissions"] = [(str(t), int(i)) for t, i in entry.get("submissions", [])]
            runs[run_id] = RunEntry(**entry)
        subs = {}
        for token, sub in _mapping(data.get("submissions", {}), "submissions").items():
            subs[token] = Submission(**_check_types(Submission, sub, f"submissions.{token}"))
        fields = {k: v for k, v in data.items() if k not in ("version", "runs", "submissions")}
        return cls(runs=runs, submissions=subs, **fields)


def _mapping(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise TypeError(f"{where}: a JSON {type(value).__name__}, not an object")
    return value


def _check_types(cls: type, data: Any, where: str, skip: tuple[str, ...] = ()) -> dict:
    """`data` if each of its fields has the type `cls` declares (TypeError naming the field): a
    manifest edited by hand or by another version is refused as damaged, not met later as a crash."""
    hints = typing.get_type_hints(cls)
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [name for name in required if name not in _mapping(data, where)]
    if missing:  # said here, not as the constructor's "__init__() missing 2 required positional arguments"
        raise TypeError(f"{where}: no {', '.join(missing)}")
    for name, value in data.items():
        if name in hints and name not in skip and not _is_a(value, hints[name]):
            raise TypeError(f"{where}.{name}: {value!r} is not {_type_name(hints[name])}")
    return data


def _is_a(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_is_a(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if hint is float:  # JSON writes 3.0 as 3.0, a hand edit may write 3
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is dict:
        return isinstance(value, dict) and all(_is_a(k, args[0]) and _is_a(v, args[1]) for k, v in value.items())
    if origin in (list, tuple):
        return isinstance(value, list) and (origin is tuple or all(_is_a(v, args[0]) for v in value))
    return isinstance(value, origin or hint)


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


class ManifestDamaged(WorkdirStateError, ValueError):
    """The manifest file exists but cannot be read (truncated, empty, not a manifest), and there are
    no run folders to rebuild it from: the message names the file, the cause and the way out."""

    def __init__(self, path: Path, cause: str):
        self.path, self.cause = Path(path), cause
        super().__init__(
            f"{path}: unreadable sweep manifest ({cause}) and no run folders to rebuild it from; move it aside "
            f"(mv {path} {path}.bad) and run `cancelctl sweep FILE` again: nothing had run yet"
        )


# a sweep lock held for longer than the timeout (an alias: the launcher and `cancel` catch it by this name)
ManifestBusy = LockBusy


def file_lock(
    path: Path, timeout_s: float = LOCK_TIMEOUT_S, *, what: str = "lock"
) -> contextlib.AbstractContextManager[int]:
    """A sweep lock: `fileio.file_lock` with the sweep-lock timeout by default."""
    return fileio.file_lock(path, timeout_s, what=what)


class ManifestStore:
    """A sweep's manifest file and its lock.

    `recover` (given by `SweepPaths.store`) rebuilds a manifest from the sweep's run folders, or
    returns None when there are none: a manifest found truncated, empty or not a manifest is then
    moved aside (`manifest.json.damaged-<time>`) and replaced by the rebuilt one, with a warning;
    a deleted one is rebuilt the same way. The sweep file and its baseline arm, which no run folder
    holds, are kept beside the manifest (`identity.json`, written when they change) and put back
    into a rebuilt one: `report` keeps its default baseline. What the rebuild cannot know (job ids of
    runs still in a scheduler's queue) the next `cancelctl sweep FILE` submits again; finished runs
    stay finished."""

    def __init__(self, path: Path, recover: Callable[[], Manifest | None] | None = None):
        self.path = Path(path)
        self.lock_path = self.path.with_name("manifest.lock")
        self.identity_path = self.path.with_name("identity.json")
        self.recover = recover
        self._identity: dict[str, Any] | None = None  # as last written or read

    def exists(self) -> bool:
        return self.path.is_file() or (self.recover is not None and self._rebuilt() is not None)

    def load(self) -> Manifest:
        try:
            return self._read()
        except (FileNotFoundError, ManifestDamaged):
            if self._rebuilt() is None:
                raise
        with file_lock(self.lock_path, what="sweep manifest"):
            manifest = self._load_locked()  # rebuilt (another process may have repaired it meanwhile)
            self.save(manifest)
        return manifest

    def peek(self) -> Manifest | None:
        """The manifest, or the one the run folders give (None: neither), writing nothing (dry runs)."""
        try:
            return self._read()
        except FileNotFoundError:
            return self._rebuilt()
        except ManifestDamaged:
            return self._rebuilt()  # None: nothing had run, a launch starts afresh

    def _load_locked(self) -> Manifest:
        """`load` for a caller that holds the lock already (the rebuild takes it otherwise)."""
        try:
            return self._read()
        except (FileNotFoundError, ManifestDamaged) as exc:
            rebuilt = self._rebuilt()
            if rebuilt is None:
                raise
            aside = self.path.with_name(f"{self.path.name}.damaged-{int(time.time())}")
            if self.path.exists():
                os.replace(self.path, aside)
            log.warning("%s %s: rebuilt from the run folders (%d runs)%s", self.path,
                        "is missing" if isinstance(exc, FileNotFoundError) else f"was unreadable ({exc.cause})",
                        len(rebuilt.runs), f"; the damaged file is kept as {aside.name}" if aside.exists() else "")
            return rebuilt

    def _read(self) -> Manifest:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(f"no sweep manifest at {self.path}") from None
        except UnicodeDecodeError as exc:
            raise ManifestDamaged(self.path, f"not UTF-8 text: {exc.reason}") from None
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise TypeError(f"a JSON {type(data).__name__}, not an object")
            return Manifest.from_json(data)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            cause = "empty file" if not text.strip() else unreadable_cause(exc)  # the cause, not the class
            raise ManifestDamaged(self.path, cause) from None

    def _rebuilt(self) -> Manifest | None:
        rebuilt = self.recover() if self.recover is not None else None
        kept = read_json(self.identity_path) if rebuilt is not None else None
        if isinstance(kept, dict) and kept.get("sweep") == rebuilt.sweep:
            rebuilt.file = rebuilt.file or (kept.get("file") if isinstance(kept.get("file"), str) else None)
            rebuilt.baseline = rebuilt.baseline or (kept.get("baseline") if isinstance(kept.get("baseline"), str) else None)
        return rebuilt

    def save(self, manifest: Manifest) -> None:
        atomic_write_json(self.path, manifest.to_json())
        identity = {"sweep": manifest.sweep, "file": manifest.file, "baseline": manifest.baseline}
        if self._identity is None:
            self._identity = read_json(self.identity_path)
        if identity != self._identity and (manifest.file or manifest.baseline):
            atomic_write_json(self.identity_path, identity)
            self._identity = identity

    @contextlib.contextmanager
    def update(self, create: Manifest | None = None) -> Iterator[Manifest]:
        """Locked read-modify-write: yields the current manifest (or `create` if there is none yet)
        and saves it when the block exits without an exception."""
        with file_lock(self.lock_path, what="sweep manifest"):
            if self.path.is_file() or self._rebuilt() is not None:
                try:
                    manifest = self._load_locked()
                except ManifestDamaged as exc:
                    if create is None:
                        raise
                    aside = self.path.with_name(f"{self.path.name}.damaged-{int(time.time())}")
                    os.replace(self.path, aside)  # nothing had run (no run folders): start afresh
                    log.warning("%s was unreadable (%s) and no run had started: kept as %s, starting afresh",
                                self.path, exc.cause, aside.name)
                    manifest = create
            elif create is not None:
                manifest = create
            else:
                raise FileNotFoundError(f"no sweep manifest at {self.path}")
            yield manifest
            self.save(manifest)
