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

CHECKPOINT = "checkpoint.pt"


def save(run_dir: Path, state: dict[str, Any]) -> Path:
    target = Path(run_dir) / CHECKPOINT
    fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=f".{CHECKPOINT}.")
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def load(run_dir: Path) -> dict[str, Any] | None:
    path = Path(run_dir) / CHECKPOINT
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)
