"""Tracking URIs: defaults, validation, a cheap reachability probe and fail-fast HTTP settings.

Credentials never travel in a URI: a `user:password@` in a tracking URI is refused (the URI is
written to run.json, the manifest's spec, MLflow params and every log line that names the store).
The password comes from where each client reads it natively (docs/slurm.md, "Tracking"):

    postgresql://user@host/db   libpq: $PGPASSWORD, else the 0600 file $PGPASSFILE or ~/.pgpass
    http(s)://host:port         MLflow: $MLFLOW_TRACKING_USERNAME/_PASSWORD, else the 0600 file
                                ~/.mlflow/credentials ([mlflow] tracking_username, tracking_password)

A credentials file that its group or others may read is refused (libpq would ignore it silently).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from cancelctl.errors import ArgumentError, CancelctlError
from cancelctl.uri_secrets import PASSWORD_PLACES, redact_uri, uri_password  # noqa: F401 - re-exported

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


POSTGRES_SCHEMES = ("postgresql", "postgres")
class TrackingUnavailable(CancelctlError, RuntimeError):
    """The tracking store cannot be reached right now (the run goes on; `cancelctl sync` later)."""


class PasswordInUri(ArgumentError, ValueError):
    """A tracking URI holds a password (exit 2; the message shows the URI with `***` for it)."""

    def __init__(self, uri: str):
        super().__init__(f"tracking URI {redact_uri(uri)} holds a password: {PASSWORD_PLACES}",
                         title="a password in a tracking URI")


class CredentialsRefused(CancelctlError):
    """The tracking store refuses the credentials given (or a credentials file is unsafe): a setting
    to fix, not a store to wait for. Exit code 2, nothing submitted."""

    exit_code = 2


def is_postgres(uri: str) -> bool:
    """`postgresql://`, `postgres://` and their `+driver` spellings (`postgresql+psycopg2://`)."""
    scheme, sep, _ = str(uri).partition("://")
    return bool(sep) and scheme.lower().split("+", 1)[0] in POSTGRES_SCHEMES


def default_tracking_uri(workdir: str | Path) -> str:
    """`sqlite:///<absolute workdir>/mlflow.db`."""
    return "sqlite:///" + str(Path(workdir).resolve() / DEFAULT_DB_NAME)


def resolve_tracking_uri(uri: str | None, workdir: str | Path) -> str:
    """Explicit URI, else $MLFLOW_TRACKING_URI, else the sqlite store in the work dir; normalized."""
    chosen = uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(workdir)
    return normalize_tracking_uri(chosen)


def normalize_tracking_uri(uri: str) -> str:
    """Validate a tracking URI and give it one spelling (sqlite paths absolute, no trailing '/').

    Raises ValueError for bare paths and file: URIs (MLflow 3 deprecates the file store), and
    `PasswordInUri` (a ValueError) for a URI that holds a password.
    """
    uri = str(uri).strip()
    if uri_password(uri):
        raise PasswordInUri(uri)
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
    sqlite: `sqlite_problem` (`write=False` for a verb that only reads). PostgreSQL: a real connection
    (credentials included: MLflow retries a refused one for most of an hour). Other schemes: assumed usable.
    """
    if urlsplit(uri).scheme in ("http", "https"):
        return _probe_http(uri.rstrip("/") + "/health", timeout_s)
    if is_postgres(uri):
        return _probe_postgres(uri, timeout_s)
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


# -- credentials ------------------------------------------------------------------------------------


def credentials_file(uri: str) -> Path | None:
    """The file the store's own client reads a password from: $PGPASSFILE or ~/.pgpass for
    PostgreSQL, ~/.mlflow/credentials for an MLflow server; None for other stores."""
    if is_postgres(uri):
        return Path(os.environ.get("PGPASSFILE") or Path.home() / ".pgpass")
    if urlsplit(uri).scheme in ("http", "https"):
        return Path.home() / ".mlflow" / "credentials"
    return None


def credentials_file_problem(uri: str) -> str | None:
    """Why the store's credentials file must not be used (its group or others may read it), else None."""
    path = credentials_file(uri)
    try:
        mode = path.stat().st_mode if path is not None else None
    except OSError:
        return None  # none: the environment, or no password at all
    if mode is not None and mode & 0o077:
        return (f"{path} may be read by its group or others (mode {mode & 0o777:o}): it holds a password; "
                f"`chmod 600 {path}` (libpq ignores such a file, and cancelctl refuses it)")
    return None


def credentials_problem(uri: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the store refuses the credentials this process would log with, or why their file must not
    be used; None otherwise. A store that cannot be reached is None here (`probe_store` says so, and
    runs go on without it): only a definite refusal counts."""
    problem = credentials_file_problem(uri)
    if problem is None and is_postgres(uri):
        problem = _postgres_connect(uri, timeout_s)
        problem = problem if problem and _is_auth_failure(problem) else None
    elif problem is None and urlsplit(uri).scheme in ("http", "https"):
        problem = _http_auth_problem(uri, timeout_s)
    return problem


def check_credentials(uri: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise `CredentialsRefused` (exit 2) where `credentials_problem` finds one."""
    problem = credentials_problem(uri, timeout_s)
    if problem:
        raise CredentialsRefused(f"tracking store {redact_uri(uri)}: {problem}")


_PG_PASSWORD_MARKERS = ("password authentication failed", "no password supplied")
# a refusal to fix, not a server to wait for: the password, the user, the database, pg_hba.conf
_PG_REFUSAL_MARKERS = (*_PG_PASSWORD_MARKERS, "authentication failed", "pg_hba.conf", "does not exist")


def _is_auth_failure(message: str) -> bool:
    return any(marker in message for marker in _PG_REFUSAL_MARKERS)


def _probe_postgres(uri: str, timeout_s: float) -> str | None:
    return credentials_file_problem(uri) or _postgres_connect(uri, timeout_s)


def _postgres_connect(uri: str, timeout_s: float) -> str | None:
    """Open and close one connection with libpq (psycopg 3, SQLAlchemy 2.1's driver for
    `postgresql://`; else psycopg2): None, or libpq's reason why not (it never quotes the password),
    with where the password comes from."""
    dsn = "postgresql" + uri[uri.index("://"):]  # libpq's URI: SQLAlchemy's +driver dropped
    try:
        import psycopg as driver
    except ImportError:
        try:
            import psycopg2 as driver
        except ImportError:
            return "PostgreSQL's driver is not installed: pip install 'cancelctl[postgres]'"
    try:
        driver.connect(dsn, connect_timeout=max(2, int(timeout_s + 0.999))).close()
    except driver.Error as exc:
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        if any(marker in text for marker in _PG_PASSWORD_MARKERS):
            text += " (the password comes from PGPASSWORD or ~/.pgpass: docs/slurm.md, Tracking)"
        return text
    return None


def _http_auth_problem(uri: str, timeout_s: float) -> str | None:
    """Ask the server for one experiment with MLflow's credentials (its environment variables, else
    ~/.mlflow/credentials): a 401 or 403 is a refusal; anything else is not this function's to say."""
    import base64
    import configparser
    import urllib.error
    import urllib.request

    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    source = "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD"
    path = credentials_file(uri)
    if not (user and password) and path is not None and path.is_file():
        config = configparser.ConfigParser()
        with contextlib.suppress(configparser.Error, OSError):
            config.read(path)
        section = config["mlflow"] if config.has_section("mlflow") else {}
        user, password = user or section.get("tracking_username"), password or section.get("tracking_password")
        source = f"{source} or {path}"
    request = urllib.request.Request(uri.rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1")
    if user and password:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return None
    except urllib.error.HTTPError as exc:
        if exc.code == 401 and not (user and password):
            return f"the server asks for a user name and password, and none is set ({source}; docs/slurm.md, Tracking)"
        if exc.code == 401:
            return f"the server refused user {user!r} and its password (from {source})"
        if exc.code == 403:
            return f"user {user!r} may not read this server's experiments (an MLflow admin grants it)"
        return None
    except (OSError, ValueError):
        return None  # unreachable: probe_store's to say


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
