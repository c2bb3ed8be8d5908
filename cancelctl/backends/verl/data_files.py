"""A verl run's data files and reward, as the job will read them.

- Relative paths in `data.train_files`, `data.val_files` and `data.reward_function` are relative to
  the directory `cancelctl sweep` (or `validate`) runs in — where `cancelctl data prepare` writes
  `data/` by default. verl itself runs in the run folder, so the job makes them absolute against
  the launch directory recorded in run.json (`launch_dir`).
- A spec with no `data.reward_function` whose files are datasets `cancelctl data prepare` makes is
  scored by cancelctl's rewards (`cancelctl.data.rewards`, dispatched on each row's data_source);
  any other data keeps verl's built-in scorer for its data_source.
- `data_problems` is what `validate` and `sweep` check before anything is queued: each file exists
  (else the `cancelctl data prepare …` line that makes it), has the columns verl reads, and — when
  cancelctl's rewards score it — only data_sources they know.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cancelctl.spec.experiment import ExperimentSpec
    from cancelctl.spec.run import RunSpec


def data_files(spec: ExperimentSpec) -> list[str]:
    """Every file verl reads rows from, training first, each once."""
    return list(dict.fromkeys([*spec.data.train_files, *spec.data.val_files]))


def absolute(path: str, base: Path | str) -> str:
    """`path` as the job must pass it to verl (which runs in the run folder)."""
    return path if os.path.isabs(path) or "://" in path else str(Path(base, path))


def scored_by_cancelctl(spec: ExperimentSpec) -> bool:
    """No reward function named, and every file is one `cancelctl data prepare` makes (by its path,
    `<out>/<dataset>/<split>.parquet`): verl's built-in scorer knows none of their data_sources."""
    from cancelctl.data.layout import dataset_for_path

    files = data_files(spec)
    return spec.data.reward_function is None and bool(files) and all(dataset_for_path(f) is not None for f in files)


def data_problems(run: RunSpec, base: Path | str | None = None) -> list[tuple[str, str]]:
    """(spec field, problem) per problem with the run's data files, read from `base` (default: the
    working directory, where `cancelctl sweep` and `validate` run)."""
    spec = run.spec
    here = base is None or Path(base).resolve() == Path.cwd().resolve()

    def where(name: str) -> str:  # messages keep the spec's own path when it is read from here
        return name if here else absolute(name, base)

    known_only = scored_by_cancelctl(spec)
    problems: list[tuple[str, str]] = []
    for field, names in (("data.train_files", spec.data.train_files), ("data.val_files", spec.data.val_files)):
        for name in names:
            path = where(name)
            problems += [(field, line) for line in _file_problems(path, _stamp(Path(path)), require_known_reward=known_only)]
    if spec.data.reward_function is not None:
        reward_file = Path(where(spec.data.reward_function.partition(":")[0]))
        if not reward_file.is_file():
            problems.append(("data.reward_function", f"{reward_file}: no such file"))
    return problems


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=256)
def _file_problems(path: str, stamp: tuple[int, int] | None, *, require_known_reward: bool) -> tuple[str, ...]:
    # one read per file and version, however many runs of a sweep name it
    from cancelctl.data.check import check_parquet

    return tuple(check_parquet(path, require_known_reward=require_known_reward))
