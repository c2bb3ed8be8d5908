"""Tracking URIs: defaults, validation, a cheap reachability probe and fail-fast HTTP settings."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from cancelctl.errors import CancelctlError

DEFAULT_DB_NAME = "mlflow.db"
PROBE_TIMEOUT_S = 2.0

# MLflow's HTTP client retries 7 times with exponential backoff and a 120 s timeout by default:
# minutes of stall per call against a dead server. Inside cancelctl's calls we want seconds.
FAST_FAIL_HTTP_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": 1,
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": 0,
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": 0,
    "MLFLOW_HTTP_REQUEST_TIMEOUT": 5,
}


class TrackingUnavailable(CancelctlError, RuntimeError):
    """The tracking store cannot be reached right now (the run goes on; `cancelctl sync` later)."""


def default_tracking_uri(workdir: str | Path) -> str:
    """`sqlite:///<absolute workdir>/mlflow.db`."""
    return "sqlite:///" + str(Path(workdir).resolve() / DEFAULT_DB_NAME)


def resolve_tracking_uri(uri: str | None, workdir: str | Path) -> str:
    """Explicit URI, else $MLFLOW_TRACKING_URI, else the sqlite store in the work dir; normalized."""
    chosen = uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(workdir)
    return normalize_tracking_uri(chosen)


def normalize_tracking_uri(uri: str) -> str:
    """Validate a tracking URI and give it one spelling (sqlite paths absolute, no trailing '/').

    Raises ValueError for bare paths and file: URIs (MLflow 3 deprecates the file store).
    """
    uri = str(uri).strip()
    scheme, sep, _ = uri.partition("://")
    if not sep or scheme.lower() == "file" or uri.lower().startswith("file:"):
        raise ValueError(
            f"tracking URI {uri!r} points at MLflow's file store, which MLflow 3 deprecates; use a "
            f"sqlite store (e.g. sqlite:///{Path(uri.removeprefix('file:')).resolve()}/mlflow.db) "
            "or a tracking server (http://host:port)"
        )
    scheme = scheme.lower()
    if scheme == "sqlite":
        path = sqlite_path(uri)
        return "sqlite:///" + str(path) if path is not None else uri
    if scheme in ("http", "https"):
        return uri.rstrip("/")
    return uri


def sqlite_path(uri: str) -> Path | None:
    """Absolute database path of a `sqlite:///…` URI; None for other schemes and in-memory DBs."""
    if not uri.lower().startswith("sqlite://"):
        return None
    rest = uri[len("sqlite://") :].split("?", 1)[0]
    if not rest.startswith("/") or rest in ("/", "/:memory:"):
        return None
    return Path(rest[1:]).resolve()  # 'sqlite:///a.db' is relative, 'sqlite:////a.db' absolute


def probe_store(uri: str, timeout_s: float = PROBE_TIMEOUT_S, *, write: bool = True) -> str | None:
    """None when the store looks usable, else why not. Costs at most ~`timeout_s`.

    HTTP(S): GET <uri>/health; any HTTP answer (even 404 behind a proxy) or a TLS complaint counts
    as alive, a refused connection (dead server) or no answer in time (hung server) does not.
    sqlite: `sqlite_problem` (`write=False` for a verb that only reads). Other schemes: assumed usable.
    """
    if urlsplit(uri).scheme in ("http", "https"):
        return _probe_http(uri.rstrip("/") + "/health", timeout_s)
    path = sqlite_path(uri)
    return sqlite_problem(path, write=write) if path is not None else None


def store_identity(uri: str) -> str | None:
    """Which file a sqlite store is (device and inode), so an upload watermark made in one store is
    not taken for another at the same URI (a rebuilt store, a copied work dir's); None for other
    stores and a store not made yet."""
    path = sqlite_path(uri)
    try:
        stat = path.stat() if path is not None else None
    except OSError:
        return None
    return f"{stat.st_dev}:{stat.st_ino}" if stat is not None else None


def sqlite_problem(path: Path, *, write: bool = True) -> str | None:
    """Why the sqlite store at `path` cannot be used (None: it can), from a few stat calls.

    MLflow meets every one of these by retrying its engine creation for minutes (15 tries with
    exponential backoff), so each is refused here before MLflow is asked: a directory or other
    non-file at the path, a folder that is missing or is a file, a file that is not a sqlite
    database, and, for writers (`write`), a file or folder that cannot be written (permissions,
    a read-only mount: access(2) says EROFS even to root). An absent file is a new store."""
    folder = path.parent
    if path.is_dir():
        return f"{path} is a directory, not a sqlite database file"
    if not folder.is_dir():
        return f"{folder} is a file, not a folder" if folder.exists() else f"folder {folder} does not exist"
    if not path.exists():
        if write and not os.access(folder, os.W_OK):
            return f"cannot create {path.name} in {folder}: the folder is read-only"
        return None
    if not path.is_file():
        return f"{path} is not a regular file"
    if not _is_sqlite_file(path):
        return f"{path} is not a sqlite database"
    if write and not os.access(path, os.W_OK):
        return f"{path} is read-only (its permissions, or a read-only mount)"
    if write and not os.access(folder, os.W_OK):
        return f"folder {folder} is read-only: sqlite cannot write its journal beside {path.name}"
    return None


def _is_sqlite_file(path: Path) -> bool:
    """Read through sqlite itself, not open()/close(): closing another descriptor of a database
    file drops the POSIX locks this process's sqlite connections hold on it."""
    import sqlite3

    try:
        con = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, timeout=0)
        try:
            con.execute("PRAGMA schema_version").fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        return "not a database" not in str(exc)  # busy or locked: a database, in use
    return True


def _probe_http(url: str, timeout_s: float) -> str | None:
    import ssl
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ssl.SSLError):
            return None  # alive; MLflow's own client settings decide about certificates
        return f"cannot reach {url} ({exc.reason})"
    except (OSError, ValueError) as exc:  # timeouts, resets, malformed URLs
        return f"cannot reach {url} ({type(exc).__name__}: {exc})"


@contextlib.contextmanager
def fast_fail_http() -> Iterator[None]:
    """Temporarily cap MLflow's HTTP retries/backoff/timeout (keeps a user's stricter values).

    Not thread-safe (it edits os.environ); cancelctl calls MLflow from one thread per process.
    """
    saved = {name: os.environ.get(name) for name in FAST_FAIL_HTTP_ENV}
    try:
        for name, cap in FAST_FAIL_HTTP_ENV.items():
            os.environ[name] = str(min(cap, _int_or(saved[name], cap)))
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _int_or(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default
