"""How hard `watch` and `status` lean on SLURM's controller, on a 500-run sweep.

A sweep of --runs runs, submitted as arrays of MaxArraySize 8 (63 arrays for 500 runs), is written
as its manifest; shims of sacct/squeue put first on PATH log every call and answer for every task
(RUNNING), or hang (--hang) — a stand-in for a controller this machine cannot hold 500 jobs on.
Measured, each for --window seconds:

1. `cancelctl watch SWEEP --refresh 3` alone: scheduler calls per minute (target: at most 4);
2. the same with `cancelctl status SWEEP` every 10 s beside it (target: at most 4);
3. with the scheduler hanging: seconds until `watch` draws its first screen, and how long one
   `status` takes (target: within one query time-out, 30 s).

`--before REV` measures the same against the code at git revision REV (a worktree, on PYTHONPATH),
in the same run, so the figures compare on one machine at one moment.

Usage: python benchmarks/bench_scheduler_calls.py [--runs 500] [--window 60] [--before HEAD~5]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARRAY_SIZE = 8
WARM_UP_S = 10.0
DRAW_CAP_S = 120.0
SHIM = """#!/bin/sh
echo "$(basename "$0") $(date +%s.%N)" >> {log}
if [ -e {hang} ]; then exec sleep 600; fi
case "$(basename "$0")" in
  sacct) ids=$(echo "$@" | sed -n 's/.*-j \\([0-9,]*\\).*/\\1/p' | tr , ' ')
         for id in $ids; do i=0; while [ $i -lt {size} ]; do echo "${{id}}_$i|RUNNING|0:0"; i=$((i+1)); done; done ;;
  squeue) ;;
esac
exit 0
"""


def write_sweep(workdir: Path, name: str, runs: int) -> None:
    """The manifest of a sweep whose `runs` runs were all submitted (arrays of ARRAY_SIZE tasks)."""
    from cancelctl.manifest import SUBMITTED, Manifest, RunEntry
    from cancelctl.workdir import sweep_paths

    paths = sweep_paths(workdir, name)
    paths.sweep_dir.mkdir(parents=True)
    manifest = Manifest(sweep=name, executor="slurm", launched_at=time.time())
    ids = [f"r{i:05d}" for i in range(runs)]
    for i, run_id in enumerate(ids):
        manifest.runs[run_id] = RunEntry(name=f"arm{i % 10}-s{i // 10}", arm=f"arm{i % 10}", seed=i // 10, steps=100)
    for n, start in enumerate(range(0, runs, ARRAY_SIZE)):
        sub = manifest.add_submission("slurm", ids[start : start + ARRAY_SIZE])
        sub.state, sub.job_id, sub.job_name, sub.submitted_at = SUBMITTED, str(100000 + n), f"cancelctl:{name}:{sub.token}", time.time()
    manifest.planned = ids
    for run_id, entry in manifest.runs.items():  # a run folder each, as a launch leaves them
        paths.run_dir(run_id, entry.name).mkdir(parents=True)
    data = manifest.to_json()
    for sub in data["submissions"].values():  # the fields every version reads (the --before code too)
        sub.pop("lookup_error", None)
    paths.manifest.write_text(json.dumps(data))


def shims(folder: Path, log: Path, hang: Path) -> Path:
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for command in ("sacct", "squeue"):
        path = bin_dir / command
        path.write_text(SHIM.format(log=log, hang=hang, size=ARRAY_SIZE))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def calls_since(log: Path, since: float, until: float) -> int:
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if since <= float(line.split()[1]) <= until)


def cli(env: dict, *args: str) -> subprocess.Popen:
    # run from outside any checkout: `-m` puts the working directory first on sys.path, before PYTHONPATH
    return subprocess.Popen([sys.executable, "-m", "cancelctl.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=tempfile.gettempdir())


def measure(code: Path, runs: int, window: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        workdir, log, hang = folder / "work", folder / "calls.log", folder / "hang"
        workdir.mkdir()
        write_sweep(workdir, "big", runs)
        env = {**os.environ, "PATH": f"{shims(folder, log, hang)}{os.pathsep}{os.environ['PATH']}",
               "PYTHONPATH": str(code), "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
        figures = {}
        for label, with_status in (("watch", False), ("watch + status every 10 s", True)):
            (workdir / "sweeps" / "big" / "slurm_states.json").unlink(missing_ok=True)
            watcher = cli(env, "watch", "big", "-w", str(workdir), "--refresh", "3")
            time.sleep(WARM_UP_S)  # started, and its first look at SLURM taken: counted from here, steady state
            start = time.time()
            while time.time() - start < window:
                if with_status:
                    cli(env, "status", "big", "-w", str(workdir)).communicate(timeout=120)
                    time.sleep(max(0.0, 10 - (time.time() - start) % 10))
                else:
                    time.sleep(1)
            end = time.time()
            watcher.send_signal(signal.SIGINT)
            watcher.communicate(timeout=60)
            figures[f"{label}: scheduler calls per minute"] = round(calls_since(log, start, end) / (end - start) * 60, 1)
        view = workdir / "sweeps" / "big" / "slurm_states.json"  # the last answer, an hour old: due again
        saved = json.loads(view.read_text())
        if isinstance(saved.get("query"), dict):
            saved["query"]["asked_at"] -= 3600
        view.write_text(json.dumps(saved))
        hang.touch()  # the scheduler hangs from now on
        start = time.time()
        watcher = cli(env, "watch", "big", "-w", str(workdir), "--refresh", "3")
        drawn = select.select([watcher.stdout], [], [], DRAW_CAP_S)[0]  # its first line, or nothing by the cap
        figures["hanging scheduler: s until watch draws"] = round(time.time() - start, 1) if drawn else f"> {DRAW_CAP_S:.0f}"
        watcher.send_signal(signal.SIGINT)
        try:
            watcher.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            watcher.kill()
        start = time.time()
        try:
            status = cli(env, "status", "big", "-w", str(workdir))
            status.communicate(timeout=DRAW_CAP_S)
            figures["hanging scheduler: s for one status"] = round(time.time() - start, 1)
        except subprocess.TimeoutExpired:
            status.kill()
            figures["hanging scheduler: s for one status"] = f"> {DRAW_CAP_S:.0f}"
        subprocess.run(["pkill", "-f", "sleep 600"], check=False)
        return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--before", help="a git revision to measure beside the working tree")
    args = parser.parse_args()
    results = {"after (this tree)": measure(ROOT, args.runs, args.window)}
    if args.before:
        with tempfile.TemporaryDirectory() as tmp:
            old = Path(tmp) / "before"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), args.before], check=True,
                           capture_output=True)
            try:
                results[f"before ({args.before})"] = measure(old, args.runs, args.window)
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
