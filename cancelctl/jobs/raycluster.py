"""One Ray cluster over the nodes of one SLURM allocation (`cancelctl.jobs.allocation`): start it,
join it, wait for it, tear it down.

verl expects one Ray cluster per run with its driver on the head (docs/verl-internals.md#multi-node-ray), so on every
node of a multi-node run:

- rank 0 starts the Ray head (`ray start --head --block`, a child in its own session), waits until
  all N nodes are alive — naming the nodes that never joined when the timeout passes — then runs the
  workload with RAY_ADDRESS set (verl's `main_ppo` joins a running cluster), watching the nodes: a
  node that leaves ends the run with `NodeLost` naming it;
- every other rank joins (`ray start --address head`) and stays until the head's port closes.

Teardown stops the processes this job started, by process group and by their job-unique temp dir —
never `ray stop`, which kills every Ray on the host by name, other jobs' included.

Ray 2.60 authenticates with a token (by default one shared per user, ~/.ray/auth_token): each job
writes its own to the run folder, which every node of the allocation sees, and points Ray at it
(RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH) — one job's cluster does not accept another's workers.

The `ray start` processes inherit this job's environment (VERL_*, PYTHONPATH, CANCELCTL_*): Ray's
workers inherit the raylet's, so whatever verl's workers need must be exported before `start()`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from cancelctl.jobs import preemption
from cancelctl.jobs.allocation import Allocation, node_resource
from cancelctl.jobs.children import stop_group

if TYPE_CHECKING:
    from cancelctl.tracking.logger import MetricLogger

CLUSTER_JSON = "cluster.json"  # in the run folder: the nodes, addresses and ports of the last attempt
JOIN_TIMEOUT_S = float(os.environ.get("CANCELCTL_RAY_JOIN_TIMEOUT_S", "120"))
WATCH_EVERY_S = 2.0
# A worker node otherwise spends up to 30 s on SIGTERM trying to drain into a head that is gone.
RAY_ENV = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0", "RAY_USAGE_STATS_ENABLED": "0"}


_WORKLOAD_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")  # set by start(), put back by stop()


class RayClusterError(RuntimeError):
    """The allocation's Ray cluster did not form, or lost a node."""


class NodeLost(RayClusterError):
    """A node of the allocation left the Ray cluster mid-run."""


def ray_executable() -> str:
    """The `ray` CLI of this interpreter's environment (inside a container: the image's)."""
    candidate = Path(sys.executable).parent / "ray"
    return str(candidate) if candidate.exists() else "ray"


def _port_open(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


class RayCluster:
    """This node's part of the allocation's Ray cluster (use as a context manager: teardown always)."""

    def __init__(self, allocation: Allocation, shared_dir: Path, join_timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """`shared_dir`: a folder every node sees (the run folder), for the job's auth token."""
        self.allocation = allocation
        self.token_path = Path(shared_dir) / f".ray-{allocation.job_id}.token"
        self.join_timeout_s = join_timeout_s
        self.proc: subprocess.Popen | None = None
        self.lost: str | None = None
        self._watching = threading.Event()
        self._connected = False

    # -- every node ----------------------------------------------------------------------------

    def start(self) -> None:
        a = self.allocation
        if a.is_head:
            tmp = self.token_path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32))
            os.replace(tmp, self.token_path)
        else:  # the head must listen first (its token is written by then)
            deadline = time.monotonic() + self.join_timeout_s
            while not _port_open(a.head_address):
                if time.monotonic() > deadline:
                    raise RayClusterError(f"node {a.me.name}: the Ray head on {a.head.name} ({a.head_address}) "
                                          f"did not open within {self.join_timeout_s:.0f} s")
                time.sleep(0.5)
        # the workload (verl's ray.init) needs the job's token too; stop() puts the env back
        self._saved_env = {name: os.environ.get(name) for name in _WORKLOAD_ENV}
        os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path)})
        env = {**os.environ, **RAY_ENV}
        # own session: teardown signals the whole group, and a Ctrl-C/scancel of the job reaches us first
        self.proc = subprocess.Popen(a.start_command(a.rank, ray_executable()), env=env, start_new_session=True,
                                     stdin=subprocess.DEVNULL)
        if a.is_head:
            deadline = time.monotonic() + self.join_timeout_s
            while not _port_open(a.head_address):
                if self.proc.poll() is not None:
                    raise RayClusterError(f"the Ray head on {a.me.name} exited with status {self.proc.returncode} "
                                          f"(ports {a.ports(0)['port']}..; log: {a.temp_dir(0)})")
                if time.monotonic() > deadline:
                    raise RayClusterError(f"the Ray head on {a.me.name} did not listen on {a.head_address} "
                                          f"within {self.join_timeout_s:.0f} s")
                time.sleep(0.2)
            os.environ["RAY_ADDRESS"] = a.head_address  # the workload (verl's ray.init) joins this cluster

    def stop(self, keep_logs: bool = False) -> None:
        """Stop this node's Ray: its `ray start` group, then anything left using its temp dir; the
        temp dir goes too unless `keep_logs` (a cluster that failed: its logs say why)."""
        self._watching.clear()
        if self._connected:
            try:
                import ray

                ray.shutdown()
            except Exception:  # noqa: BLE001 - teardown goes on
                pass
            self._connected = False
        for name, value in getattr(self, "_saved_env", {}).items():  # a process that goes on (a test,
            if value is None:  # an in-process caller) must not point later Ray clients at a gone token
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if self.allocation.is_head:
            self.token_path.unlink(missing_ok=True)
        if self.proc is not None:
            stop_group(self.proc, grace_s=10, kill_wait_s=5)
        deadline = time.monotonic() + 10
        while (left := processes_using(self.allocation.temp_dir(self.allocation.rank))) and time.monotonic() < deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        if not keep_logs:
            shutil.rmtree(self.allocation.temp_dir(self.allocation.rank), ignore_errors=True)

    def __enter__(self) -> RayCluster:
        try:
            self.start()
        except BaseException:
            self.stop(keep_logs=True)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(keep_logs=exc_type is not None and issubclass(exc_type, Exception))  # not on cancel/requeue

    # -- rank 0 --------------------------------------------------------------------------------

    def connect(self) -> None:
        import ray

        try:  # Ray reads the auth settings once per process (at import): this process may predate them
            from ray._raylet import AuthenticationTokenLoader, Config

            Config.initialize("")
            AuthenticationTokenLoader.instance().reset_cache()
        except (ImportError, AttributeError):
            pass
        a = self.allocation
        # ray.init installs its own SIGTERM handler (sys.exit): the job keeps submitit's / preemption's
        sigterm = signal.getsignal(signal.SIGTERM)
        try:
            ray.init(address=a.head_address, _node_ip_address=a.me.address, logging_level="WARNING",
                     log_to_driver=False, configure_logging=False)
        finally:
            if threading.current_thread() is threading.main_thread() and sigterm is not None:
                signal.signal(signal.SIGTERM, sigterm)
        self._connected = True

    def alive_nodes(self) -> set[str]:
        """Names of the allocation's nodes whose raylet is alive."""
        import ray

        alive = set()
        for info in ray.nodes():
            if info.get("Alive"):
                alive.update(n.name for n in self.allocation.nodes if node_resource(n.name) in info.get("Resources", {}))
        return alive

    def wait_for_nodes(self) -> float:
        """Block until every node of the allocation is alive in Ray; seconds waited. Raises
        RayClusterError naming the nodes that never joined."""
        self.connect()
        t0 = time.monotonic()
        expected = {n.name for n in self.allocation.nodes}
        while True:
            alive = self.alive_nodes()
            if alive >= expected:
                return time.monotonic() - t0
            if self.proc is not None and self.proc.poll() is not None:
                raise RayClusterError(f"the Ray head on {self.allocation.me.name} exited with status {self.proc.returncode}")
            if time.monotonic() - t0 > self.join_timeout_s:
                missing = sorted(expected - alive, key=[n.name for n in self.allocation.nodes].index)
                raise RayClusterError(
                    f"Ray nodes {', '.join(missing)} never joined the head on {self.allocation.head.name} "
                    f"within {self.join_timeout_s:.0f} s (job {self.allocation.job_id}; joined: {', '.join(sorted(alive)) or 'none'})"
                )
            time.sleep(0.5)

    def probe(self) -> dict[str, str]:
        """Run one Ray task pinned to each node; returns node name -> the SLURM node it ran on
        (SLURMD_NODENAME of the worker process): the cluster really spans the allocation."""
        import ray

        @ray.remote(num_cpus=0)
        def where() -> str:
            return os.environ.get("SLURMD_NODENAME") or socket.gethostname()

        refs = {n.name: where.options(resources={node_resource(n.name): 0.01}).remote() for n in self.allocation.nodes}
        return {name: ray.get(ref, timeout=self.join_timeout_s) for name, ref in refs.items()}

    def watch(self) -> None:
        """From now on, a node that leaves ends the run with NodeLost at the workload's next step
        boundary (`preemption.at_step_boundary`: the lab after each step, verl's poll loop every 5 s)."""
        self._watching.set()
        threading.Thread(target=self._watch_loop, name="ray-node-watch", daemon=True).start()

    def _watch_loop(self) -> None:
        expected = [n.name for n in self.allocation.nodes]
        while self._watching.is_set():
            time.sleep(WATCH_EVERY_S)
            try:
                alive = self.alive_nodes()
            except Exception:  # noqa: BLE001 - the GCS is gone: the head died or teardown began
                if not self._watching.is_set():
                    return
                alive = set()
            gone = [n for n in expected if n not in alive]
            if gone and self._watching.is_set():
                self.lost = (f"Ray node {', '.join(gone)} left the cluster of job {self.allocation.job_id} mid-run "
                             f"(node died, or its raylet / SLURM task was killed)")
                self._watching.clear()
                preemption.fail_at_step_boundary(NodeLost(self.lost))
                return

    # -- other ranks ---------------------------------------------------------------------------

    def serve(self, poll_s: float = 1.0) -> None:
        """A worker node: keep this node's raylet up until the head leaves (normal end) — or raise
        if our own Ray stops first (the head then reports this node lost)."""
        a = self.allocation
        misses = 0
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RayClusterError(f"Ray on node {a.me.name} exited with status {self.proc.returncode} while the run went on")
            # the head closes its port when the run ends (or dies): then this node's part is over
            misses = 0 if _port_open(a.head_address) else misses + 1
            if misses >= 3:
                return
            time.sleep(poll_s)


@contextmanager
def run_cluster(allocation: Allocation, run_dir: Path, logger: MetricLogger) -> Iterator[RayCluster]:
    """Rank 0 of a multi-node run: the allocation's Ray cluster around the workload. Waits for every
    node, proves each runs Ray tasks, records them (cluster.json, MLflow tags `cancelctl.ray.*`),
    watches them while the workload runs, and tears Ray down on the way out."""
    with RayCluster(allocation, run_dir) as cluster:
        joined_s = cluster.wait_for_nodes()
        ran_on = cluster.probe()
        wrong = {n: r for n, r in ran_on.items() if n != r}
        if wrong:
            raise RayClusterError(f"Ray tasks pinned to nodes ran elsewhere: {wrong}")
        record = {"job_id": allocation.job_id, "head": allocation.head_address, "joined_s": round(joined_s, 2),
                  "nodes": [{"name": n.name, "address": n.address, "ports": allocation.ports(i)}
                            for i, n in enumerate(allocation.nodes)]}
        (Path(run_dir) / CLUSTER_JSON).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        # tags, not metrics: a step-0 point logged by a requeued attempt would read as the run's last step
        logger.set_tags({"cancelctl.ray.nodes": ",".join(n.name for n in allocation.nodes),
                         "cancelctl.ray.head": allocation.head_address, "cancelctl.ray.join_s": f"{joined_s:.2f}"})
        cluster.watch()
        yield cluster


def processes_using(temp_dir: str) -> list[int]:
    """PIDs of processes whose command line names `temp_dir` (Ray passes it, or its session dir, to
    every process it starts): what is left of one node's Ray, and nothing of other jobs'."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if temp_dir.encode() in cmdline:
            found.append(int(entry.name))
    return found


def serve_worker(allocation: Allocation, run_dir: Path) -> None:
    """Ranks > 0 of a multi-node run: join the head, stay until it leaves, tear down. SIGTERM
    (scancel, requeue) ends the wait so teardown still runs (submitit's handler only logs it)."""

    def leave(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)
    with RayCluster(allocation, run_dir) as cluster:
        cluster.serve()


def _main(argv: Sequence[str]) -> None:  # pragma: no cover - a manual check: srun -N2 python -m cancelctl.jobs.raycluster
    allocation = Allocation.from_env()
    if allocation is None:
        sys.exit("run inside a multi-node SLURM job: srun -N2 --ntasks-per-node=1 python -m cancelctl.jobs.raycluster")
    with RayCluster(allocation, Path.cwd()) as cluster:
        if not allocation.is_head:
            cluster.serve()
            return
        t = cluster.wait_for_nodes()
        print(f"all {len(allocation.nodes)} nodes joined in {t:.1f} s: {cluster.probe()}", flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
