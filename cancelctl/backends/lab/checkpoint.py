"""Checkpoints: everything a requeued job needs to continue as if never stopped.

Written to a temp file in the run folder and `os.replace`d over `checkpoint.pt`, so a kill during
the write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from cancelctl import fencing
from cancelctl.workdir import CHECKPOINT, RunFolder  # noqa: F401 - CHECKPOINT: the file name, for callers


def save(run_dir: Path, state: dict[str, Any]) -> Path:
    fencing.check(run_dir)  # a stale attempt never overwrites the newer attempt's checkpoint
    target = RunFolder(Path(run_dir)).checkpoint
    fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=f".{target.name}.")
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def load(run_dir: Path) -> dict[str, Any] | None:
    path = RunFolder(Path(run_dir)).checkpoint
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)
