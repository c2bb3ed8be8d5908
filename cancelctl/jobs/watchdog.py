"""The stall watchdog: `python -m cancelctl.jobs.watchdog CONFIG`, a process beside each attempt of a run
that ends the attempt when the run stops making progress (a frozen or deadlocked process cannot watch
itself, so the watcher is another process, in its own session).

Progress is a step in metrics.jsonl or a change of the run's `heartbeat` (`cancelctl.jobs.heartbeat`:
a step replayed after a requeue, a verl phase finished). No progress for the limit (`StallLimits`:
`monitor.stall.after_min`, by default the larger of a floor and a multiple of the run's median step time
from metrics.jsonl's timestamps; before this attempt's first step `startup_min`) means the attempt is
stalled. Then, in this order:

    1. the Python stacks of every process of the job (the training process, its descendants, and the
       sessions they lead: verl's child and its Ray) go to `stalls/attempt-N.txt` — `py-spy dump
       --nonblocking` where py-spy is installed (it reads a frozen process too), else the training
       process's own faulthandler dump, and what /proc says of each process;
    2. the attempt's end goes to attempts.jsonl as `stalled` (step, minutes without progress, limit,
       the stacks' path, whether it is requeued); with the retries used up, error.txt says the run failed
       of the stall;
    3. the run is requeued: on SLURM `scontrol requeue <job>` (before the kill: the job's end would end
       this process too), on the local executor queued again in its sweep's manifest for the driver;
    4. every process of the job is SIGKILLed (not its process group: a local run shares its driver's);
       a run failed of its stall then has its MLflow run tagged and closed FAILED (`close_failed_run`).

Only the attempt that started it is watched: the watchdog leaves when that process exits (a pidfd),
when a newer attempt claims the run folder's fence, or when the job ends it (SIGTERM). It never writes
job.json and never claims the fence, so nothing takes it for the run's process.

`watching(...)` is the job's end (`cancelctl.jobs.runjob`): it starts the watchdog and, for the stdlib
fallback, registers faulthandler on `STACKS_SIGNAL`.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cancelctl.jobs.heartbeat import HEARTBEAT, read_beat
from cancelctl.jobs.stall_requeue import JOB_REQUEUES, close_failed_run

STALLS_DIR = "stalls"
FAULTHANDLER_FILE = ".stacks.faulthandler"  # the training process's own dump (no py-spy)
STACKS_SIGNAL = signal.SIGRTMIN + 4  # faulthandler's; a real-time signal nothing else in a job uses
STEP_TAIL_BYTES = 65536  # the median step time over the steps in metrics.jsonl's tail
PY_SPY_TIMEOUT_S = 20.0
FAULTHANDLER_WAIT_S = 2.0
MIN_POLL_S, MAX_POLL_S = 0.2, 10.0


@dataclass(frozen=True)
class StallLimits:
    """`monitor.stall` in seconds (spec.monitor.StallRule)."""

    after_s: float | None
    floor_s: float
    multiple: float
    startup_s: float
    retries: int

    @classmethod
    def of(cls, rule: Any) -> StallLimits:
        return cls(None if rule.after_min is None else 60 * rule.after_min, 60 * rule.floor_min, rule.step_multiple,
                   60 * rule.startup_min, rule.retries)

    def limit_s(self, stepped: bool, median_step_s: float | None) -> float:
        """Seconds without progress that make a stall: before this attempt's first step, the start-up's."""
        if not stepped:
            return max(self.startup_s, self.after_s or 0.0)
        if self.after_s is not None:
            return self.after_s
        return max(self.floor_s, self.multiple * (median_step_s or 0.0))


def median_step_s(metrics: Path) -> float | None:
    """The median seconds per step over metrics.jsonl's tail, from its lines' timestamps (`ts`, ms).
    A gap across a requeue is one value among many: the median ignores it."""
    try:
        with open(metrics, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - STEP_TAIL_BYTES))
            tail = handle.read()
    except OSError:
        return None
    points = []
    for raw in tail.split(b"\n"):
        try:
            line = json.loads(raw)
            points.append((int(line["step"]), float(line["ts"]) / 1000))
        except (ValueError, KeyError, TypeError):
            continue
    per_step = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(points, points[1:]) if s1 > s0 and t1 >= t0]
    return statistics.median(per_step) if per_step else None


class Progress:
    """What the watched attempt has shown since it started: the last step logged, the heartbeat,
    when either last moved (monotonic), and whether a step has been made (not only a phase)."""

    def __init__(self, run_dir: Path, now: float) -> None:
        from cancelctl.workdir import RunFolder  # here, not at import: the watchdog starts on the stdlib alone

        self.folder = RunFolder(run_dir)
        self.run_dir, self.metrics = run_dir, self.folder.metrics
        self.step = self.folder.last_step()
        self.beat = read_beat(run_dir)[0]
        self.since, self.stepped = now, False

    def observe(self, now: float) -> None:
        step = self.folder.last_step()
        beat, said = read_beat(self.run_dir)
        if step != self.step:
            self.step, self.since, self.stepped = step, self._when(self.metrics, now), True
        if beat != self.beat:
            self.beat, self.since = beat, self._when(self.run_dir / HEARTBEAT, now)
            self.stepped = self.stepped or "step" in said

    def _when(self, path: Path, now: float) -> float:
        """When `path` changed, on the monotonic clock: its modification time, not when this poll saw it
        (a poll sees it up to an interval later), never earlier than the progress before."""
        try:
            age = max(0.0, time.time() - os.stat(path).st_mtime)
        except OSError:
            age = 0.0
        return max(self.since, now - age)


def job_processes(root: int) -> list[int]:
    """`root`, its descendants, and every process of a session one of them leads (verl's child and
    the Ray it started, which may outlive their parents); never this process."""
    table: dict[int, tuple[int, int]] = {}  # pid -> (ppid, session)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(name)] = (int(fields[1]), int(fields[3]))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = [], [root] if root in table else []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    sessions = {pid for pid in tree if pid != root and table[pid][1] == pid}
    found = set(tree) | {pid for pid, (_, sid) in table.items() if sid in sessions}
    return sorted(found - {os.getpid()})


def py_spy() -> str | None:
    """py-spy (the `stall` extra) next to this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def describe_process(pid: int) -> str:
    """What /proc says of a process: its command line, state and kernel wait channel."""
    def read(name: str) -> str:
        try:
            return Path(f"/proc/{pid}/{name}").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError as exc:
            return f"({exc.strerror})"

    state = next((line for line in read("status").splitlines() if line.startswith("State:")), "State: ?")
    return f"=== process {pid}: {read('cmdline')}\n{state}; wchan: {read('wchan') or '-'}\n"


def dump_stack(spy: str | None, pid: int) -> tuple[str, bool]:
    if spy is None:
        return "py-spy is not installed (pip install 'cancelctl[stall]'); /proc only\n", False
    try:
        done = subprocess.run([spy, "dump", "--nonblocking", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=PY_SPY_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"py-spy: {exc}\n", False
    if done.returncode != 0:  # a process that is not Python (raylet), or one that exited meanwhile
        return f"py-spy: {(done.stderr.strip().splitlines() or ['failed'])[0]}\n", False
    return done.stdout, True


def save_stacks(path: Path, root: int, processes: list[int], header: str, run_dir: Path) -> None:
    """Every process's stack into `path`; the training process's faulthandler dump when py-spy could not
    read it (a frozen process writes nothing: it is said so)."""
    spy = py_spy()
    with ThreadPoolExecutor(max_workers=8) as pool:
        dumps = list(pool.map(lambda pid: dump_stack(spy, pid), processes))
    parts = [header]
    for pid, (text, _) in zip(processes, dumps):
        parts += [describe_process(pid), text, "\n"]
    if not dict(zip(processes, [ok for _, ok in dumps])).get(root, False):
        parts.append(own_dump(root, run_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(parts), encoding="utf-8")


def own_dump(root: int, run_dir: Path) -> str:
    """The training process's faulthandler dump (`STACKS_SIGNAL`, registered by `watching`)."""
    dump = run_dir / FAULTHANDLER_FILE
    with contextlib.suppress(ProcessLookupError):
        os.kill(root, STACKS_SIGNAL)
    deadline = time.monotonic() + FAULTHANDLER_WAIT_S
    while time.monotonic() < deadline and not (dump.exists() and dump.stat().st_size):
        time.sleep(0.05)
    text = dump.read_text(errors="replace") if dump.exists() else ""
    return (f"=== faulthandler of process {root}\n"
            + (text or f"(no answer in {FAULTHANDLER_WAIT_S:.0f} s: the process is frozen or blocks signals)\n"))


def requeues_used(attempts: list[dict]) -> int:
    """Stall requeues since the last stall that failed the run (a `--retry-failed` starts afresh)."""
    used = 0
    for line in attempts:
        if line.get("event") == "end" and line.get("outcome") == "stalled":
            used = used + 1 if line.get("requeue") else 0
    return used


def stall_sentence(record: dict) -> str:
    """"stalled at step 5: no progress for 0.4 min (limit 0.3 min); stacks in stalls/attempt-2.txt"."""
    step = record.get("step")
    return (f"stalled {'at step ' + str(step) if step is not None else 'before its first step'}: no progress for "
            f"{record.get('stalled_min', 0):.1f} min (limit {record.get('limit_min', 0):.1f} min); "
            f"stacks in {record.get('stacks')}")


def kill(processes: list[int]) -> None:
    for pid in processes:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@dataclass(frozen=True)
class Watched:
    """The attempt a watchdog watches (the argument of `python -m cancelctl.jobs.watchdog`)."""

    run_dir: str
    pid: int
    start: int
    fence: int
    token: str
    job_id: str
    executor: str  # the submitit job environment (a key of JOB_REQUEUES): how a stalled attempt is requeued
    limits: dict

    def to_arg(self) -> str:
        return json.dumps(asdict(self))


def end_stalled(watched: Watched, progress: Progress, idle_s: float, limit_s: float) -> dict | None:
    """Steps 1-4 of the module's docstring; the attempt's `stalled` record (None: a newer attempt owns
    the run folder, this one is only stopped)."""
    from cancelctl.fencing import current_attempt
    from cancelctl.jobs.outcome import append_attempt_line, error_first_line, read_attempts

    run_dir = Path(watched.run_dir)
    limits = StallLimits(**watched.limits)
    processes = job_processes(watched.pid)
    stacks = Path(STALLS_DIR) / f"attempt-{watched.fence}.txt"
    record = {"event": "end", "token": watched.token, "outcome": "stalled", "ts": time.time(), "step": progress.step,
              "stalled_min": round(idle_s / 60, 3), "limit_min": round(limit_s / 60, 3), "stacks": str(stacks)}
    header = (f"cancelctl stall watchdog, {datetime.datetime.now().isoformat(timespec='seconds')}: run folder "
              f"{run_dir}, attempt {watched.fence}, job {watched.job_id}; {stall_sentence(record)}; "
              f"processes {processes}\n\n")
    save_stacks(run_dir / stacks, watched.pid, processes, header, run_dir)
    if current_attempt(run_dir) != watched.fence:
        kill(processes)
        return None
    used = requeues_used(read_attempts(run_dir))
    record["requeue"] = used < limits.retries
    failure = None if record["requeue"] else f"retries used up ({limits.retries})"
    environment = JOB_REQUEUES[watched.executor]
    if record["requeue"]:  # before the kill: on SLURM the job's end would end this process too
        failure = environment.requeue(run_dir, watched.job_id, watched.token)
    record["requeue"] = failure is None
    append_attempt_line(run_dir, record)
    if failure is not None:
        (run_dir / "error.txt").write_text(
            error_first_line("FAILED", watched.job_id, f"{stall_sentence(record)}; not requeued: {failure}"), encoding="utf-8")
    kill(processes)
    if failure is not None and not environment.job_end_takes_watchdog:
        close_failed_run(run_dir)
    return record


def wait_exit(pidfd: int | None, timeout_s: float) -> None:
    """Sleep `timeout_s`, or less when the watched process exits (its pidfd turns readable)."""
    if pidfd is None:
        time.sleep(timeout_s)
    else:
        select.select([pidfd], [], [], timeout_s)


def watch(watched: Watched) -> dict | None:
    """Watch until the attempt ends, a newer one starts, or it stalls (then its `stalled` record)."""
    from cancelctl.fencing import current_attempt
    from cancelctl.jobs.outcome import same_process_alive

    run_dir, limits = Path(watched.run_dir), StallLimits(**watched.limits)
    try:
        pidfd: int | None = os.pidfd_open(watched.pid)
    except (AttributeError, OSError):
        pidfd = None
    progress = Progress(run_dir, time.monotonic())
    while same_process_alive(watched.pid, watched.start) and current_attempt(run_dir) == watched.fence:
        now = time.monotonic()
        progress.observe(now)
        limit = limits.limit_s(progress.stepped, median_step_s(progress.metrics))
        idle = now - progress.since
        if idle >= limit:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # SLURM's requeue signals this process too: finish first
            return end_stalled(watched, progress, idle, limit)
        wait_exit(pidfd, min(max(limit / 20, MIN_POLL_S), MAX_POLL_S, limit - idle + MIN_POLL_S))
    return None


@contextlib.contextmanager
def watching(run_dir: Path, rule: Any, *, fence: int, token: str, job_id: str | None, executor: str | None) -> Iterator[None]:
    """The watchdog beside this process while the block runs (`rule`: `monitor.stall`). Not for an
    in-process run (`job_id` None: a debug run in the CLI's process) nor with `action: off`."""
    from cancelctl.jobs.outcome import process_start

    if rule.action == "off" or job_id is None or executor not in JOB_REQUEUES:
        yield
        return
    pid = os.getpid()
    watched = Watched(str(run_dir), pid, process_start(pid) or 0, fence, token, job_id, executor,
                      asdict(StallLimits.of(rule)))
    dump_path = Path(run_dir) / FAULTHANDLER_FILE
    dump = open(dump_path, "w", encoding="utf-8")  # noqa: SIM115 - faulthandler writes to it from a signal
    faulthandler.register(STACKS_SIGNAL, file=dump, all_threads=True, chain=False)
    proc = subprocess.Popen([sys.executable, "-m", "cancelctl.jobs.watchdog", watched.to_arg()],
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield
    finally:
        faulthandler.unregister(STACKS_SIGNAL)
        dump.close()
        with contextlib.suppress(OSError):
            if dump_path.stat().st_size == 0:
                dump_path.unlink()
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)


def main(argv: list[str]) -> int:
    watched = Watched(**json.loads(argv[0]))
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    record = watch(watched)
    if record is not None:
        print(f"cancelctl watchdog: run {watched.run_dir}: {stall_sentence(record)}; "
              f"{'requeued' if record['requeue'] else 'not requeued'}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
