"""Tracking benchmarks on a local MLflow sqlite store.

(a) MlflowClient.log_batch (1000 points/call) vs per-point log_metric, same store, same points;
    plus RunLogger end to end (JSONL + buffered log_batch).
(b) populate RUNS x KEYS x STEPS points (log_batch, timed separately), then time collect():
    sqlite fast path vs MLflow-API path, in-process and in a fresh process (imports included).

    python benchmarks/bench_tracking.py                      # defaults: 2000 points; 100 x 20 x 500
    python benchmarks/bench_tracking.py --workdir /tmp/bt    # reuses a populated store if present
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cancelctl.tracking import RunLogger, collect, create_run, default_tracking_uri

SWEEP = "bench-collect"


def main() -> None:
    args = parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-tracking-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    uri = default_tracking_uri(workdir)
    print(f"store: {uri}")
    started = time.perf_counter()
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    client.search_experiments()  # schema creation on a new store
    print(f"import mlflow + open store: {time.perf_counter() - started:.1f} s")
    if not args.skip_logging:
        bench_logging(client, uri, workdir, args.points)
    bench_collect(client, uri, args)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", help="store folder (default: a new temp dir)")
    parser.add_argument("--points", type=int, default=2000, help="points per logging method in (a)")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--skip-logging", action="store_true", help="skip (a)")
    parser.add_argument("--skip-api", action="store_true", help="skip the slow MLflow-API collect")
    return parser.parse_args()


# -- (a) logging throughput ---------------------------------------------------------------------


def bench_logging(client, uri: str, workdir: Path, n_points: int) -> None:
    from mlflow.entities import Metric

    keys = [f"metric/k{i:02d}" for i in range(20)]
    steps = max(1, n_points // len(keys))
    points = [(key, float(step * i), step) for step in range(steps) for i, key in enumerate(keys)]
    now = int(time.time() * 1000)

    batch_run = new_run(uri, "log-batch")
    started = time.perf_counter()
    metrics = [Metric(key, value, now, step) for key, value, step in points]
    for start in range(0, len(metrics), 1000):
        client.log_batch(batch_run, metrics=metrics[start : start + 1000], synchronous=True)
    batch_s = time.perf_counter() - started

    point_run = new_run(uri, "log-metric")
    started = time.perf_counter()
    for key, value, step in points:
        client.log_metric(point_run, key, value, timestamp=now, step=step, synchronous=True)
    point_s = time.perf_counter() - started

    logger_run = new_run(uri, "run-logger")
    started = time.perf_counter()
    with RunLogger(workdir / "logger-run", uri, logger_run, mark_running=False) as logger:
        for step in range(steps):
            logger.log(step, {key: float(step * i) for i, key in enumerate(keys)})
    logger_s = time.perf_counter() - started

    n = len(points)
    print(f"\n(a) {n} points, {len(keys)} keys x {steps} steps, sqlite store")
    print(f"  log_batch (1000/call): {batch_s:7.2f} s  {n / batch_s:9.0f} pts/s")
    print(f"  log_metric per point : {point_s:7.2f} s  {n / point_s:9.0f} pts/s  ({1000 * point_s / n:.1f} ms/pt)")
    print(f"  RunLogger (JSONL+batch): {logger_s:5.2f} s  {n / logger_s:9.0f} pts/s")
    print(f"  ratio per-point / log_batch time: {point_s / batch_s:.0f}x")


def new_run(uri: str, name: str) -> str:
    return create_run(uri, "bench-logging", run_id=f"{name}-{time.time_ns()}", name=name, tags={}, params={})


# -- (b) collect --------------------------------------------------------------------------------


def bench_collect(client, uri: str, args: argparse.Namespace) -> None:
    expected = args.runs * args.keys * args.steps
    print(f"\n(b) collect {args.runs} runs x {args.keys} metrics x {args.steps} steps = {expected:,} points")
    populate(client, uri, args)
    timings = {}
    for method in ["sql"] + ([] if args.skip_api else ["api"]):
        started = time.perf_counter()
        runs, metrics = collect(uri, SWEEP, method=method)
        timings[method] = time.perf_counter() - started
        assert len(runs) == args.runs and len(metrics) == expected, (len(runs), len(metrics))
        print(f"  collect method={method}: {timings[method]:6.2f} s in process ({len(metrics):,} rows)")
    cold = collect_in_fresh_process(uri)
    print(f"  collect method=auto in a fresh process (imports included): {cold:.2f} s  (target <= 10 s)")
    if "api" in timings:
        print(f"  ratio api / sql: {timings['api'] / timings['sql']:.0f}x")


def populate(client, uri: str, args: argparse.Namespace) -> None:
    from mlflow.entities import Metric

    experiment = client.get_experiment_by_name(SWEEP)
    if experiment is not None and len(client.search_runs([experiment.experiment_id], max_results=1000)) >= args.runs:
        print("  store already populated (reused)")
        return
    started = time.perf_counter()
    keys = [f"metric/k{i:02d}" for i in range(args.keys)]
    for r in range(args.runs):
        arm, seed, G = ("grpo", "gspo", "dfpo")[r % 3], r // 3, (4, 8)[r % 2]
        tags = {
            "cancelctl.sweep": SWEEP, "cancelctl.arm": arm, "cancelctl.seed": str(seed),
            "cancelctl.group": f"algo.G={G}", "cancelctl.G": str(G), "cancelctl.spec_hash": f"h{r}",
            "cancelctl.axes": json.dumps({"algo.G": G}),
        }
        mlflow_run_id = create_run(uri, SWEEP, run_id=f"run{r:03d}", name=f"{arm}-G{G}-s{seed}", tags=tags,
                                   params={"algo": {"G": G, "name": arm}, "seed": seed})
        now = int(time.time() * 1000)
        metrics = [Metric(key, step * 0.001 + i, now, step) for step in range(args.steps) for i, key in enumerate(keys)]
        for start in range(0, len(metrics), 1000):
            client.log_batch(mlflow_run_id, metrics=metrics[start : start + 1000], synchronous=True)
        client.set_terminated(mlflow_run_id, "FINISHED")
    elapsed = time.perf_counter() - started
    total = args.runs * args.keys * args.steps
    print(f"  populate via log_batch: {elapsed:.1f} s ({total / elapsed:,.0f} pts/s)")


def collect_in_fresh_process(uri: str) -> float:
    code = (
        "import time; t = time.perf_counter()\n"
        "from cancelctl.tracking import collect\n"
        f"runs, metrics = collect({uri!r}, {SWEEP!r})\n"
        "print(time.perf_counter() - t)"
    )
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    print(f"  (fresh process: {float(out.stdout.strip()):.2f} s after interpreter start, {wall:.2f} s wall)")
    return wall


if __name__ == "__main__":
    main()
