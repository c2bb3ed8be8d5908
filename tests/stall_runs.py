"""A lab run frozen or slowed from outside, for the stall watchdog's tests (local and SLURM): a plain
module shared by them (tests/ has no packages)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import threading
import time
from pathlib import Path

from polling import wait_until

from cancelctl.jobs.outcome import read_attempts, same_process_alive
from cancelctl.workdir import RunFolder

# a limit of a few seconds (the floor, 3 s, or 10 x a step of ~0.7 s) with the spec's default multiple:
# a run whose steps grow 5x stays under it, a frozen one is caught in seconds
FAST_STALL = {"floor_min": 0.05, "startup_min": 3.0, "retries": 2}
STEP_PAUSE_S = "0.5"  # CANCELCTL_TEST_STEP_PAUSE_S: steps of a known length whatever the machine


def steps_logged(run_dir: Path) -> list[int]:
    metrics = RunFolder(run_dir).metrics
    return [json.loads(line)["step"] for line in metrics.read_text().splitlines()] if metrics.exists() else []


def step_times(run_dir: Path) -> dict[int, float]:
    """Seconds each logged step took (from the lines' timestamps)."""
    lines = [json.loads(line) for line in RunFolder(run_dir).metrics.read_text().splitlines()]
    return {b["step"]: (b["ts"] - a["ts"]) / 1000 for a, b in zip(lines, lines[1:]) if b["step"] == a["step"] + 1}


def training_process(run_dir: Path) -> tuple[int, int]:
    """(pid, start) of the attempt running now: the process its run folder's job.json names."""
    job = json.loads(RunFolder(run_dir).job.read_text())
    return job["pid"], job["start"]


def freeze_at_step(run_dir: Path, step: int, timeout_s: float) -> tuple[int, int, float]:
    """SIGSTOP the training process once `step` is logged; (pid, start, when: time.time())."""
    wait_until(lambda: (steps_logged(run_dir) or [-1])[-1] >= step, timeout_s, f"step {step} in {run_dir}", poll_s=0.05)
    pid, start = training_process(run_dir)
    os.kill(pid, signal.SIGSTOP)
    return pid, start, time.time()


def stall_ends(run_dir: Path) -> list[dict]:
    return [a for a in read_attempts(run_dir) if a.get("event") == "end" and a.get("outcome") == "stalled"]


def stall_to_requeue_s(run_dir: Path) -> list[float]:
    """Seconds from each `stalled` record to the start of the next attempt (the requeue, as the run sees it)."""
    lines = read_attempts(run_dir)
    out = []
    for i, line in enumerate(lines):
        if line.get("outcome") == "stalled":
            start = next((a for a in lines[i + 1 :] if a.get("event") == "start"), None)
            if start is not None:
                out.append(start["started_at"] - line["ts"])
    return out


def kill_if_frozen(pid: int, start: int) -> None:
    """A test that failed before the watchdog acted leaves no stopped process behind."""
    if same_process_alive(pid, start):
        os.kill(pid, signal.SIGKILL)


class Throttle:
    """Slows the training process `factor`-fold from outside: stopped (SIGSTOP) for factor-1 of every
    `factor` step lengths, running for one — slow but progressing, never frozen for long."""

    def __init__(self, run_dir: Path, factor: float, step_s: float) -> None:
        self.run_dir, self.factor, self.step_s = run_dir, factor, step_s
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Throttle:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                pid, start = training_process(self.run_dir)
            except (OSError, ValueError):
                return
            if not same_process_alive(pid, start):
                return
            os.kill(pid, signal.SIGSTOP)
            self.done.wait((self.factor - 1) * self.step_s)
            os.kill(pid, signal.SIGCONT)
            self.done.wait(self.step_s)


def median(values) -> float:
    return statistics.median(list(values))
