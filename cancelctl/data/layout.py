"""Where `cancelctl data prepare` puts a dataset (`<out>/<name>/<split>.parquet`) and the one command
line that makes it: what a spec's path says about the data it names, read without opening a file.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from cancelctl.data.inventory import DEFAULT_OUT_DIR, UnknownDataset, entry


def prepare_command(name: str, *, out_dir: Path | str | None = None, seed: int | None = None, size: int | None = None) -> str:
    """The one line that makes dataset `name` (options only where they differ from the defaults)."""
    entry(name)  # an unknown name fails here, not in the user's shell
    words = ["cancelctl", "data", "prepare", name]
    if out_dir is not None and Path(out_dir) != DEFAULT_OUT_DIR:
        words += ["--out", str(out_dir)]
    if seed is not None:
        words += ["--seed", str(seed)]
    if size is not None:
        words += ["--size", str(size)]
    return shlex.join(words)


def dataset_for_path(path: Path | str) -> tuple[str, Path] | None:
    """(catalog name, out dir) of a file `prepare` writes, read from its path (<out>/<name>/<split>.parquet)."""
    path = Path(path)
    try:
        found = entry(path.parent.name)
    except UnknownDataset:
        return None
    if path.name not in {p.name for p in found.files().values()}:
        return None
    return found.name, path.parent.parent
