"""Tracking at cluster scale: N concurrent runs logging into one MLflow store.

Every job of a sweep logs into the sweep's store at once. Each writer here is a separate process
with its own RunLogger, exactly as a job uses it (metrics.jsonl first, log_batch of 1000 points,
watermark in sync_state.json, default flush cadence), logging --steps steps x --keys metrics as
fast as it can (overload: a real step takes seconds; --step-seconds paces them). Stores:

  sqlite   the default store, sqlite:///<work dir>/mlflow.db, a fresh file per phase (so the
           writers also race on creating the schema, the experiment and their runs)
  postgres PostgreSQL written directly (`postgresql://user@127.0.0.1:<port>/<db>`, the password in
           PGPASSWORD): a throwaway server of Debian's package this script starts on 127.0.0.1
           (benchmarks/postgres_server.py), a fresh database per phase, stopped at the end
  server   a real `mlflow server` this script starts on 127.0.0.1 (free port, sqlite backend)
           and stops at the end

Per store, a baseline phase (--baseline-writers, default 1) then the scaled phase (--writers,
default 32), each printing: points/s over all writers (into metrics.jsonl, and into MLflow by the
time the writers end), the worst stall (longest single RunLogger call a run waited on: the
constructor, a log() that flushed, close(); and apart, the worst log(), i.e. in the middle of a
run), the runs whose logger hit a store failure (paused MLflow use) or that failed outright,
MLflow runs duplicated by the get-or-create race, and the points reconciliation: metrics.jsonl
points vs points the store holds (raw rows of its sqlite file or PostgreSQL database, and what
`collect` reads through MLflow), right after the writers end and again after `cancelctl sync`. Lost
must be 0 after sync; extra (duplicated) must be 0 always. The scaled phase is printed as ratios to
the baseline, and each store's scaled phase as ratios to sqlite's, measured in the same run.

Writers are forked from this process after mlflow is imported (a fresh interpreter per writer
would spend ~3.5 s each importing mlflow, which is not what is measured); this process never
opens a store itself, so no connection is shared across a fork.

    python benchmarks/bench_tracking_scale.py                    # 32 writers x 200 steps x 40 keys
    python benchmarks/bench_tracking_scale.py --stores sqlite postgres --writers 64   # the cluster's database
    python benchmarks/bench_tracking_scale.py --stores sqlite --writers 64 --steps 500
    python benchmarks/bench_tracking_scale.py --step-seconds 0.25   # paced: ~5,000 points/s offered
    python benchmarks/bench_tracking_scale.py --runs-created-by writers   # jobs create their runs (fresh store)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cancelctl.tracking import default_tracking_uri, read_metrics_jsonl, write_run_json
from cancelctl.tracking.runfiles import METRICS_JSONL
from cancelctl.tracking.uri import sqlite_path
from postgres_server import missing_reason, postgres_server  # beside this script

RESULT_FILE = "bench_writer.json"
RUN_ID_TAG = "cancelctl.run_id"


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout/kill still runs the finally blocks
    root = Path(args.workdir or tempfile.mkdtemp(prefix="bench-tracking-scale-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    preload_mlflow()
    print(f"work dir {root}; {args.writers} writers x {args.steps} steps x {args.keys} keys, "
          f"{args.step_seconds or 'no'} s compute per step "
          f"({args.writers * args.steps * args.keys:,} points), flush_every={args.flush_every}, "
          f"runs created by {args.runs_created_by}; {os.cpu_count()} cores")
    scaled: dict[str, Phase] = {}
    problems = 0
    for kind in args.stores:
        if kind == "postgres" and missing_reason():
            print(f"\n== postgres: skipped, {missing_reason()}")
            continue
        with store(kind, root / kind, args.server_workers) as (uri, db_path):
            phases = {}
            for label, writers in (("baseline", args.baseline_writers), ("scaled", args.writers)):
                phase_root = root / kind / label
                if kind == "sqlite":
                    phase_uri, phase_db = default_tracking_uri(phase_root), sqlite_path(default_tracking_uri(phase_root))
                elif kind == "postgres":  # a fresh database per phase, as sqlite's fresh file
                    phase_uri, phase_db = uri.create_database(label), PostgresDb(uri, label)
                else:
                    phase_uri, phase_db = uri, db_path
                phases[label] = run_phase(args, phase_root, phase_uri, phase_db, f"{kind}-{label}", writers)
            shown = {"server": uri, "sqlite": "sqlite:///<phase dir>/mlflow.db"}.get(kind)
            problems += not print_store(kind, shown or f"{uri.uri('<phase>')} (password in PGPASSWORD)", phases)
            scaled[kind] = phases["scaled"]
    print_versus(scaled)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if problems:  # a lost or doubled point, a failed writer, a duplicated MLflow run
        sys.exit(1)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", type=int, default=32)
    parser.add_argument("--baseline-writers", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200, help="steps per run")
    parser.add_argument("--keys", type=int, default=40, help="metrics per step (the lab logs ~40)")
    parser.add_argument("--flush-every", type=int, default=1000, help="points per flush (RunLogger's default)")
    parser.add_argument("--step-seconds", type=float, default=0.0,
                        help="compute time per step (sleep); 0: log as fast as possible (overload)")
    parser.add_argument("--stores", nargs="+", choices=["sqlite", "postgres", "server"], default=["sqlite", "postgres", "server"])
    parser.add_argument("--server-workers", type=int, default=4, help="mlflow server --workers")
    parser.add_argument("--runs-created-by", choices=["launcher", "writers"], default="launcher",
                        help="writers: each job finds/creates its MLflow run (store down at launch); "
                             "launcher: created one by one before the jobs start, as `cancelctl sweep` does")
    parser.add_argument("--workdir", help="where stores and run folders go (default: a new temp dir)")
    return parser.parse_args()


def preload_mlflow() -> None:
    """Import what a RunLogger's store calls import, so forked writers start warm."""
    import importlib

    for module in ("mlflow", "mlflow.entities", "mlflow.store.tracking.rest_store", "mlflow.store.tracking.sqlalchemy_store"):
        importlib.import_module(module)


# -- stores ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def store(kind: str, folder: Path, server_workers: int):
    """(uri, sqlite file behind it). sqlite: each phase makes its own; server: one for both phases;
    postgres: (the server, None), each phase a database of its own."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "sqlite":
        yield None, None
        return
    if kind == "postgres":
        started = time.perf_counter()
        # every writer holds a connection, each store call opens one more to probe: room for 64 jobs x 2
        with postgres_server(max_connections=400) as pg:
            print(f"\nPostgreSQL {pg.uri('<db>')} ({pg.bin}) up in {time.perf_counter() - started:.1f} s")
            saved = os.environ.get("PGPASSWORD")
            os.environ.update(pg.env)  # the writers (forked) and `cancelctl sync` read it, as jobs do
            try:
                yield pg, None
            finally:
                os.environ.pop("PGPASSWORD") if saved is None else os.environ.update(PGPASSWORD=saved)
        return
    db_path = folder / "server.db"
    with mlflow_server(db_path, folder, server_workers) as uri:
        yield uri, db_path


@contextlib.contextmanager
def mlflow_server(db_path: Path, folder: Path, workers: int):
    """A real `mlflow server` on 127.0.0.1 (sqlite backend); stopped, with its whole process
    group, when the block ends."""
    port = free_port()
    command = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", f"sqlite:///{db_path}",
        "--default-artifact-root", (folder / "artifacts").as_uri(),
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
    ]
    log = open(folder / "server.log", "wb")
    # MLflow's GenAI job runner (a huey consumer per job type) has nothing to do with tracking
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    uri = f"http://127.0.0.1:{port}"
    try:
        started = time.perf_counter()
        wait_healthy(uri, server, folder / "server.log")
        print(f"\nmlflow server {uri} (sqlite {db_path}, {workers} workers) up in {time.perf_counter() - started:.1f} s")
        yield uri
    finally:
        stop_group(server)
        log.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(uri: str, server: subprocess.Popen, log_path: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(uri + "/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"mlflow server not healthy after {timeout_s:.0f} s:\n{log_path.read_text()[-3000:]}")


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the process group this script started, SIGKILL it if still there after 10 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # uvicorn workers left behind
    process.wait()


# -- one phase: N writers, then reconciliation -------------------------------------------------------


@dataclass
class Phase:
    writers: int
    points: int = 0
    wall_s: float = 0.0
    worst_stall_s: float = 0.0
    worst_stall_run: str = ""
    worst_log_s: float = 0.0  # the worst stall of a log() call: in the middle of a run
    paused_runs: int = 0
    failed_runs: int = 0
    duplicate_runs: int = 0
    reconciliation: dict[str, dict[str, int]] = field(default_factory=dict)  # when -> {lost, extra, ...}
    sync_s: float = 0.0

    @property
    def points_per_s(self) -> float:
        return self.points / self.wall_s if self.wall_s else 0.0


def run_phase(args: argparse.Namespace, root: Path, uri: str, db_path: Path, experiment: str, writers: int) -> Phase:
    run_dirs = [root / "runs" / f"run{index:03d}" for index in range(writers)]
    for index, run_dir in enumerate(run_dirs):
        write_run_json(run_dir, run_id=f"{experiment}-{index:03d}", name=f"writer-{index:03d}", experiment=experiment,
                       tags={"cancelctl.sweep": experiment, "cancelctl.arm": "grpo", "cancelctl.seed": str(index)},
                       params={"algo": {"G": 8}, "seed": index}, tracking_uri=uri)
    if args.runs_created_by == "launcher":
        in_child(create_runs_like_launcher, uri, run_dirs)
    ctx = mp.get_context("fork")
    go = ctx.Event()
    processes = [ctx.Process(target=writer, args=(run_dir, uri, args.steps, args.keys, args.flush_every,
                                                  args.step_seconds, go))
                 for run_dir in run_dirs]
    phase = Phase(writers=writers)
    try:
        for process in processes:
            process.start()
        time.sleep(0.5)  # let every writer reach the start line
        started = time.perf_counter()
        go.set()
        for process in processes:
            process.join()
        phase.wall_s = time.perf_counter() - started
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    for process, run_dir in zip(processes, run_dirs, strict=True):
        result = json.loads((run_dir / RESULT_FILE).read_text()) if (run_dir / RESULT_FILE).exists() else None
        if process.exitcode != 0 or result is None:
            phase.failed_runs += 1
            continue
        phase.points += result["points"]
        phase.paused_runs += result["store_failures"] > 0
        phase.worst_log_s = max(phase.worst_log_s, result["worst_log_s"])
        if result["worst_call_s"] > phase.worst_stall_s:
            phase.worst_stall_s, phase.worst_stall_run = result["worst_call_s"], run_dir.name
    phase.reconciliation["after writers"], phase.duplicate_runs = reconcile(uri, db_path, experiment, run_dirs)
    started = time.perf_counter()
    sync = subprocess.run([sys.executable, "-m", "cancelctl.cli", "sync", "--workdir", str(root / "runs"), "--uri", uri],
                          capture_output=True, text=True, check=False)
    phase.sync_s = time.perf_counter() - started
    if sync.returncode != 0:
        print(f"cancelctl sync exited {sync.returncode}:\n{sync.stdout[-2000:]}{sync.stderr[-2000:]}")
    phase.reconciliation["after sync"], phase.duplicate_runs = reconcile(uri, db_path, experiment, run_dirs)
    print(f"  {experiment}: {phase.points:,} points in {phase.wall_s:.1f} s, worst stall {phase.worst_stall_s:.2f} s, "
          f"sync {phase.sync_s:.1f} s")
    return phase


def writer(run_dir: Path, uri: str, steps: int, keys: int, flush_every: int, step_seconds: float, go) -> None:
    """One job's tracking: a RunLogger as run_in_folder opens it, `steps` log calls, close."""
    from cancelctl.tracking import RunLogger

    names = [f"actor/metric_{k:02d}" if k % 2 else f"rollout/metric_{k:02d}" for k in range(keys)]
    rng = random.Random(run_dir.name)
    go.wait()
    started = time.perf_counter()
    worst, points = {"open": 0.0, "log": 0.0, "close": 0.0}, 0

    def timed(what, call, *args):
        t0 = time.perf_counter()
        value = call(*args)
        worst[what] = max(worst[what], time.perf_counter() - t0)
        return value

    record = json.loads((run_dir / "run.json").read_text())
    logger = timed("open", lambda: RunLogger(run_dir, uri, record.get("mlflow_run_id"), flush_every=flush_every))
    for step in range(steps):
        if step_seconds:
            time.sleep(step_seconds)
        timed("log", logger.log, step, {name: rng.random() for name in names})
        points += keys
    timed("close", logger.close, "FINISHED")
    (run_dir / RESULT_FILE).write_text(json.dumps({
        "points": points, "worst_call_s": max(worst.values()), "worst_log_s": worst["log"],
        "wall_s": time.perf_counter() - started, "store_failures": logger.store_failures,
    }))
    os._exit(0)  # skip interpreter teardown in the fork (atexit hooks of the parent's modules)


def create_runs_like_launcher(uri: str, run_dirs: list[Path]) -> None:
    from cancelctl.tracking import create_run
    from cancelctl.tracking.runfiles import RunRecord

    for run_dir in run_dirs:
        record = RunRecord.load(run_dir)
        mlflow_run_id = create_run(uri, record.experiment, run_id=record.run_id, name=record.name, tags=record.tags,
                                   params=record.params)
        data = json.loads((run_dir / "run.json").read_text())
        write_run_json(run_dir, **{**data, "mlflow_run_id": mlflow_run_id})


def in_child(function, *args):
    """Run `function` in a forked process (this process must not open a store before forking
    writers); its exception is raised here."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)

    def target() -> None:
        try:
            child.send(("ok", function(*args)))
        except BaseException as exc:  # noqa: BLE001 - handed to the parent
            child.send(("error", f"{type(exc).__name__}: {exc}"))
        os._exit(0)

    process = ctx.Process(target=target)
    process.start()
    child.close()
    try:
        outcome, value = parent.recv()
    except EOFError:
        outcome, value = "error", f"child exited with {process.join() or process.exitcode}"
    process.join()
    if outcome == "error":
        raise RuntimeError(f"{function.__name__}: {value}")
    return value


# -- reconciliation -------------------------------------------------------------------------------


def reconcile(uri: str, db_path: Path, experiment: str, run_dirs: list[Path]) -> tuple[dict[str, int], int]:
    """Points of every run's metrics.jsonl vs the store: raw rows of the sqlite file (exact, with
    duplicates) and the points `collect` reads through MLflow (REST for the server)."""
    local: Counter = Counter()
    for run_dir in run_dirs:
        run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
        local.update((run_id, step, key, ts) for step, key, _, ts in read_metrics_jsonl(run_dir / METRICS_JSONL))
    stored, duplicate_runs = store_rows(db_path, experiment)
    try:
        collected = in_child(collect_count, uri, experiment)
    except RuntimeError as exc:  # shown, and the figures still printed
        print(f"  collect from {uri} failed: {str(exc)[:300]}")
        collected = -1
    lost = sum((local - stored).values())
    extra = sum((stored - local).values())
    return {"jsonl": sum(local.values()), "store": sum(stored.values()), "collect": collected,
            "lost": lost, "extra": extra}, duplicate_runs


@dataclass
class PostgresDb:
    """A phase's PostgreSQL database, read as store_rows reads a sqlite file."""
    server: object
    name: str


STORE_WHERE = ("FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id "
               "JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = {p} WHERE e.name = {p}")


def store_rows(db_path: Path | PostgresDb, experiment: str) -> tuple[Counter, int]:
    """(run_id, step, key, timestamp) of every metric row of the experiment, read-only, and how many
    MLflow runs beyond one per cancelctl run id exist."""
    if isinstance(db_path, PostgresDb):
        where = STORE_WHERE.format(p="%s")
        query = lambda sql: db_path.server.query(db_path.name, sql, (RUN_ID_TAG, experiment))  # noqa: E731
        try:
            rows = query(f"SELECT t.value, m.step, m.key, m.timestamp {where.replace('WHERE', 'JOIN metrics m ON m.run_uuid = r.run_uuid WHERE')}")
        except Exception as exc:  # noqa: BLE001 - no schema yet (every writer failed): no rows
            print(f"  rows of {db_path.name}: {type(exc).__name__}: {str(exc)[:200]}")
            return Counter(), 0
        runs = query(f"SELECT t.value, COUNT(*) {where} GROUP BY t.value")
        return Counter(tuple(row) for row in rows), sum(count - 1 for _, count in runs)
    if not db_path.exists():
        return Counter(), 0
    con = sqlite3.connect(db_path.as_uri() + "?mode=ro", uri=True, timeout=60)
    try:
        where = STORE_WHERE.format(p="?")
        rows = con.execute(f"SELECT t.value, m.step, m.key, m.timestamp {where.replace('WHERE', 'JOIN metrics m ON m.run_uuid = r.run_uuid WHERE')}",
                           (RUN_ID_TAG, experiment)).fetchall()
        runs = con.execute(f"SELECT t.value, COUNT(*) {where} GROUP BY t.value", (RUN_ID_TAG, experiment)).fetchall()
    finally:
        con.close()
    return Counter(rows), sum(count - 1 for _, count in runs)


def collect_count(uri: str, experiment: str) -> int:
    from cancelctl.tracking import collect

    _, metrics = collect(uri, experiment)
    return len(metrics)


# -- printing -------------------------------------------------------------------------------------


def print_store(kind: str, uri: str, phases: dict[str, Phase]) -> bool:
    base, scaled = phases["baseline"], phases["scaled"]
    print(f"\n== {kind}: {uri}")
    print(f"  {'writers':>8} {'points':>9} {'wall s':>7} {'points/s':>9} {'to MLflow/s':>11} {'worst stall s':>13} "
          f"{'in log()':>8} {'paused':>6} "
          f"{'failed':>6} {'dup runs':>8}  reconciliation (jsonl / store rows / collect: lost, extra)")
    for phase in phases.values():
        recon = "; ".join(f"{when}: {r['jsonl']:,}/{r['store']:,}/{r['collect']:,} lost {r['lost']:,} extra {r['extra']}"
                          for when, r in phase.reconciliation.items())
        in_store = phase.reconciliation["after writers"]["store"] / phase.wall_s if phase.wall_s else 0.0
        print(f"  {phase.writers:>8} {phase.points:>9,} {phase.wall_s:>7.1f} {phase.points_per_s:>9,.0f} {in_store:>11,.0f} "
              f"{phase.worst_stall_s:>13.2f} {phase.worst_log_s:>8.2f} {phase.paused_runs:>6} {phase.failed_runs:>6} {phase.duplicate_runs:>8}  {recon}")
    if base.points_per_s and base.worst_stall_s:
        print(f"  ratio {scaled.writers} writers / {base.writers}: points/s x{scaled.points_per_s / base.points_per_s:.2f}, "
              f"worst stall x{scaled.worst_stall_s / base.worst_stall_s:.1f}")
    final = scaled.reconciliation.get("after sync", {})
    verdict = "OK" if final.get("lost") == 0 and final.get("extra") == 0 and not scaled.failed_runs \
        and not scaled.duplicate_runs else "PROBLEM"
    print(f"  {verdict}: after sync lost {final.get('lost')}, extra {final.get('extra')}, "
          f"failed runs {scaled.failed_runs}, duplicate MLflow runs {scaled.duplicate_runs}, paused runs {scaled.paused_runs}")
    return verdict == "OK"


def print_versus(scaled: dict[str, Phase]) -> None:
    """Each store's scaled phase against sqlite's, from this one run (same machine, same load)."""
    base = scaled.get("sqlite")
    others = {kind: phase for kind, phase in scaled.items() if kind != "sqlite"}
    if base is None or not others or not base.points_per_s:
        return
    print(f"\n== versus sqlite, {base.writers} writers, this run")
    for kind, phase in others.items():
        lost = phase.reconciliation.get("after sync", {})
        into = {name: p.reconciliation["after writers"]["store"] / p.wall_s if p.wall_s else 0.0
                for name, p in (("store", phase), ("sqlite", base))}
        print(f"  {kind}: points/s {phase.points_per_s:,.0f} vs {base.points_per_s:,.0f} "
              f"(x{phase.points_per_s / base.points_per_s:.2f}), into MLflow while the jobs ran "
              f"{into['store']:,.0f} vs {into['sqlite']:,.0f}/s (x{into['store'] / into['sqlite'] if into['sqlite'] else 0:.2f}); "
              f"runs paused {phase.paused_runs} vs {base.paused_runs}; longest stall {phase.worst_stall_s:.2f} s vs "
              f"{base.worst_stall_s:.2f} s (x{phase.worst_stall_s / base.worst_stall_s if base.worst_stall_s else 0:.2f}); "
              f"in log() {phase.worst_log_s:.2f} s vs {base.worst_log_s:.2f} s; "
              f"after sync lost {lost.get('lost')}, extra {lost.get('extra')}, duplicate runs {phase.duplicate_runs}")


if __name__ == "__main__":
    main()
