"""A sqlite store whose schema migration was cut part way, rebuilt once space is back.

MLflow migrates a sqlite store (a new one, or one an MLflow upgrade finds old) with alembic, and
sqlite commits part of each migration as it goes: a full disk mid-migration leaves `_alembic_tmp_*`
tables or half a migration behind, and every later open fails for good on "table ... already
exists", long after space has returned. Such a store is moved aside (`mlflow.db.damaged-<time>`,
kept, with a `.txt` saying why) and a new one made in its place. The points are not lost: every run
keeps them in its folder's metrics.jsonl, and a run's upload watermark belongs to the store file it
was made in (`uri.store_identity`), so `cancelctl sync`, a run's next upload and `report` treat the
new store as holding none of them yet.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import time
from pathlib import Path

from cancelctl.tracking.uri import TrackingUnavailable

log = logging.getLogger("cancelctl.tracking")

MIN_FREE_BYTES = 16 * 2**20  # a new store's schema takes ~1 MB; rebuilding on a still-full disk would cut it again
_SIDE_FILES = ("", "-journal", "-wal", "-shm")


def cut_migration(db_path: Path, exc: BaseException) -> str | None:
    """Why the store at `db_path` failed to open with `exc` if that is a cut migration, else None."""
    leftovers = _leftover_tables(db_path)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if leftovers:
        return f"its schema migration was cut part way (left {', '.join(leftovers)} behind; MLflow: {text})"
    if "already exists" in text and type(exc).__name__ == "OperationalError":
        return f"its schema migration was cut part way (MLflow: {text})"
    return None


def _leftover_tables(db_path: Path) -> list[str]:
    try:
        con = sqlite3.connect(db_path.as_uri() + "?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute(r"SELECT name FROM sqlite_master WHERE name LIKE '\_alembic\_tmp\_%' ESCAPE '\'")
            return sorted(name for (name,) in rows)
        finally:
            con.close()
    except sqlite3.Error:
        return []


def rebuild_store(db_path: Path, why: str) -> Path:
    """Move the damaged store aside (with a note saying why) so MLflow makes a new one at `db_path`;
    returns where the damaged one went. Called under the store lock."""
    free = shutil.disk_usage(db_path.parent).free
    if free < MIN_FREE_BYTES:
        raise TrackingUnavailable(f"tracking store sqlite:///{db_path} unusable: {why}; only {free // 2**20} MiB "
                                  f"free in {db_path.parent}: it is rebuilt once space is back")
    aside = db_path.with_name(f"{db_path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}")
    for suffix in _SIDE_FILES:
        part = Path(f"{db_path}{suffix}")
        if part.exists():
            os.replace(part, Path(f"{aside}{suffix}"))
    note = aside.with_name(aside.name + ".txt")
    note.write_text(
        f"{time.strftime('%Y-%m-%d %H:%M:%S %z')}: the MLflow store {db_path} could not be opened: {why}.\n"
        f"It was moved here and a new store made in its place. Every run's points are in its run folder's\n"
        f"metrics.jsonl: `cancelctl sync` uploads them into the new store (runs still running do so themselves).\n",
        encoding="utf-8",
    )
    log.warning("tracking store %s rebuilt: %s; the damaged one is kept as %s (see %s); `cancelctl sync` uploads "
                "every run's points again from the run folders", db_path, why, aside.name, note.name)
    return aside
