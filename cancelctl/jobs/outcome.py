"""What an attempt of a run leaves in its run folder, and how the rest of cancelctl reads it back
(`cancelctl status`, the executors, the launcher):

    result.json     the backend's final metrics, written last: its presence means "completed"
                    (or "stopped" with stopped.json: a monitor rule ended the run; result.json
                    then has a "stopped" field, and the MLflow run the cancelctl.stopped_* tags)
    error.txt       "FAILED <when>: <exception>" or "INTERRUPTED ..." then the traceback (its blocks
                    reserved at each start, so a full disk can still say so)
    job.json        the current attempt: pid, process start, host, job id, token
    attempts.jsonl  one "start" and one "end" line per attempt (requeues, retries)

A process is named for good by its pid and start time (`process_start`): pids are reused, start
times are not.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from cancelctl import fencing
from cancelctl.fileio import atomic_write_json, raise_naming, read_json, read_jsonl
from cancelctl.workdir import RunFolder


def current_job_id() -> str | None:
    """The scheduler's id of this process's job: '812_3' for SLURM array task 3, the controller pid
    for submitit's local executor, None in-process (debug)."""
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or env.get("SUBMITIT_LOCAL_JOB_ID")


def process_start(pid: int) -> int | None:
    """Start time of process `pid` in clock ticks since boot (None if it does not exist).
    Together with the pid it names one process for good: pids are reused, start times are not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
    if fields[0] in ("Z", "X"):  # exited (zombie): not running any more
        return None
    return int(fields[19])


def same_process_alive(pid: int | None, start: int | None) -> bool:
    """The very process `pid` and `start` (`process_start`) name is still running: a pid alone may
    have been reused by another process since, its start time may not."""
    return pid is not None and start is not None and process_start(pid) == start


def start_attempt(run_dir: Path, token: str, hardware: dict[str, str] | None = None) -> None:
    """job.json (this attempt) and a start line in attempts.jsonl; `hardware`: what it runs on
    (`cancelctl.jobs.hardware`), kept per attempt since a requeue may land on another node."""
    pid = os.getpid()
    job = {
        "token": token,
        "pid": pid,
        "start": process_start(pid),
        "host": socket.gethostname(),
        "job_id": current_job_id(),
        "restart_count": int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0),
        "started_at": time.time(),
        **({"hardware": hardware} if hardware else {}),
    }
    atomic_write_json(RunFolder(run_dir).job, job)
    _append_jsonl(RunFolder(run_dir).attempts, {"event": "start", **job})


def end_attempt(run_dir: Path, token: str, outcome: str) -> None:
    fencing.check(run_dir)
    _append_jsonl(RunFolder(run_dir).attempts, {"event": "end", "token": token, "outcome": outcome, "ts": time.time()})


def append_attempt_line(run_dir: Path, line: dict[str, Any]) -> None:
    """An attempt's line written by another process than the attempt's own (the stall watchdog's
    `stalled` end, which checks the fence itself: it holds none)."""
    _append_jsonl(RunFolder(run_dir).attempts, line)


def stalls(run_dir: Path) -> list[dict[str, Any]]:
    """The `stalled` ends of the run's attempts (`cancelctl.jobs.watchdog`), oldest first."""
    return [a for a in read_attempts(run_dir) if a.get("event") == "end" and a.get("outcome") == "stalled"]


ERROR_RESERVE = ".error.reserve"  # space set aside at each start for error.txt (a full disk)
ERROR_RESERVE_BYTES = 16 * 1024


def describe_exception(exc: BaseException | None) -> str:
    """One line: an OS error as its cause and path ("No space left on device: /w/run/checkpoint.pt"),
    anything else as "Type: message"."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return f"{type(exc).__name__}: {exc}".splitlines()[0] if exc is not None else "unknown error"


def reserve_error_space(run_dir: Path) -> None:
    """Allocate the blocks error.txt will need now, while there is space: a run that fails because
    the disk is full can still say so (the reserve is renamed to error.txt and written in place)."""
    try:
        with open(run_dir / ERROR_RESERVE, "wb") as handle:
            handle.write(b" " * ERROR_RESERVE_BYTES)
    except OSError:
        pass


def error_first_line(kind: str, job_id: str | None, message: str) -> str:
    """error.txt's first line: "FAILED <when> job <id>: <message>" (`read_error` reads it back)."""
    when = datetime.datetime.now().isoformat(timespec="seconds")
    return f"{kind} {when} job {job_id or 'in-process'}: {message}\n"


def write_error(run_dir: Path, kind: str) -> None:
    fencing.check(run_dir)
    exc = sys.exc_info()[1]
    text = error_first_line(kind, current_job_id(), describe_exception(exc))
    path = RunFolder(run_dir).error
    try:
        path.write_text(text + traceback.format_exc(), encoding="utf-8")
    except OSError:  # the disk is full (or read-only): the reserved blocks, written in place
        reserve = run_dir / ERROR_RESERVE
        try:
            os.replace(reserve, path)
            data = (text + traceback.format_exc()).encode("utf-8")[:ERROR_RESERVE_BYTES]
            with open(path, "r+b") as handle:
                handle.write(data)
                handle.truncate(len(data))
        except OSError:
            print(text, file=sys.stderr, flush=True)  # the job's log (submitit), when nothing else can be written
    else:
        (run_dir / ERROR_RESERVE).unlink(missing_ok=True)


def write_result(run_dir: Path, metrics: dict[str, float], *, token: str, finished_at: float | None = None,
                 **extra: Any) -> None:
    """result.json: the run's final metrics; its presence means "completed" to `cancelctl status`."""
    fencing.check(run_dir)
    payload = {"metrics": metrics, "finished_at": time.time() if finished_at is None else finished_at, "token": token}
    atomic_write_json(RunFolder(run_dir).result, {**payload, **extra})


def archive_error(run_dir: Path) -> None:
    """Keep the last attempt's error.txt as error.prev.txt: a new attempt starts without one."""
    folder = RunFolder(run_dir)
    if folder.error.exists():
        folder.error.replace(folder.error_prev)


def archive_stop(run_dir: Path) -> None:
    """Keep an earlier attempt's stopped.json as stopped.prev.json (with the result.json it came
    with gone): a resumed stopped run is not stopped until a rule stops it again."""
    folder = RunFolder(run_dir)
    if folder.stopped.exists():
        folder.result.unlink(missing_ok=True)
        folder.stopped.replace(folder.stopped_prev)


def read_error(run_dir: Path) -> tuple[str, str] | None:
    """(kind, first line) of error.txt: kind is FAILED or INTERRUPTED."""
    try:  # a byte that is not UTF-8 (a damaged file, a message in another encoding) still reads
        first = RunFolder(run_dir).error.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    kind, _, rest = first.partition(" ")
    return kind, first


def read_attempts(run_dir: Path) -> list[dict[str, Any]]:
    """The lines of attempts.jsonl; a damaged line is skipped and said once (`fileio.read_jsonl`)."""
    return [line for line in read_jsonl(RunFolder(run_dir).attempts) if isinstance(line, dict)]


def result_finished_at(run_dir: Path) -> float | None:
    """When result.json was written, if no attempt has started since (a new attempt removes it once
    started): the run's own positive answer that it ended. None: no such result."""
    result = read_json(RunFolder(run_dir).result)
    if not isinstance(result, dict) or not isinstance(result.get("finished_at"), (int, float)):
        return None
    finished = float(result["finished_at"])
    later = any(a.get("event") == "start" and isinstance(a.get("started_at"), (int, float)) and a["started_at"] > finished
                for a in read_attempts(run_dir))
    return None if later else finished


def _append_jsonl(path: Path, data: dict[str, Any]) -> None:
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(data, sort_keys=True) + "\n")
    except OSError as exc:  # a full disk fails the write, which names no file
        raise_naming(exc, path)
