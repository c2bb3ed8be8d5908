"""A chaos soak on a real SLURM cluster: a sweep of small lab runs while a fault injector, on a seeded
schedule, restarts slurmctld, stops slurmdbd for a while, makes sacct/squeue hang, fail or print
garbage (a PATH shim in front of the real binaries, for cancelctl's verbs only), requeues running jobs
(scontrol requeue, and submitit's USR2 time-limit warning), kills them and freezes them (SIGSTOP: the
stall watchdog must catch and requeue them), SIGTERMs / SIGKILLs the launcher
mid-submit and has sbatch queue an array but lose its answer, with `status`, `watch` and `report`
running throughout, and beside it one run needing several one-minute allocations (time limits); then
plain reruns until every run is done. Afterwards everything is counted from
the scheduler's own history (sacct with requeued instances) and the store (MLflow, the run folders),
not from cancelctl's view:

    runs completed = runs planned
    every step of every run logged exactly once (metrics.jsonl and MLflow's history: no duplicate, no gap)
    no run had two jobs alive at once (sacct start/end intervals of the tasks carrying it)
    no verb printed a traceback
    no frozen process left alive (each stall caught), the time-limited run completed, each step once
    the final report equals an undisturbed sweep's (same file, same seeds, in-process) up to float noise

Jepsen's shape: a seeded fault schedule, a history, and checks on the history alone.

    python benchmarks/chaos_soak.py                       # 48 runs, a 90 s fault window
    python benchmarks/chaos_soak.py --runs 40 --window 45 --json soak.json   # CI's short variant

Needs root and the cluster `.ci/slurm-up.sh` starts (it restarts that cluster's daemons).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cancelctl.backends.lab.step_cost import STEP_PAUSE_ENV  # the lab's step-pause test hook
from slurm_shim import set_mode, write_shims  # beside this script (run as benchmarks/chaos_soak.py)

ROOT = Path(__file__).resolve().parents[1]
LOSSES = ["grpo", "gspo", "dapo", "grpo_symclip", "dfpo", "dfpo"]
LAB = {"d_model": 16, "n_layers": 1, "n_heads": 2, "warmstart_steps": 5, "checkpoint_every": 2, "max_operand": 5}
STEPS = 6
FAULT_KINDS = ("slurmctld_restart", "slurmdbd_stop", "queries_hang", "queries_fail", "queries_garbage",
               "requeue_job", "time_limit_warning", "kill_job", "stall_job")
# the stall watchdog on every soak run: 30 s without a step (never reached by a lab step of ~1 s, even on
# loaded cores), 2 min before the first; a frozen run is requeued, at most 3 times
STALL = {"floor_min": 0.5, "startup_min": 2.0, "retries": 3}
# beside the soak, one run across time limits: SLURM's smallest limit (1 min), 2 s a step (the test hook
# the job inherits from sbatch's environment, counted by the plan too), on partition multi (idle during
# the soak): ~80 s of steps, over allocations that leave ~20-38 s each after start-up and the lead: at
# least three, each ended at a step boundary and requeued. Under load it needs many more: SLURM sends
# USR2 up to a minute before the lead asks (its event resolution; sbatch(1) --signal), so an allocation
# often ends ~25 s in, and start-up (imports, the busy store's 10 s wait) takes most of that: 6 to 9
# allocations on two loaded cores, ~300 s (the settle window the test gives must hold them)
TIME_LIMIT_STEPS = 40
TIME_LIMIT_STEP_PAUSE_S = "2"
ACTIVE = ("queued", "pending", "running")  # `status --json` states of a run not ended
JOB_FAULTS = {  # on a running task: SLURM's requeue, submitit's USR2 before the time limit (it requeues), a kill
    "requeue_job": lambda task: ["scontrol", "requeue", task],
    "time_limit_warning": lambda task: ["scancel", "--signal=USR2", task],
    "kill_job": lambda task: ["scancel", task],
}


# ------------------------------------------------------------------------------- the cluster's daemons


def _conf_value(path: str, key: str, default: str) -> str:
    match = re.search(rf"^{key}\s*=\s*(\S+)", Path(path).read_text(), re.MULTILINE) if Path(path).exists() else None
    return match.group(1) if match else default


def _real(command: str) -> str:
    return shutil.which(command) or command


def _quiet(cmd: list[str], timeout: float = 20) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=timeout).returncode == 0
    except (subprocess.TimeoutExpired, OSError):
        return False


def _wait(check, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return False


def _stop_daemon(pidfile: str) -> None:
    try:
        pid = int(Path(pidfile).read_text().strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    _wait(lambda: not Path(f"/proc/{pid}").exists(), 20)


def slurmctld_restart(down_s: float) -> None:
    _stop_daemon(_conf_value("/etc/slurm/slurm.conf", "SlurmctldPidFile", "/run/slurmctld.pid"))
    time.sleep(down_s)
    subprocess.run([_real("slurmctld")], check=True, timeout=30)
    _wait(lambda: _quiet([_real("scontrol"), "ping"]), 60)


def slurmdbd_stop(down_s: float) -> None:
    _stop_daemon(_conf_value("/etc/slurm/slurmdbd.conf", "PidFile", "/run/slurmdbd.pid"))
    time.sleep(down_s)
    subprocess.run([_real("slurmdbd")], check=True, timeout=30)
    _wait(lambda: _quiet([_real("sacctmgr"), "-n", "list", "cluster"]), 60)


def cluster_up() -> None:
    """Both daemons answering (a soak that stopped mid-fault leaves none down)."""
    if not _quiet([_real("sacctmgr"), "-n", "list", "cluster"]):
        subprocess.run([_real("slurmdbd")], timeout=30)
    if not _quiet([_real("scontrol"), "ping"]):
        subprocess.run([_real("slurmctld")], timeout=30)
    assert _wait(lambda: _quiet([_real("scontrol"), "ping"]) and _quiet([_real("sacctmgr"), "-n", "list", "cluster"]), 90), \
        "the SLURM cluster does not answer: run .ci/slurm-up.sh"


def running_tasks(sweep: str) -> list[str]:
    out = subprocess.run([_real("squeue"), "-h", "-r", "-t", "RUNNING", "-o", "%i|%j"], capture_output=True, text=True,
                         timeout=20).stdout
    return [line.split("|")[0] for line in out.splitlines() if f"|cancelctl:{sweep}:" in line]


# ------------------------------------------------------------------------------- faults


@dataclass
class Soak:
    """What the soak did and saw."""

    workdir: Path
    sweep_file: Path
    sweep: str
    shim_mode: Path
    env: dict[str, str]
    rng: random.Random
    faults: Counter = field(default_factory=Counter)
    verb_calls: Counter = field(default_factory=Counter)
    tracebacks: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    frozen: list[tuple[int, int]] = field(default_factory=list)  # (pid, start) of each stall_job fault

    def cli(self, *args: str, timeout: float = 300, signal_after: tuple[float, int] | None = None,
            signal_when=None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """A cancelctl verb as a user runs it (the shim in front of sacct/squeue); a traceback is recorded.
        `signal_after` (seconds, signal): sent then unless it ended; `signal_when`: first polled until true."""
        cmd = [sys.executable, "-m", "cancelctl.cli", *args]
        proc = subprocess.Popen(cmd, env=env or self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace", cwd=self.workdir.parent)
        try:
            if signal_when is not None:
                _wait(lambda: signal_when() or proc.poll() is not None, 120)
            if signal_after is not None:
                try:
                    proc.wait(signal_after[0])
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal_after[1])
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        if "Traceback (most recent call last)" in out + err:
            self.tracebacks.append(f"$ cancelctl {' '.join(args)}\n{err[-3000:]}")
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def shim(self, mode: str | None) -> None:
        set_mode(self.shim_mode, mode)


def inject(soak: Soak, window_s: float) -> None:
    """Faults on the seeded schedule until `window_s` has passed, each lasting 5-12% of the window with
    1-4% of it between them: every kind in a seeded order first (a job fault waits for a running
    job; the window stretches, up to four times, until each kind has been injected once), then kinds at random."""
    deadline = time.monotonic() + window_s
    order = list(FAULT_KINDS)
    soak.rng.shuffle(order)
    # (a job fault needs a running job: on loaded cores the first ones start late, hence up to 3 windows more)
    while (time.monotonic() < deadline or order) and time.monotonic() < deadline + 3 * window_s and not soak.stop.is_set():
        kind = order.pop(0) if order else soak.rng.choice(FAULT_KINDS)
        length = soak.rng.uniform(0.05, 0.12) * window_s  # 3-7 s of a 60 s window
        if kind == "slurmctld_restart":
            slurmctld_restart(down_s=soak.rng.uniform(1, 5))
        elif kind == "slurmdbd_stop":
            slurmdbd_stop(down_s=length)
        elif kind.startswith("queries_"):
            soak.shim(kind.split("_", 1)[1])
            time.sleep(length)
            soak.shim(None)
        elif kind in JOB_FAULTS or kind == "stall_job":
            tasks = running_tasks(soak.sweep)
            if not tasks:  # nothing running now: tried again later, not counted
                order.append(kind)
                time.sleep(1.0)
                continue
            if kind == "stall_job":
                frozen = freeze_one(soak.workdir, soak.sweep, tasks, soak.rng)
                done = frozen is not None
                if done:
                    soak.frozen.append(frozen)
            else:
                command = JOB_FAULTS[kind](soak.rng.choice(tasks))
                done = _quiet([_real(command[0]), *command[1:]])
            if not done:  # the task ended (or has not started its training) in between: tried again later
                order.append(kind)
                time.sleep(1.0)
                continue
        soak.faults[kind] += 1
        time.sleep(soak.rng.uniform(0.01, 0.04) * window_s)


def freeze_one(workdir: Path, sweep: str, tasks: list[str], rng: random.Random) -> tuple[int, int] | None:
    """SIGSTOP the training process of one of the running SLURM `tasks` (the process its run folder's
    job.json names, as a deadlocked run would stay: alive, silent); (pid, start), or None when none of them
    has started its training process yet."""
    from cancelctl.jobs.outcome import same_process_alive

    live = []
    for record in workdir.glob(f"sweeps/{sweep}/runs/*/job.json"):
        try:
            job = json.loads(record.read_text())
        except (OSError, ValueError):  # being rewritten by a new attempt
            continue
        if job.get("job_id") in tasks and same_process_alive(job.get("pid"), job.get("start")):
            live.append((job["pid"], job["start"]))
    if not live:
        return None
    pid, start = rng.choice(sorted(live))
    os.kill(pid, signal.SIGSTOP)
    return pid, start


def frozen_left(frozen: list[tuple[int, int]]) -> int:
    """Frozen processes still alive (a stall the watchdog missed); killed, so the soak leaves nothing."""
    from cancelctl.jobs.outcome import same_process_alive

    left = [pid for pid, start in frozen if same_process_alive(pid, start)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return len(left)


def stalls_recorded(workdir: Path, sweep: str) -> int:
    """Attempts the stall watchdog ended (`stalled` in attempts.jsonl), over the sweep's run folders."""
    count = 0
    for attempts in workdir.glob(f"sweeps/{sweep}/runs/*/attempts.jsonl"):
        for line in attempts.read_text().splitlines():
            try:
                count += json.loads(line).get("outcome") == "stalled"
            except ValueError:
                continue
    return count


def observe(soak: Soak) -> None:
    """`status`, `watch` and `report` throughout, as a user at a terminal would."""
    verbs = [("status", soak.sweep, "--json"), ("watch", soak.sweep, "--refresh", "1"), ("report", soak.sweep, "--out",
             str(soak.workdir.parent / "report-during"), "--include-unfinished", "--allow-unmatched")]
    cycle = 0
    while not soak.stop.is_set():
        cycle += 1
        for verb in verbs if cycle % 2 else verbs[:2]:  # a report every other round: it is the costly one
            if soak.stop.is_set():
                return
            if not (soak.workdir / "sweeps" / soak.sweep / "manifest.json").exists():
                break
            soak.cli(*verb, "-w", str(soak.workdir), timeout=120,
                     signal_after=(6.0, signal.SIGINT) if verb[0] == "watch" else None)  # Ctrl-C stops watching
            soak.verb_calls[verb[0]] += 1
            time.sleep(1.0)


# ------------------------------------------------------------------------------- the soak


def write_sweep(folder: Path, name: str, runs: int) -> Path:
    seeds = list(range(-(-runs // len(LOSSES))))
    arms = {f"{loss}-{i}": {"algorithm": {"loss": loss, "lr": 1.0e-3 * (1 + i)}} for i, loss in enumerate(LOSSES)}
    spec = {
        "name": name,
        "base": {"backend": "lab", "executor": "slurm", "lab": LAB, "rollout": {"G": 2},
                 "budget": {"steps": STEPS, "prompts_per_step": 4}, "eval": {"every": 2, "k": 1, "prompts": 4},
                 "algorithm": {"lr": 1.0e-3}, "cluster": {"time_min": 20, "cpus_per_task": 1},
                 "monitor": {"stall": STALL}},
        "arms": arms, "seeds": seeds, "baseline": "grpo-0",
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def write_time_limit_sweep(folder: Path, name: str) -> Path:
    spec = {
        "name": name,
        "base": {"backend": "lab", "executor": "slurm", "lab": {**LAB, "checkpoint_every": 4}, "rollout": {"G": 2},
                 "budget": {"steps": TIME_LIMIT_STEPS, "prompts_per_step": 4}, "eval": {"every": 10, "k": 1, "prompts": 4},
                 "algorithm": {"lr": 1.0e-3}, "cluster": {"time_min": 1, "cpus_per_task": 1, "partition": "multi"}},
        "arms": {"grpo": {"algorithm": {"loss": "grpo"}}}, "seeds": [0],
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def time_limit_figures(workdir: Path, sweep: str, status: list[dict]) -> dict:
    """The run across time limits: its state, how each allocation ended, its plan's count."""
    (state,) = [s["state"] for s in status] or ["missing"]
    lines: list[dict] = []
    for attempts in workdir.glob(f"sweeps/{sweep}/runs/*/attempts.jsonl"):
        lines = [json.loads(line) for line in attempts.read_text().splitlines()]
    return {"state": state, "allocations": sum(a.get("event") == "start" for a in lines),
            "ends": [a.get("outcome") for a in lines if a.get("event") == "end"]}


def run_soak(folder: Path, runs: int, window_s: float, seed: int, settle_s: float) -> dict:
    cluster_up()
    started = time.time()
    name = f"soak-{seed}-{int(started) % 100000}"  # the accounting DB outlives soaks
    workdir = folder / "work"
    workdir.mkdir(parents=True)
    shim_dir, mode = folder / "shim", folder / "shim.mode"
    write_shims(shim_dir, mode, ("sacct", "squeue", "sbatch"), hang_s=60)
    env = {**os.environ, "PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "200"}
    soak = Soak(workdir, write_sweep(folder, name, runs), name, mode, env, random.Random(seed))
    planned = len(load_runs(soak.sweep_file))

    # the undisturbed sweep of the same file, in-process (debug executor), beside the soak: its report is the reference
    reference = folder / "reference"
    reference.mkdir()
    undisturbed: dict[str, subprocess.CompletedProcess] = {}
    baseline = threading.Thread(target=lambda: undisturbed.update(run=soak.cli(
        "sweep", str(soak.sweep_file), "-w", str(reference), "--executor", "debug", env={**env, "PATH": os.environ["PATH"]})),
        daemon=True)
    baseline.start()
    observer = threading.Thread(target=observe, args=(soak,), daemon=True)
    observer.start()
    injector = threading.Thread(target=inject, args=(soak, window_s), daemon=True)
    injector.start()
    # the run across time limits, beside the soak from its start (its own sweep: the faults target the soak's)
    # (submitted meanwhile: the fault window has begun and the soak's own launches must not wait for it)
    time_limited = f"timelimit-{seed}-{int(started) % 100000}"
    time_limit_submit: dict[str, subprocess.CompletedProcess] = {}
    submitter = threading.Thread(target=lambda: time_limit_submit.update(run=soak.cli(
        "sweep", str(write_time_limit_sweep(folder, time_limited)), "-w", str(workdir), "--no-wait",
        env={**env, "PATH": os.environ["PATH"], STEP_PAUSE_ENV: TIME_LIMIT_STEP_PAUSE_S})), daemon=True)
    submitter.start()
    # the launcher killed mid-submit: SIGTERM once, SIGKILL once (sbatch paused so the kill lands between arrays)
    slow = {**env, "CANCELCTL_FAULT_PAUSE_BEFORE_SBATCH": "0.75"}
    manifest = workdir / "sweeps" / name / "manifest.json"
    for signum in (signal.SIGTERM, signal.SIGKILL):
        arrays = submitted_arrays(manifest)  # killed once it has submitted one more array, mid-way to the next
        soak.cli("sweep", str(soak.sweep_file), "-w", str(workdir), env=slow,
                 signal_when=lambda: submitted_arrays(manifest) > arrays, signal_after=(soak.rng.uniform(0.1, 0.6), signum))
        soak.faults[f"launcher_{signal.Signals(signum).name}"] += 1
    phases = {"launches killed mid-submit": time.time() - started}
    # a plain rerun submits what the kills left, and sbatch queues its array but loses the answer
    set_mode(mode, soak.rng.choice(("queued-then-timeout", "queued-then-banner")), "sbatch")
    soak.cli("sweep", str(soak.sweep_file), "-w", str(workdir))
    set_mode(mode, None, "sbatch")
    soak.faults["sbatch_answer_lost"] += 1
    injector.join()
    submitter.join(timeout=300)
    submitted = time_limit_submit.get("run")
    if submitted is None or submitted.returncode != 0:
        raise RuntimeError(f"the time-limit sweep was not submitted: {submitted and submitted.stdout[-1500:] + submitted.stderr[-1500:]}")
    soak.shim(None)
    cluster_up()
    phases["fault window"] = time.time() - started

    # plain reruns until every run is done (failed ones: the kills from outside)
    rounds, deadline = 0, time.monotonic() + settle_s
    while time.monotonic() < deadline:
        states = json.loads(soak.cli("status", name, "-w", str(workdir), "--json").stdout or "[]")
        counts = Counter(s["state"] for s in states)
        time_limit_status = json.loads(soak.cli("status", time_limited, "-w", str(workdir), "--json").stdout or "[]")
        time_limit_done = time_limit_status and not any(s["state"] in ACTIVE for s in time_limit_status)
        if counts.get("completed", 0) == planned and time_limit_done:
            break
        if not any(s["state"] in ACTIVE for s in states):
            rounds += 1
            soak.cli("sweep", str(soak.sweep_file), "-w", str(workdir), "--retry-failed")
        time.sleep(2)
    phases["reruns until done"] = time.time() - started
    soak.stop.set()
    observer.join(timeout=150)
    stalls = {"frozen": len(soak.frozen), "left_frozen": frozen_left(soak.frozen), "recorded": stalls_recorded(workdir, name)}
    # README's step after a --no-wait sweep: points a run could not hand the store (busy past its wait)
    # are in its metrics.jsonl; sync uploads them
    synced = soak.cli("sync", "-w", str(workdir))
    uploaded = re.search(r"uploaded (\d+) points", synced.stdout)
    soaked = soak.cli("report", name, "-w", str(workdir), "--out", str(folder / "report-soaked"), "--allow-unmatched")
    phases["sync, report"] = time.time() - started
    baseline.join(timeout=600)
    soak.cli("report", name, "-w", str(reference), "--out", str(folder / "report-reference"), "--allow-unmatched")
    phases["undisturbed sweep and its report"] = time.time() - started
    history = scheduler_history(name, started)
    checks = {
        "runs_planned": planned,
        "runs_completed": sum(1 for s in json.loads(soak.cli("status", name, "-w", str(workdir), "--json").stdout or "[]")
                              if s["state"] == "completed"),
        "rerun_rounds": rounds,
        "faults": dict(sorted(soak.faults.items())),
        "verb_calls": dict(sorted(soak.verb_calls.items())),
        "tracebacks": len(soak.tracebacks),
        "traceback_samples": soak.tracebacks[:3],
        "jobs_in_accounting": len(history),
        "submissions_whose_answer_was_lost": lost_answers(manifest),
        "points_uploaded_by_sync": int(uploaded.group(1)) if uploaded else None,
        **logged_steps(workdir, name),
        "stalls": stalls,
        "time_limit_run": {**time_limit_figures(
                               workdir, time_limited, json.loads(soak.cli("status", time_limited, "-w", str(workdir), "--json").stdout or "[]")),
                           **{f"{k}_of_it": v for k, v in logged_steps(workdir, time_limited, TIME_LIMIT_STEPS).items()}},
        "overlapping_attempts": overlapping(history),
        "report_differences": compare_reports(folder / "report-soaked", folder / "report-reference"),
        "report_ok": soaked.returncode == 0 and "run" in undisturbed and undisturbed["run"].returncode == 0,
        "seconds": round(time.time() - started),
        "phases_ended_at_s": {k: round(v) for k, v in phases.items()},
    }
    return checks


def lost_answers(manifest: Path) -> dict[str, int]:
    """Submissions whose sbatch answer was lost, by how they ended: adopted by name, or not queued."""
    subs = json.loads(manifest.read_text())["submissions"].values()
    # a submission keeps the lost answer as its error once adopted; a refused one never reached "submitted"
    lost = [s for s in subs if s["state"] in ("submitted", "unconfirmed") and s.get("error")
            or "it was not queued" in (s.get("error") or "")]
    return dict(Counter(s["state"] for s in lost))


def submitted_arrays(manifest: Path) -> int:
    try:
        return sum(1 for sub in json.loads(manifest.read_text())["submissions"].values() if sub.get("job_id"))
    except (OSError, ValueError, KeyError):
        return 0


def load_runs(sweep_file: Path) -> list:
    from cancelctl.spec.expand import load_sweep

    return load_sweep(sweep_file).runs


# ------------------------------------------------------------------------------- checks on the history


def scheduler_history(sweep: str, since: float) -> list[dict]:
    """Every instance of every task of the sweep's jobs (requeued ones included, -D), from sacct."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    out = subprocess.run([_real("sacct"), "-X", "-D", "-n", "-P", "-S", start, "-E", "now", "-o",
                          "JobID,JobName,Start,End,State,Comment"], capture_output=True, text=True, timeout=60).stdout
    from cancelctl.executors.slurm_states import expand_job_id

    rows = []
    for line in out.splitlines():
        job_id, name, begin, end, state, comment = (line.split("|") + [""] * 6)[:6]
        if not name.startswith(f"cancelctl:{sweep}:") or begin in ("", "Unknown", "None"):
            continue
        runs = comment.split("runs=", 1)[1].split(",") if "runs=" in comment else []
        for _, index in expand_job_id(job_id):
            rows.append({"task": job_id, "run": runs[index] if index < len(runs) else f"?{job_id}",
                         "start": begin, "end": end if end not in ("", "Unknown") else "9999", "state": state})
    return rows


def overlapping(history: list[dict]) -> list[str]:
    """Pairs of one run's job instances whose start..end intervals overlap (two attempts alive at once)."""
    found = []
    by_run: dict[str, list[dict]] = {}
    for row in history:
        by_run.setdefault(row["run"], []).append(row)
    for run, rows in by_run.items():
        rows.sort(key=lambda r: r["start"])
        for earlier, later in zip(rows, rows[1:]):
            if later["start"] < earlier["end"]:
                found.append(f"{run}: {earlier['task']} {earlier['start']}..{earlier['end']} and "
                             f"{later['task']} {later['start']}..{later['end']}")
    return found


def logged_steps(workdir: Path, sweep: str, budget: int = STEPS) -> dict:
    """Each run's steps in metrics.jsonl and in MLflow's history of one training key: every step once."""
    from mlflow import MlflowClient

    from cancelctl.tracking import default_tracking_uri

    client = MlflowClient(tracking_uri=default_tracking_uri(workdir))
    duplicates, gaps, checked = 0, 0, 0
    for record in workdir.glob(f"sweeps/{sweep}/runs/*/run.json"):
        folder = record.parent
        steps = [json.loads(line)["step"] for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
        counts = Counter(steps)
        duplicates += sum(n - 1 for n in counts.values())
        gaps += len(set(range(budget + 1)) - set(counts))
        run_id = json.loads(record.read_text()).get("mlflow_run_id")
        if run_id:
            history = Counter(m.step for m in client.get_metric_history(run_id, "critic/score/mean"))
            duplicates += sum(n - 1 for n in history.values())
            gaps += len(set(range(1, budget + 1)) - set(history))
        checked += 1
    return {"runs_checked": checked, "duplicate_points": duplicates, "lost_points": gaps}


def compare_reports(soaked: Path, reference: Path, tolerance: float = 1e-6) -> list[str]:
    """Cells of the two reports' tables that differ (numbers beyond `tolerance`; time columns left out)."""
    differences = []
    tables = sorted(p.name for p in (reference / "tables").glob("*.csv"))
    if not tables:
        return ["the reference report has no tables"]
    for name in tables:
        a, b = soaked / "tables" / name, reference / "tables" / name
        if not a.exists():
            differences.append(f"{name}: missing from the soaked report")
            continue
        rows_a, rows_b = (sorted(csv.DictReader(path.open()), key=_identity) for path in (a, b))
        if len(rows_a) != len(rows_b):
            differences.append(f"{name}: {len(rows_a)} rows vs {len(rows_b)}")
            continue
        for row_a, row_b in zip(rows_a, rows_b):
            for key in row_b:
                if "hours" in key or "seconds" in key:
                    continue
                x, y = row_a.get(key, ""), row_b[key]
                try:
                    same = abs(float(x) - float(y)) <= tolerance * max(1.0, abs(float(y)))
                except ValueError:
                    same = x == y
                if not same:
                    differences.append(f"{name}: {key}: {x!r} vs {y!r}")
    return differences


def _identity(row: dict) -> tuple:
    """A row's words (arm, run id, metric, ...), its numbers left out: rows in any order pair up."""
    def number(text: str) -> bool:
        try:
            float(text)
            return True
        except ValueError:
            return False

    return tuple(value for value in row.values() if value is not None and not number(value))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=48, help="runs in the sweep (at least 40)")
    parser.add_argument("--window", type=float, default=90.0, help="seconds of fault injection")
    parser.add_argument("--settle", type=float, default=600.0, help="at most this long for the reruns to finish it")
    parser.add_argument("--seed", type=int, default=0, help="the fault schedule's seed")
    parser.add_argument("--folder", type=Path, help="where to keep the work dirs and reports (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="chaos-soak-"))
    figures = run_soak(folder.resolve(), args.runs, args.window, args.seed, args.settle)
    text = json.dumps(figures, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)
    time_limited = figures["time_limit_run"]
    ok = (figures["runs_completed"] == figures["runs_planned"] and not figures["duplicate_points"]
          and not figures["lost_points"] and not figures["overlapping_attempts"] and not figures["tracebacks"]
          and not figures["report_differences"] and figures["report_ok"] and not figures["stalls"]["left_frozen"]
          and time_limited["state"] == "completed" and not time_limited["duplicate_points_of_it"]
          and not time_limited["lost_points_of_it"])
    print("soak: " + ("every check holds" if ok else "CHECKS FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
