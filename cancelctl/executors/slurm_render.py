"""What one run looks like on SLURM, for `cancelctl render`: the exact sbatch script cancelctl would
submit for it, and the commands its array task runs — with `cluster.nodes > 1`, the Ray head/worker
start-up over the allocation (`cancelctl.jobs.raycluster`) and the workload on rank 0.

The script is rendered by the same code as a real submission (`slurm_commands.render_sbatch`, the
run as a 1-task array). What only exists once the job runs — its id, its nodes and their addresses —
is filled in with a stated example (job 1234 on node0..nodeN-1 at 192.0.2.1.., the RFC 5737 documentation range: never a real host); the ports and temp
dirs then follow from the job id exactly as in a real job.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

from cancelctl.executors import slurm_commands as slurm
from cancelctl.jobs.time_limit import time_limit_plan
from cancelctl.spec.run import RunSpec
from cancelctl.workdir import sweep_paths

EXAMPLE_JOB_ID = "1234"
RENDER_TOKEN = "render0000"


def example_allocation(run: RunSpec):
    from cancelctl.jobs.allocation import Allocation, Node

    cluster = run.spec.cluster
    nodes = tuple(Node(f"node{i}", f"192.0.2.{i + 1}") for i in range(cluster.nodes))
    return Allocation(EXAMPLE_JOB_ID, nodes, rank=0, cpus=cluster.cpus_per_task, gpus=cluster.gpus_per_node)


def render_run(run: RunSpec, workdir: Path, workload: Callable[[Path], list[str]]) -> str:
    """The sbatch script and in-task commands of `run` (raises SpecError on bad cluster settings);
    `workload(run_dir)`: the lines rank 0 runs once the cluster is up, from the run's backend (the
    caller's: executors never import a backend)."""
    from cancelctl.jobs.allocation import in_task_commands
    from cancelctl.jobs.raycluster import JOIN_TIMEOUT_S, RAY_ENV

    paths = sweep_paths(workdir, run.sweep)
    shape = slurm.job_shape(run.spec, paths.workdir, time_limit_plan(run))
    slurm.check_shape(shape, where=f"arm {run.arm}: cluster")
    script = slurm.render_sbatch(
        shape, folder=paths.submitit_dir, token=RENDER_TOKEN, n_tasks=1,
        job_name=slurm.job_name(run.sweep, RENDER_TOKEN), comment=slurm.job_comment(run.sweep, [run.run_id]),
    )
    run_dir = paths.run_dir(run.run_id, run.name)
    nodes = run.spec.cluster.nodes
    out = [f"# ---- sbatch script of run {run.name} ({run.run_id}) as a 1-task array "
           f"(`cancelctl sweep` puts runs of one resource shape in one array)", script.rstrip("\n"), ""]
    out.append(f"# ---- in the array task: srun starts {nodes} task(s), one per node, each running")
    out.append(f"#      {slurm.entry_command(shape.python, paths.submitit_dir, RENDER_TOKEN)}")
    if nodes == 1:
        out.append("# ---- which runs the workload (verl's own ray.init starts a one-node Ray cluster):")
        out.extend(workload(run_dir))
        return "\n".join(out) + "\n"
    allocation = example_allocation(run)
    names = ", ".join(n.name for n in allocation.nodes)
    token_path = run_dir / f".ray-{allocation.job_id}.token"
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path), **RAY_ENV}
    out.append(f"# ---- the Ray cluster over the allocation (cancelctl.jobs.raycluster), shown for job {allocation.job_id} on "
               f"{names} (NodeAddr 192.0.2.1..{nodes});")
    out.append("#      ports and temp dirs derive from SLURM_JOB_ID, nodes from SLURM_JOB_NODELIST + scontrol NodeAddr.")
    out.append("#      Every `ray start` runs in the task's own session with the job's environment plus:")
    out.append("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()))
    out.append(f"# rank 0 first writes a fresh token to {token_path} (mode 0600); ranks > 0 wait until the head listens")
    out.extend(in_task_commands(allocation))
    out.append(f"# rank 0 waits until {names} are alive in Ray (else after {JOIN_TIMEOUT_S:.0f} s the run FAILS naming the "
               f"nodes that never joined), runs one Ray task pinned to each node, then with RAY_ADDRESS={allocation.head_address}:")
    out.extend(workload(run_dir))
    out.append("# a node leaving mid-run fails the run naming it (NodeLost); at the end every rank stops its own Ray")
    out.append("# by process group and temp dir (never `ray stop`); ranks > 0 leave when the head's port closes.")
    return "\n".join(out) + "\n"


__all__ = ["render_run"]
