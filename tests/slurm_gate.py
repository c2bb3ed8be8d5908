"""Whether the SLURM tests may use the cluster this machine sees (a plain module, shared by the
slurm-marked tests).

Only a cluster that CI, or the developer explicitly, started for the tests: its `ClusterName` must be
named in CANCELCTL_TEST_SLURM_CLUSTER (`.ci/run` sets it to the cluster `.ci/slurm-up.sh` starts).
Whatever `sinfo` finds on a login node — a production cluster — is never used.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

ENV = "CANCELCTL_TEST_SLURM_CLUSTER"


def cluster_problem() -> str | None:
    """None when the tests may submit; otherwise why they skip."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return f"SLURM tests run only against a cluster started for them: set {ENV}=<ClusterName> (.ci/slurm-up.sh starts 'cancelctl-ci')"
    if shutil.which("scontrol") is None or shutil.which("sinfo") is None:
        return "no SLURM cluster: scontrol/sinfo not found (start one with .ci/slurm-up.sh)"
    try:
        config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=20)
        nodes = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
        acct = subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True, text=True, timeout=20)
    except (subprocess.TimeoutExpired, OSError) as exc:
        return f"no SLURM cluster answering: {exc}"
    match = re.search(r"^ClusterName\s*=\s*(\S+)", config.stdout, re.M)
    name = match.group(1) if match else None
    if name != wanted:
        return f"the cluster here is {name!r}, not {wanted!r} named in {ENV}: not submitting to it"
    if nodes.returncode != 0 or not ({"idle", "mixed", "allocated"} & set(nodes.stdout.split())):
        return f"no usable SLURM node (sinfo: {nodes.stdout.strip() or nodes.stderr.strip()}); run .ci/slurm-up.sh"
    if acct.returncode != 0:
        return f"SLURM accounting (slurmdbd) is off: {acct.stderr.strip()}; run .ci/slurm-up.sh"
    return None


def cluster_cpus() -> int:
    """CPUs of the default partition (where the tests' jobs go): how many 1-CPU tasks can run at once."""
    out = subprocess.run(["sinfo", "-h", "-o", "%P %C"], capture_output=True, text=True, timeout=20).stdout
    # %P ends in "*" for the default partition; %C = allocated/idle/other/total
    return sum(int(cpus.split("/")[3]) for part, cpus in (line.split() for line in out.splitlines()) if part.endswith("*"))


MULTI_PARTITION = "multi"  # .ci/slurm-up.sh: nodes n1, n2 (multiple-slurmd mode)


def multi_node_problem(nodes: int = 2) -> str | None:
    """None when partition `multi` has `nodes` usable nodes for the multi-node tests; else why they skip."""
    problem = cluster_problem()
    if problem:
        return problem
    out = subprocess.run(["sinfo", "-h", "-p", MULTI_PARTITION, "-o", "%D %T"], capture_output=True, text=True, timeout=20)
    usable = sum(int(count) for count, state in (line.split() for line in out.stdout.splitlines())
                 if state in ("idle", "mixed"))
    if usable < nodes:
        return (f"partition {MULTI_PARTITION!r} has {usable} usable nodes, the test needs {nodes} "
                f"(.ci/slurm-up.sh adds n1/n2; sinfo: {out.stdout.strip() or out.stderr.strip() or 'no such partition'})")
    return None
