"""A password written in a URI (`scheme://user:password@host/…`): found, and shown as `***`.

Below the spec and tracking both (no I/O, no MLflow): the spec refuses such a `tracking.uri` at
validate time, and every place a URI is printed or stored shows it through `redact_uri`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

PASSWORD_PLACES = (
    "write the URI without it and give the password in the environment (PGPASSWORD for PostgreSQL, "
    "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD for an MLflow server) or in a file only you can read "
    "(chmod 600: ~/.pgpass, ~/.mlflow/credentials); see docs/slurm.md, Tracking"
)


def uri_password(uri: str) -> str | None:
    """The password written in a URI's `user:password@`, None when it holds none."""
    try:
        return urlsplit(str(uri).strip()).password
    except ValueError:
        return None


def redact_uri(uri: str) -> str:
    """`uri` as it may be shown or stored: a password in it is `***`."""
    uri = str(uri)
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    authority, slash, tail = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not at or ":" not in userinfo:
        return uri
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}{slash}{tail}"
