"""`cancelctl logs RUN`: where one run's output is (the job's stdout/stderr, error.txt) and its tail.

A run is named as `status` shows it: its name (`gspo-G=8-s0`), its run id, or a unique prefix of the
run id, in the given sweep (the latest by default)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cancelctl.errors import ArgumentError
from cancelctl.executors.base import SHOW
from cancelctl.launch.control import sweep_status
from cancelctl.runstate import RunState
from cancelctl.workdir import RunFolder, check_name, existing_sweep


@dataclass
class RunLogs:
    sweep: str
    state: RunState
    files: list[tuple[str, Path, list[str] | None]] = field(default_factory=list)  # (what, path, tail or None: absent)
    note: str = ""
    unreachable: str | None = None  # the scheduler did not answer: the state shown is the last it gave


def find_run(states: list[RunState], run: str, sweep: str) -> RunState:
    """The run named `run` (name, run id or unique run-id prefix); ArgumentError listing candidates."""
    exact = [s for s in states if run in (s.name, s.run_id)]
    if exact:
        return exact[0]
    prefixed = [s for s in states if s.run_id.startswith(run)]
    if len(prefixed) == 1:
        return prefixed[0]
    if prefixed:
        raise ArgumentError(f"run {run!r} is ambiguous in sweep {sweep}: " + ", ".join(f"{s.name} ({s.run_id})" for s in prefixed))
    names = ", ".join(s.name for s in states[:20]) + (" ..." if len(states) > 20 else "")
    raise ArgumentError(f"no run {run!r} in sweep {sweep} (runs: {names or 'none'}; see `cancelctl status {sweep}`)")


def run_logs(workdir: Path, run: str, sweep: str | None = None, lines: int = 20) -> RunLogs:
    check_name(run, "run name")
    name = existing_sweep(workdir, sweep).sweep
    every = sweep_status(workdir, name, include_stale=True, freshness=SHOW)
    state = find_run(every, run, name)
    logs = RunLogs(name, state, unreachable=every.unreachable)
    if state.log is not None:
        logs.files.append(("job stdout", state.log.with_suffix(".out"), None))
        logs.files.append(("job stderr", state.log, None))
    elif state.executor is None:
        logs.note = "never submitted: no job output yet"
    else:  # an executor that runs in the launcher's process (debug) keeps no job log of its own
        logs.note = f"the {state.executor} executor keeps no job log: the run's output went to the launcher's terminal"
    if state.run_dir is not None:
        logs.files.append(("error", RunFolder(state.run_dir).error, None))
    logs.files = [(what, path, tail(path, lines)) for what, path, _ in logs.files]
    return logs


def tail(path: Path, lines: int) -> list[str] | None:
    """The last `lines` lines of a text file (None when it does not exist)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except OSError:
        return None
    return data.decode("utf-8", "replace").splitlines()[-lines:] if lines > 0 else []
