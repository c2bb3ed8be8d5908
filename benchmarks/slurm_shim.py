"""A failing scheduler in front of the real one: shims of SLURM's client commands (sacct, squeue, scancel,
sbatch) put first on PATH that, as a mode file says, fail like an unreachable slurmctld, hang, or print
garbage — or, for sbatch, queue the job and then lose the answer — and otherwise exec the real command. The only stand-in the SLURM tests use — the cluster itself is real:
the chaos soak (benchmarks/chaos_soak.py) and tests/slurm/test_slurm_outage.py."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

MODES = ("fail", "hang", "garbage")  # an empty or missing mode file: pass through
# sbatch's answer lost after the real sbatch queued the job: an error that is not a refusal, a hang,
# a banner instead of the job id, the process killed
LOST_ANSWER_MODES = ("queued-then-timeout", "queued-then-hang", "queued-then-banner", "queued-then-killed")
# ... and an sbatch that cannot reach slurmctld and queues nothing (after `--test-only` got through)
SBATCH_MODES = (*LOST_ANSWER_MODES, "unreachable-not-queued")
SHIM = """#!/bin/sh
name=$(basename "$0")
# sbatch follows its own mode file only: a query outage (the shared mode) leaves submissions alone
mode=$(cat {mode}.$name 2>/dev/null || {{ [ "$name" != sbatch ] && cat {mode} 2>/dev/null; }})
[ "$1" = "--test-only" ] && case "$mode" in queued-then-*|*-not-queued) exec {real} "$@" ;; esac  # nothing queued: no answer to lose
case "$mode" in
  fail) echo "$name: error: Unable to contact slurm controller (connect failure)" >&2; exit 1 ;;
  hang) sleep {hang_s}; exit 1 ;;
  garbage) printf '<html>\\377\\376 502 Bad Gateway</html>\\n'; exit 0 ;;
  queued-then-timeout) {real} "$@" >/dev/null 2>&1
    echo "$name: error: Batch job submission failed: Socket timed out on send/recv operation" >&2; exit 1 ;;
  queued-then-hang) {real} "$@" >/dev/null 2>&1; exec sleep {hang_s} ;;
  queued-then-banner) {real} "$@" >/dev/null 2>&1; echo "Welcome to the cluster: maintenance on Tuesday"; exit 0 ;;
  queued-then-killed) {real} "$@" >/dev/null 2>&1; kill -9 $$ ;;
  unreachable-not-queued) echo "$name: error: Batch job submission failed: Unable to contact slurm controller" >&2; exit 1 ;;
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


def set_mode(mode: Path, value: str | None, command: str | None = None) -> None:
    """`fail`, `hang` or `garbage` for every shim reading `mode` but sbatch's (or for `command`'s alone,
    which then ignores the shared mode; sbatch's also takes SBATCH_MODES); None passes through to the
    real commands (for `command`: follows the shared mode again)."""
    allowed = MODES + (SBATCH_MODES if command == "sbatch" else ())
    if value is not None and value not in allowed:
        raise ValueError(f"shim mode {value!r}: one of {allowed} or None")
    if command is None:
        mode.write_text(value or "")
    elif value is None:
        mode.with_name(f"{mode.name}.{command}").unlink(missing_ok=True)
    else:
        mode.with_name(f"{mode.name}.{command}").write_text(value)
