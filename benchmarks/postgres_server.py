"""A throwaway PostgreSQL server for the tests and benchmarks: Debian's server binaries (package
`postgresql`: /usr/lib/postgresql/<version>/bin), a cluster made by `initdb` in a new temp folder,
`postgres` listening on 127.0.0.1 only (a free port, no unix socket), password authentication
(scram-sha-256) for one user, stopped and its folder removed when the block ends.

    with postgres_server() as pg:
        pg.create_database("mlflow")
        uri = pg.uri("mlflow")          # postgresql://cancelctl@127.0.0.1:<port>/mlflow, no password
        env = pg.env                    # {"PGPASSWORD": ...}: where libpq reads the password

PostgreSQL refuses to run as root: as root, the cluster belongs to the `postgres` system user
(the package makes it) and its binaries run as that user. `missing_reason()` says why no server can
be started here (tests skip with it).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_USER = "cancelctl"
SYSTEM_USER = "postgres"  # Debian's package's owner of clusters, used when this process is root


def server_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl: $CANCELCTL_PG_BIN, else the newest
    /usr/lib/postgresql/<version>/bin, else the one pg_ctl on PATH is in."""
    candidates = [os.environ.get("CANCELCTL_PG_BIN", "")]
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version(p.parent.name), reverse=True)
    candidates += [str(p) for p in versions]
    on_path = shutil.which("pg_ctl")
    candidates.append(str(Path(on_path).resolve().parent) if on_path else "")
    for folder in filter(None, candidates):
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    return None


def missing_reason() -> str | None:
    """Why no PostgreSQL server can be started here (None: one can)."""
    if server_binaries() is None:
        return "PostgreSQL's server binaries are not installed (apt-get install postgresql; or set CANCELCTL_PG_BIN)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            return f"running as root and there is no {SYSTEM_USER!r} user to run PostgreSQL as"
    try:
        import psycopg  # noqa: F401 - SQLAlchemy 2.1's driver for postgresql://
    except ImportError:
        return "PostgreSQL's Python driver (psycopg) is not installed: pip install -e '.[postgres]'"
    return None


@dataclass
class PostgresServer:
    bin: Path
    data: Path
    port: int
    user: str
    password: str
    host: str = "127.0.0.1"

    def uri(self, database: str, scheme: str = "postgresql") -> str:
        """The tracking URI of `database`: user, host, port; never the password."""
        return f"{scheme}://{self.user}@{self.host}:{self.port}/{database}"

    @property
    def env(self) -> dict[str, str]:
        """What a client process needs beside the URI: the password, where libpq reads it."""
        return {"PGPASSWORD": self.password}

    def connect(self, database: str = "postgres"):
        import psycopg

        return psycopg.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                               dbname=database, connect_timeout=10)

    def create_database(self, name: str) -> str:
        """CREATE DATABASE `name` (a fresh one); returns its URI."""
        con = self.connect()
        try:
            con.autocommit = True
            with con.cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{name}"')
        finally:
            con.close()
        return self.uri(name)

    def query(self, database: str, sql: str, params: tuple = ()) -> list[tuple]:
        con = self.connect(database)
        try:
            with con.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchall()
        finally:
            con.close()


@contextlib.contextmanager
def postgres_server(*, user: str = DEFAULT_USER, max_connections: int = 200,
                    settings: dict[str, str] | None = None) -> Iterator[PostgresServer]:
    """A PostgreSQL server on 127.0.0.1 for the block (see the module's docstring)."""
    reason = missing_reason()
    if reason:
        raise RuntimeError(reason)
    binaries = server_binaries()
    folder = Path(tempfile.mkdtemp(prefix="cancelctl-pg-"))
    owner = _owner()
    if owner is not None:
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    data, log, pwfile = folder / "data", folder / "server.log", folder / "pwfile"
    password = secrets.token_urlsafe(18)
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    if owner is not None:
        os.chown(pwfile, owner.pw_uid, owner.pw_gid)
    run = _runner(owner)
    started = False
    try:
        run([binaries / "initdb", "-D", data, "-U", user, "--pwfile", pwfile, "--auth", "scram-sha-256",
             "-E", "UTF8", "--locale", "C"])
        pwfile.unlink()
        port = _free_port()
        options = {"listen_addresses": "127.0.0.1", "port": str(port), "unix_socket_directories": "''",
                   "max_connections": str(max_connections), **(settings or {})}
        run([binaries / "pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "-o",
             " ".join(f"-c {key}={value}" for key, value in options.items()), "start"])
        started = True
        yield PostgresServer(binaries, data, port, user, password)
    except subprocess.CalledProcessError as exc:
        tail = log.read_text()[-2000:] if log.exists() else ""
        raise RuntimeError(f"PostgreSQL did not start ({exc}):\n{exc.stdout or ''}{exc.stderr or ''}{tail}") from None
    finally:
        if started:
            with contextlib.suppress(subprocess.CalledProcessError):
                run([binaries / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"])
        shutil.rmtree(folder, ignore_errors=True)


def _owner() -> pwd.struct_passwd | None:
    """The user the cluster runs as: `postgres` when this process is root, else this process's."""
    return pwd.getpwnam(SYSTEM_USER) if os.geteuid() == 0 else None


def _runner(owner: pwd.struct_passwd | None):
    def run(argv: list) -> None:
        kwargs = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []} if owner is not None else {}
        subprocess.run([str(a) for a in argv], check=True, capture_output=True, text=True, cwd="/", **kwargs)

    return run


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        return (0,)


# -- MLflow's tracking server with its basic-auth app, backed by PostgreSQL -------------------------


@contextlib.contextmanager
def mlflow_auth_server(pg: PostgresServer, folder: Path, *, admin_password: str, workers: int = 2,
                       database: str = "mlflow", auth_database: str = "mlflow_auth") -> Iterator[str]:
    """`mlflow server --app-name basic-auth` on 127.0.0.1 (a free port): runs and metrics in
    PostgreSQL database `database`, users in `auth_database` (both made here), the admin user
    `admin` with `admin_password`. Yields the server's URI (no credentials in it); stopped, with
    its workers, when the block ends. The server's own environment gets the database password."""
    import sys
    import time
    import urllib.request

    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    backend, auth_db = pg.create_database(database), pg.create_database(auth_database)
    config = folder / "basic_auth.ini"
    config.write_text("[mlflow]\ndefault_permission = READ\n"
                      f"database_uri = {auth_db}\nadmin_username = admin\n"
                      "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                      # a password checked once a minute, not on each request (PBKDF2 costs ~0.1 s of CPU):
                      # `report` asks for every metric of every run
                      "auth_cache_ttl_seconds = 60\n")
    port = _free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--app-name", "basic-auth",
               "--backend-store-uri", backend, "--default-artifact-root", (folder / "artifacts").as_uri(),
               "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    env = {**os.environ, **pg.env, "MLFLOW_AUTH_CONFIG_PATH": str(config), "MLFLOW_AUTH_ADMIN_PASSWORD": admin_password,
           "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),  # CSRF protection of its UI forms
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        env.pop(name, None)
    log_path = folder / "server.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(uri + "/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"mlflow server not up after 180 s:\n{log_path.read_text()[-3000:]}") from None
                time.sleep(0.5)
        yield uri
    finally:
        import signal

        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)  # uvicorn workers left behind
        server.wait()


def create_mlflow_user(uri: str, admin_password: str, username: str, password: str) -> None:
    """Create a user of the basic-auth server, as its admin (MLflow's REST API)."""
    import base64
    import json
    import urllib.request

    request = urllib.request.Request(
        uri + "/api/2.0/mlflow/users/create", data=json.dumps({"username": username, "password": password}).encode(),
        headers={"Content-Type": "application/json",
                 "Authorization": "Basic " + base64.b64encode(f"admin:{admin_password}".encode()).decode()},
        method="POST")
    with urllib.request.urlopen(request, timeout=30):
        pass
