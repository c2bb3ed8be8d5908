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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cancelctl.errors import SchedulerError
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
        self.unasked: set[str] = set()  # arrays not asked about yet (a watcher's first look): no state, no outage
        self.silent_since: float | None = None  # when SLURM first left a query unanswered, this outage

    def no_answer_for(self, array_id: str) -> bool:
        """Nothing SLURM said covers this array now: an outage, or not asked yet."""
        return array_id in self.unanswered or array_id in self.unasked

    def unreachable_note(self) -> str | None:
        """"SLURM unreachable: sacct: ...; squeue: ...; states as of <time>", or None when it answered."""
        if not self.unanswered:
            return None
        said = "; ".join(f"{cmd}: {why}" for cmd, why in sorted(self.failures.items())) or "no answer"
        known = [self.as_of[a] for a in self.unanswered if a in self.as_of]
        when = (f"states as of {_clock(min(known))}, its last answer" if known else "no state known yet")
        since = f" (no answer since {_clock(self.silent_since)})" if self.silent_since else ""
        return f"SLURM unreachable: {said}; {when}{since}"


def _clock(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def task_states(array_ids: Sequence[str], sizes: dict[str, int] | None = None,
                names: Sequence[str] | None = None) -> TaskStates:
    """State of every task of the given arrays: one sacct call and one squeue call, asked at the same
    time (a hanging scheduler costs one query time-out, not two). sacct's word stands where it has
    one; squeue fills in what accounting has not recorded yet (a task that just left the pending
    record, `812_[4-5]` -> `812_5`, is missing from sacct until slurmdbd records its start) and is
    the truth when accounting is off. `names` (the arrays' job names) let squeue answer for all of
    them in one call; without them it is asked per array. A command that fails or hangs is
    recorded in `failures`; arrays left without an answer in `unanswered`."""
    states = TaskStates()
    ids = sorted(set(array_ids))
    if not ids:
        return states
    sacct_cmd = ["sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", ",".join(ids)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        asked_sacct = pool.submit(_ask, sacct_cmd, none_if=_NO_ACCOUNTING)
        asked_squeue = pool.submit(_squeue, ids, names)
        sacct, (live, failed) = asked_sacct.result(), asked_squeue.result()
    parsed = _parse_sacct(sacct) if isinstance(sacct, Answer) else sacct
    if isinstance(parsed, str):
        states.failures["sacct"] = parsed
    else:
        states.update(parsed)
    sizes = sizes or {}
    missing = [i for i in ids if sum(1 for (a, _) in states if a == i) < max(1, sizes.get(i, 1))]
    for key, task in live.items():
        if key[0] in missing:
            states.setdefault(key, task)  # sacct's word stands where it has one
    if failed:
        states.failures["squeue"] = next(iter(failed.values()))
        states.unanswered.update(i for i in missing if i in failed)
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


def _squeue(array_ids: Sequence[str], names: Sequence[str] | None = None
            ) -> tuple[dict[tuple[str, int], TaskState], dict[str, str]]:
    """(states, array id -> squeue's failure message for the arrays it did not answer for). By job
    name, one call for every array (a name it does not hold is no error); by id, one call per array
    (squeue fails as a whole on one id it no longer holds)."""
    states: dict[tuple[str, int], TaskState] = {}
    failed: dict[str, str] = {}
    if names:
        out = _ask(["squeue", "-h", "-r", "-t", "all", "--name", ",".join(sorted(set(names))), "-o", "%F|%K|%T|%r"])
        parsed = _parse_squeue(out) if isinstance(out, Answer) else out
        if isinstance(parsed, str):
            return states, {array_id: parsed for array_id in array_ids}
        wanted = set(array_ids)
        return {key: task for key, task in parsed.items() if key[0] in wanted}, failed
    for array_id in array_ids:
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
    """What SLURM last said of a sweep's arrays (a file of the sweep, shared by every verb and watcher
    of the work dir): each array's task states with when they were given, and the last query — when
    it was asked, for which arrays, what failed and since when SLURM has been silent. What `status`
    shows while SLURM does not answer; silence never overwrites an answer."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict:
        saved = read_json(self.path, {}) or {}
        return saved if isinstance(saved, dict) else {}

    def merge(self, polled: TaskStates, *, asked_at: float | None = None) -> TaskStates:
        """`polled`, with the tasks of its unanswered arrays filled in from the last answer (and
        `as_of` saying when that was); the answer and the query are recorded for the next asker."""
        saved = self._read()
        arrays = saved.get("arrays", {}) if isinstance(saved.get("arrays"), dict) else {}
        for array_id, when in polled.as_of.items():
            arrays[array_id] = {"as_of": when, "tasks": {str(i): [t.state, t.detail] for (a, i), t in polled.items()
                                                         if a == array_id}}
        self._fill(polled, arrays, polled.unanswered)
        query = saved.get("query") if isinstance(saved.get("query"), dict) else {}
        silent_since = query.get("silent_since") if polled.unanswered else None
        now = time.time()
        polled.silent_since = float(silent_since or asked_at or now) if polled.unanswered else None
        record = {"arrays": arrays, "query": {
            "asked_at": asked_at or now, "arrays": sorted({a for a, _ in polled} | set(polled.as_of) | polled.unanswered),
            "unanswered": sorted(polled.unanswered), "failures": polled.failures, "silent_since": polled.silent_since}}
        try:
            atomic_write_json(self.path, record)
        except OSError:
            pass  # a read-only work dir: status still answers, without memory
        return polled

    def cached(self, array_ids: Sequence[str]) -> tuple[TaskStates, float | None]:
        """(the states last recorded for these arrays, when the query that gave them was asked — None
        when no query covered them all). Arrays with no record are `unasked`, not unanswered."""
        saved = self._read()
        arrays = saved.get("arrays", {}) if isinstance(saved.get("arrays"), dict) else {}
        query = saved.get("query") if isinstance(saved.get("query"), dict) else {}
        states = TaskStates()
        wanted = set(array_ids)
        states.unanswered.update(a for a in query.get("unanswered", []) if a in wanted)
        states.failures.update(query.get("failures", {}) if states.unanswered else {})
        states.silent_since = query.get("silent_since") if states.unanswered else None
        self._fill(states, arrays, wanted)
        for array_id in wanted - set(states.as_of) - states.unanswered:
            states.unasked.add(array_id)
        covered = wanted <= set(query.get("arrays", [])) | set(arrays)
        asked_at = query.get("asked_at")
        return states, (float(asked_at) if covered and isinstance(asked_at, (int, float)) else None)

    @staticmethod
    def _fill(states: TaskStates, arrays: dict, array_ids) -> None:
        for array_id in array_ids:
            record = arrays.get(array_id)
            if not isinstance(record, dict):
                continue
            if array_id not in states.as_of:
                states.as_of[array_id] = float(record.get("as_of", 0))
            for index, (state, detail) in record.get("tasks", {}).items():
                states.setdefault((array_id, int(index)), TaskState(state, detail))


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
