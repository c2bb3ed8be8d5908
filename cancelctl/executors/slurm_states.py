"""What SLURM says of a sweep's jobs: every task's state in ONE `sacct` call per poll (squeue only for
arrays sacct does not show yet, or when accounting is off), the tasks slurmctld still holds, and
jobs found again by their name (a job id lost with a killed launcher). Every call has a timeout
(`slurm_commands.run_command`)."""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from dataclasses import dataclass

from cancelctl.executors.base import SchedulerError
from cancelctl.executors.slurm_commands import QUERY_TIMEOUT_S, run_command


@dataclass(frozen=True)
class TaskState:
    state: str  # SLURM's word: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, OUT_OF_MEMORY ...
    detail: str = ""  # "CANCELLED by 0", exit code, pending reason


def task_states(array_ids: Sequence[str], sizes: dict[str, int] | None = None) -> dict[tuple[str, int], TaskState]:
    """State of every task of the given arrays: one sacct call; squeue for arrays that sacct does not
    show in full. Accounting lags slurmctld by a moment: for an array it does show, a task that just
    left the pending record (`812_[4-5]` -> `812_5`) can be missing until slurmdbd records its start,
    so an array with fewer tasks than `sizes` says (array id -> task count) is asked of squeue too."""
    states: dict[tuple[str, int], TaskState] = {}
    ids = sorted(set(array_ids))
    if not ids:
        return states
    result = run_command(
        ["sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", ",".join(ids)],
        timeout=QUERY_TIMEOUT_S,
        check=False,
    )
    if result.returncode == 0:
        for line in result.stdout.splitlines():
            parts = line.split("|")
            if len(parts) < 3:
                continue
            for array_id, index in expand_job_id(parts[0]):
                word = parts[1].split()[0] if parts[1] else "UNKNOWN"
                detail = parts[1] if word != parts[1] else (f"exit {parts[2]}" if parts[2] not in ("", "0:0") else "")
                states[(array_id, index)] = TaskState(word, detail)
    sizes = sizes or {}
    missing = [i for i in ids if sum(1 for (a, _) in states if a == i) < max(1, sizes.get(i, 1))]
    if missing:
        for key, task in squeue_states(missing).items():
            states.setdefault(key, task)  # sacct's word stands where it has one
    return states


def squeue_states(array_ids: Sequence[str]) -> dict[tuple[str, int], TaskState]:
    """slurmctld's live view (includes jobs finished within MinJobAge)."""
    states: dict[tuple[str, int], TaskState] = {}
    for array_id in array_ids:  # squeue fails as a whole on one unknown id: ask one by one
        result = run_command(
            ["squeue", "-h", "-r", "-t", "all", "-j", array_id, "-o", "%F|%K|%T|%r"],
            timeout=QUERY_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            continue
        for line in result.stdout.splitlines():
            parts = line.split("|")
            if len(parts) == 4 and parts[1].isdigit():
                reason = parts[3] if parts[3] not in ("None", "") else ""
                states[(parts[0], int(parts[1]))] = TaskState(parts[2], reason)
    return states


LIVE = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
        "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "SPECIAL_EXIT"}


def live_tasks(array_ids: Sequence[str]) -> list[str]:
    """Tasks of these arrays slurmctld still holds a process or queue slot for (COMPLETING included:
    a cancelled job's processes are still alive until KillWait has passed)."""
    states = squeue_states(array_ids)
    return sorted(f"{a}_{i}" for (a, i), task in states.items() if task.state in LIVE)


def find_by_name(names: Sequence[str], since: float) -> dict[str, str]:
    """Job name -> array job id, for jobs submitted since `since` (epoch s). Asks slurmctld (squeue,
    live, includes jobs that sacct has not recorded yet) and the accounting DB (sacct, older jobs)."""
    found: dict[str, str] = {}
    if not names:
        return found
    joined = ",".join(names)
    live = run_command(["squeue", "-h", "-t", "all", "--name", joined, "-o", "%F|%j"], timeout=QUERY_TIMEOUT_S, check=False)
    for line in live.stdout.splitlines() if live.returncode == 0 else []:
        job_id, _, name = line.partition("|")
        found.setdefault(name, job_id)
    start = datetime.datetime.fromtimestamp(since - 3600).strftime("%Y-%m-%dT%H:%M:%S")
    acct = run_command(
        ["sacct", "-X", "-n", "-P", "-S", start, "-E", "now", "--name", joined, "-o", "JobID,JobName"],
        timeout=QUERY_TIMEOUT_S,
        check=False,
    )
    for line in acct.stdout.splitlines() if acct.returncode == 0 else []:
        job_id, _, name = line.partition("|")
        base = re.match(r"\d+", job_id)
        if base and name in names:
            found.setdefault(name, base.group(0))
    if live.returncode != 0 and acct.returncode != 0:
        raise SchedulerError(f"cannot ask SLURM for jobs {joined}: {live.stderr.strip()} / {acct.stderr.strip()}")
    return found


def expand_job_id(text: str) -> list[tuple[str, int]]:
    """'812_3' -> [('812', 3)]; '812_[0-2,5%4]' -> [('812', 0), ('812', 1), ('812', 2), ('812', 5)];
    '812' (not an array) -> [('812', 0)]."""
    match = re.fullmatch(r"(\d+)_(\d+)", text)
    if match:
        return [(match.group(1), int(match.group(2)))]
    match = re.fullmatch(r"(\d+)_\[([\d,\-]+)(?:%\d+)?\]", text)
    if match:
        out = []
        for part in match.group(2).split(","):
            low, _, high = part.partition("-")
            out.extend((match.group(1), i) for i in range(int(low), int(high or low) + 1))
        return out
    if text.isdigit():
        return [(text, 0)]
    return []  # job steps ('812_3.batch') and anything else
