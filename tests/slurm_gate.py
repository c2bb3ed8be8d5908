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
    """CPUs the cluster's idle or mixed nodes offer: how many 1-CPU tasks can run at once."""
    out = subprocess.run(["sinfo", "-h", "-o", "%C"], capture_output=True, text=True, timeout=20).stdout
    # %C = allocated/idle/other/total
    return sum(int(part.split("/")[3]) for part in out.split() if part.count("/") == 3)
