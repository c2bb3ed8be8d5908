"""What SLURM says of a sweep's jobs: every task's state in ONE `sacct` call per poll (squeue only for
arrays sacct does not show yet, or when accounting is off), the tasks slurmctld still holds, and
jobs found again by their name (a job id lost with a killed launcher). Every call has a timeout
(`slurm_commands.run_command`).

A scheduler that does not answer is not a scheduler that says "gone": a task is unknown to SLURM
only when sacct and squeue both answered and neither knows it. Arrays neither answered for are
`TaskStates.unanswered`, with each command's message, and their tasks keep the state SLURM last
gave (`LastKnownStates`, a file of the sweep) until it answers again."""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cancelctl.executors.base import SchedulerError
from cancelctl.executors.slurm_commands import QUERY_TIMEOUT_S, run_command
from cancelctl.fileio import atomic_write_json, read_json

# Answers that say "none" through a non-zero exit, not failures: squeue on an id slurmctld no longer
# holds (past MinJobAge), sacct on a cluster that keeps no accounting (then squeue alone is the truth).
_UNKNOWN_ID = "Invalid job id specified"
_NO_ACCOUNTING = "accounting storage is disabled"


@dataclass(frozen=True)
class TaskState:
    state: str  # SLURM's word: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, OUT_OF_MEMORY ...
    detail: str = ""  # "CANCELLED by 0", exit code, pending reason


class TaskStates(dict):
    """(array id, index) -> TaskState, from one poll; `unanswered`: arrays for which neither sacct nor
    squeue answered (their tasks absent here are not "unknown to SLURM": nobody was asked);
    `failures`: command -> its message; `as_of`: array id -> when SLURM last answered for it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.unanswered: set[str] = set()
        self.failures: dict[str, str] = {}
        self.as_of: dict[str, float] = {}

    def unreachable_note(self) -> str | None:
        """"SLURM unreachable: sacct: ...; squeue: ...; states as of <time>", or None when it answered."""
        if not self.unanswered:
            return None
        said = "; ".join(f"{cmd}: {why}" for cmd, why in sorted(self.failures.items())) or "no answer"
        known = [self.as_of[a] for a in self.unanswered if a in self.as_of]
        when = (f"states as of {datetime.datetime.fromtimestamp(min(known)).strftime('%Y-%m-%d %H:%M:%S')}, "
                f"its last answer" if known else "no state known yet")
        return f"SLURM unreachable: {said}; {when}"


def task_states(array_ids: Sequence[str], sizes: dict[str, int] | None = None) -> TaskStates:
    """State of every task of the given arrays: one sacct call; squeue for arrays that sacct does not
    show in full. Accounting lags slurmctld by a moment: for an array it does show, a task that just
    left the pending record (`812_[4-5]` -> `812_5`) can be missing until slurmdbd records its start,
    so an array with fewer tasks than `sizes` says (array id -> task count) is asked of squeue too.
    A command that fails or hangs is recorded in `failures`; arrays left without an answer in
    `unanswered`."""
    states = TaskStates()
    ids = sorted(set(array_ids))
    if not ids:
        return states
    sacct = _ask(["sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", ",".join(ids)], none_if=_NO_ACCOUNTING)
    parsed = _parse_sacct(sacct) if isinstance(sacct, Answer) else sacct
    if isinstance(parsed, str):
        states.failures["sacct"] = parsed
    else:
        states.update(parsed)
    sizes = sizes or {}
    missing = [i for i in ids if sum(1 for (a, _) in states if a == i) < max(1, sizes.get(i, 1))]
    if missing:
        live, failed = _squeue(missing)
        for key, task in live.items():
            states.setdefault(key, task)  # sacct's word stands where it has one
        if failed:
            states.failures["squeue"] = next(iter(failed.values()))
            states.unanswered.update(failed)
        if "sacct" in states.failures:  # what squeue no longer holds, only accounting could have said
            states.unanswered.update(i for i in missing if sum(1 for (a, _) in states if a == i) < max(1, sizes.get(i, 1)))
    now = time.time()
    states.as_of.update({a: now for a in ids if a not in states.unanswered})
    return states


def squeue_states(array_ids: Sequence[str]) -> dict[tuple[str, int], TaskState]:
    """slurmctld's live view (includes jobs finished within MinJobAge). SchedulerError when it does
    not answer for some array (a caller that must decide cannot read silence as "none")."""
    states, failed = _squeue(array_ids)
    if failed:
        raise SchedulerError(f"SLURM unreachable: squeue: {next(iter(failed.values()))}")
    return states


def _squeue(array_ids: Sequence[str]) -> tuple[dict[tuple[str, int], TaskState], dict[str, str]]:
    """(states, array id -> squeue's failure message for the arrays it did not answer for)."""
    states: dict[tuple[str, int], TaskState] = {}
    failed: dict[str, str] = {}
    for array_id in array_ids:  # squeue fails as a whole on one unknown id: ask one by one
        out = _ask(["squeue", "-h", "-r", "-t", "all", "-j", array_id, "-o", "%F|%K|%T|%r"], none_if=_UNKNOWN_ID)
        parsed = _parse_squeue(out) if isinstance(out, Answer) else out
        if isinstance(parsed, str):
            failed[array_id] = parsed
        else:
            states.update(parsed)
    return states, failed


_STATE_WORD = re.compile(r"[A-Z_]+(?: .*)?")  # "RUNNING", "CANCELLED by 0"


def _parse_sacct(text: str) -> dict[tuple[str, int], TaskState] | str:
    """`sacct -X -P -o JobID,State,ExitCode` lines; a line that is not one (a garbled answer: a
    proxy's page, a half-written pipe) makes the whole answer a failure, never an empty one."""
    states: dict[tuple[str, int], TaskState] = {}
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        parts = line.split("|")
        tasks = expand_job_id(parts[0]) if len(parts) >= 3 else []
        if not tasks or not _STATE_WORD.fullmatch(parts[1]):
            return f"unreadable answer: {line[:80]!r}"
        word = parts[1].split()[0]
        detail = parts[1] if word != parts[1] else (f"exit {parts[2]}" if parts[2] not in ("", "0:0") else "")
        for key in tasks:
            states[key] = TaskState(word, detail)
    return states


def _parse_squeue(text: str) -> dict[tuple[str, int], TaskState] | str:
    """`squeue -o %F|%K|%T|%r` lines (%K is N/A for a job that is not an array); as `_parse_sacct`."""
    states: dict[tuple[str, int], TaskState] = {}
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        parts = line.split("|")
        if len(parts) != 4 or not parts[0].isdigit() or not (parts[1].isdigit() or parts[1] == "N/A") \
                or not _STATE_WORD.fullmatch(parts[2]):
            return f"unreadable answer: {line[:80]!r}"
        if parts[1].isdigit():
            reason = parts[3] if parts[3] not in ("None", "") else ""
            states[(parts[0], int(parts[1]))] = TaskState(parts[2], reason)
    return states


def _ask(cmd: list[str], *, none_if: str = "") -> Answer | str:
    """What the command printed when it answered (an `Answer`; "" where its error is `none_if`), or
    its failure message (a plain str) when it failed or hung."""
    try:
        result = run_command(cmd, timeout=QUERY_TIMEOUT_S, check=False)
    except SchedulerError as exc:  # hung past its timeout, or the command is missing
        return str(exc)
    if result.returncode == 0:
        return Answer(result.stdout)
    said = (result.stderr or result.stdout).strip()
    if none_if and none_if in said:
        return Answer("")
    return said.splitlines()[-1] if said else f"{cmd[0]} exited {result.returncode}"


class Answer(str):
    """What a scheduler command printed when it answered (its failure is a plain str)."""


class LastKnownStates:
    """The task states SLURM last gave for a sweep's arrays (a file of the sweep): what `status`
    shows while it does not answer. Only answers are written; silence never overwrites one."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def merge(self, polled: TaskStates) -> TaskStates:
        """`polled`, with the tasks of its unanswered arrays filled in from the last answer (and
        `as_of` saying when that was); the answered arrays are remembered for next time."""
        saved = read_json(self.path, {}) or {}
        arrays = saved.get("arrays", {}) if isinstance(saved, dict) else {}
        changed = False
        for array_id, when in polled.as_of.items():
            tasks = {str(i): [t.state, t.detail] for (a, i), t in polled.items() if a == array_id}
            if arrays.get(array_id, {}).get("tasks") != tasks or when - arrays.get(array_id, {}).get("as_of", 0) > 60:
                arrays[array_id], changed = {"as_of": when, "tasks": tasks}, True
        for array_id in polled.unanswered:
            record = arrays.get(array_id)
            if not record:
                continue
            polled.as_of[array_id] = float(record.get("as_of", 0))
            for index, (state, detail) in record.get("tasks", {}).items():
                polled.setdefault((array_id, int(index)), TaskState(state, detail))
        if changed:
            try:
                atomic_write_json(self.path, {"arrays": arrays})
            except OSError:
                pass  # a read-only work dir: status still answers, without memory
        return polled


LIVE = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
        "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "SPECIAL_EXIT"}


def live_tasks(array_ids: Sequence[str]) -> list[str]:
    """Tasks of these arrays slurmctld still holds a process or queue slot for (COMPLETING included:
    a cancelled job's processes are still alive until KillWait has passed)."""
    states = squeue_states(array_ids)  # SchedulerError when slurmctld does not answer: never "none left"
    return sorted(f"{a}_{i}" for (a, i), task in states.items() if task.state in LIVE)


def find_by_name(names: Sequence[str], since: float) -> dict[str, str]:
    """Job name -> array job id, for jobs submitted since `since` (epoch s). Asks slurmctld (squeue,
    live, includes jobs that sacct has not recorded yet) and the accounting DB (sacct, older jobs).
    A name is "not submitted" only when both answered: SchedulerError when one of them did not and
    some name is not found (adopting nothing beats abandoning a job that runs)."""
    found: dict[str, str] = {}
    if not names:
        return found
    joined = ",".join(names)
    live = _ask(["squeue", "-h", "-t", "all", "--name", joined, "-o", "%F|%j"])
    for line in live.splitlines() if isinstance(live, Answer) else []:
        job_id, _, name = line.partition("|")
        found.setdefault(name, job_id)
    start = datetime.datetime.fromtimestamp(since - 3600).strftime("%Y-%m-%dT%H:%M:%S")
    acct = _ask(["sacct", "-X", "-n", "-P", "-S", start, "-E", "now", "--name", joined, "-o", "JobID,JobName"],
                none_if=_NO_ACCOUNTING)
    for line in acct.splitlines() if isinstance(acct, Answer) else []:
        job_id, _, name = line.partition("|")
        base = re.match(r"\d+", job_id)
        if base and name in names:
            found.setdefault(name, base.group(0))
    silent = {cmd: said for cmd, said in (("squeue", live), ("sacct", acct)) if not isinstance(said, Answer)}
    if silent and set(names) - set(found):
        said = "; ".join(f"{cmd}: {why}" for cmd, why in silent.items())
        raise SchedulerError(f"SLURM unreachable: {said}; cannot tell whether jobs {joined} were submitted")
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
