"""A failing scheduler in front of the real one: shims of SLURM's client commands (sacct, squeue, scancel)
put first on PATH that, as a mode file says, fail like an unreachable slurmctld, hang, or print garbage,
and otherwise exec the real command. The only stand-in the SLURM tests use — the cluster itself is real:
the chaos soak (benchmarks/chaos_soak.py) and tests/slurm/test_slurm_outage.py."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

MODES = ("fail", "hang", "garbage")  # an empty or missing mode file: pass through
SHIM = """#!/bin/sh
mode=$(cat {mode} 2>/dev/null)
case "$mode" in
  fail) echo "$(basename "$0"): error: Unable to contact slurm controller (connect failure)" >&2; exit 1 ;;
  hang) sleep {hang_s}; exit 1 ;;
  garbage) printf '<html>\\377\\376 502 Bad Gateway</html>\\n'; exit 0 ;;
esac
exec {real} "$@"
"""


def write_shims(folder: Path, mode: Path, commands: tuple[str, ...], *, hang_s: int) -> None:
    """One shim per command in `folder` (put it first on PATH), each reading `mode` and execing the real
    command found on PATH now; `hang` sleeps `hang_s`, longer than the caller's query timeout."""
    folder.mkdir(parents=True, exist_ok=True)
    for command in commands:
        real = shutil.which(command)
        if real is None:
            raise FileNotFoundError(f"{command} is not on PATH: the shim needs the real one behind it")
        shim = folder / command
        shim.write_text(SHIM.format(mode=mode, real=real, hang_s=hang_s))
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def set_mode(mode: Path, value: str | None) -> None:
    """`fail`, `hang` or `garbage` for every shim reading `mode`; None passes through to the real commands."""
    if value is not None and value not in MODES:
        raise ValueError(f"shim mode {value!r}: one of {MODES} or None")
    mode.write_text(value or "")
