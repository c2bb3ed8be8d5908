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
from cancelctl.fileio import raise_naming
from cancelctl.workdir import CHECKPOINT, RunFolder  # noqa: F401 - CHECKPOINT: the file name, for callers


def save(run_dir: Path, state: dict[str, Any]) -> Path:
    fencing.check(run_dir)  # a stale attempt never overwrites the newer attempt's checkpoint
    target = RunFolder(Path(run_dir)).checkpoint
    save_replacing(state, target)
    return target


def save_replacing(obj: Any, target: Path) -> None:
    """`torch.save` to a temp file beside `target`, then `os.replace` over it. A write that fails
    raises the OS's own error naming `target` ("No space left on device: …/checkpoint.pt"): torch's
    C++ writer, given a path, reports a full disk only as "unexpected pos N vs M"; given a Python
    file, the OSError of the failed write is the context of its RuntimeError."""
    target = Path(target)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError as exc:
        raise_naming(exc, target)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
        os.replace(tmp, target)
    except OSError as exc:  # also the close's flush, after torch's RuntimeError
        raise_naming(exc, target)
    except RuntimeError as exc:
        cause = _os_error_under(exc)
        if cause is None:
            raise
        raise_naming(cause, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _os_error_under(exc: BaseException) -> OSError | None:
    """The OSError a (torch) exception was raised while handling, if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and exc.errno is not None:
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def load(run_dir: Path) -> dict[str, Any] | None:
    path = RunFolder(Path(run_dir)).checkpoint
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)
