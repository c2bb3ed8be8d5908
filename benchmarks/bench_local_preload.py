"""The lab demo at the speed of its math: the local executor's preloaded worker (`cancelctl.jobs.zygote`)
against fresh interpreters per run (`CANCELCTL_LOCAL_PRELOAD=0`), measured one after the other in
this run, each command in a fresh work dir, as README line 1 runs them:

    before    the demo as it was: 3 seeds, every run in fresh interpreters, `cancelctl sweep` alone
    same      the same 3-seed sweep, runs forked from the preloaded worker (the worker's own effect)
    after     the embedded default as shipped (experiments/lab-demo.yaml), forked, then `cancelctl report`

Wall time, and CPU time (user + system) of each command and every process it started (the runs'
controllers and tasks are reaped by the worker, the worker by the driver, so all of it is counted).
Goal: `after` (sweep and report) in at most 0.8x the wall time of `before` (sweep alone).

`--tests ARGS` also times README line 2's `pytest` (ARGS appended; e.g. `--tests -q` for the whole
suite, `--tests -q tests/launch`) with the worker off and on.

Usage: python benchmarks/bench_local_preload.py [--rounds 1] [--tests ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "experiments" / "lab-demo.yaml"
BEFORE_SEEDS = [0, 1, 2]  # the demo's seeds before verdicts were its goal


def timed(command: list[str], *, cwd: Path, preload: bool) -> tuple[float, float]:
    """(wall s, CPU s of the command and its reaped descendants); fails loudly if the command does."""
    env = {**os.environ, "CANCELCTL_LOCAL_PRELOAD": "1" if preload else "0"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def demo(folder: Path, name: str, seeds: list[int] | None, preload: bool, report: bool) -> dict[str, float]:
    spec = yaml.safe_load(DEMO.read_text())
    if seeds is not None:
        spec["seeds"] = seeds
    folder = folder / name
    folder.mkdir()
    sweep_file = folder / "lab-demo.yaml"
    sweep_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    cli = [sys.executable, "-m", "cancelctl.cli"]
    wall, cpu = timed([*cli, "sweep", str(sweep_file), "-w", str(folder / "work")], cwd=folder, preload=preload)
    figures = {"sweep_wall": wall, "sweep_cpu": cpu, "runs": len(spec["seeds"]) * len(spec["arms"]) * 2}
    if report:
        wall, cpu = timed([*cli, "report", "--baseline", "gspo", "-w", str(folder / "work")], cwd=folder, preload=preload)
        figures.update(report_wall=wall, report_cpu=cpu)
    figures["wall"] = figures["sweep_wall"] + figures.get("report_wall", 0.0)
    figures["cpu"] = figures["sweep_cpu"] + figures.get("report_cpu", 0.0)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1, help="each measurement this many times, interleaved")
    parser.add_argument("--tests", nargs=argparse.REMAINDER, help="also time pytest with these arguments, worker off and on")
    args = parser.parse_args()
    after_seeds = yaml.safe_load(DEMO.read_text())["seeds"]
    rows: dict[str, list[dict[str, float]]] = {"before": [], "same": [], "after": []}
    tests: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="bench-preload-") as tmp:
        for i in range(args.rounds):
            rows["before"].append(demo(Path(tmp), f"before{i}", BEFORE_SEEDS, preload=False, report=False))
            rows["same"].append(demo(Path(tmp), f"same{i}", BEFORE_SEEDS, preload=True, report=False))
            rows["after"].append(demo(Path(tmp), f"after{i}", None, preload=True, report=True))
            for preload in (False, True) if args.tests is not None else ():
                wall, _ = timed([sys.executable, "-m", "pytest", *args.tests], cwd=ROOT, preload=preload)
                tests[preload].append(wall)
    mean = {name: {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]} for name, runs in rows.items()}
    print(f"lab demo on {len(os.sched_getaffinity(0))} cores, {args.rounds} round(s), means:")
    print(f"{'':8}{'runs':>6}{'sweep wall':>12}{'sweep CPU':>11}{'report wall':>13}{'total wall':>12}{'total CPU':>11}")
    for name, m in mean.items():
        print(f"{name:8}{m['runs']:>6.0f}{m['sweep_wall']:>11.1f}s{m['sweep_cpu']:>10.1f}s"
              f"{m.get('report_wall', 0.0):>12.1f}s{m['wall']:>11.1f}s{m['cpu']:>10.1f}s")
    before, same, after = mean["before"], mean["same"], mean["after"]
    print(f"3 seeds, worker vs fresh interpreters: wall {same['wall'] / before['wall']:.2f}x, CPU {same['cpu'] / before['cpu']:.2f}x; "
          f"CPU per run {before['cpu'] / before['runs']:.2f} s -> {same['cpu'] / same['runs']:.2f} s")
    ratio = after["wall"] / before["wall"]
    print(f"the demo as shipped ({after_seeds!r} seeds) sweep + report vs the 3-seed sweep before: wall {ratio:.2f}x "
          f"(goal <= 0.80: {'met' if ratio <= 0.8 else 'NOT met'}), CPU {after['cpu'] / before['cpu']:.2f}x")
    if args.tests is not None:
        off, on = (sum(tests[p]) / len(tests[p]) for p in (False, True))
        print(f"pytest {' '.join(args.tests)}: {off:.0f} s fresh interpreters, {on:.0f} s with the worker ({on / off:.2f}x)")


if __name__ == "__main__":
    main()
