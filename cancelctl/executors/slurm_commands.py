"""SLURM commands through submitit (the SLURM executor, `executors/slurm.py`, calls these): sbatch parameters from the cluster spec, array scripts, submission; the job states are `slurm_states`.

Rendering is submitit's own (`_make_sbatch_string`, the function behind `SlurmExecutor`), so
every parameter name and check is submitit's; the job side is submitit's runtime too (signal
handling, `Checkpointable` requeue, result pickles). What cancelctl does itself is the 20 lines
of submission glue, for crash safety: the array's pickles are written under a per-submission token
BEFORE sbatch and the job adopts them (`python -m cancelctl.jobs`), sbatch inherits the sweep's
submit lock, and the job name carries the token so a job id lost with a killed launcher is found
again (`find_by_name`). Plain `map_array` moves pickles after sbatch returns: a launcher killed in
that window leaves tasks that fail after 60 s.

Scheduler calls all have timeouts (`run_command`).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cancelctl.errors import SpecError, SpecIssue
from cancelctl.errors import SchedulerError
from cancelctl.jobs.entry import ARRAY_TASK_ENTRY
from cancelctl.jobs.time_limit import SUBMITIT_LEAD_S, SUBMITIT_TIMEOUTS, TimeLimitPlan
from cancelctl.spec.cluster import SBATCH_FLAG, line_break_in
from cancelctl.spec.experiment import ExperimentSpec

SBATCH_TIMEOUT_S = 60
QUERY_TIMEOUT_S = 30
DEFAULT_MAX_ARRAY_SIZE = 1001  # SLURM's default when scontrol cannot be asked
# Parameters cancelctl sets itself; `cluster.additional` must not override them.
RESERVED = {"array", "job_name", "output", "error", "open_mode", "comment", "map_count", "wckey", "signal_delay_s",
            "additional_parameters", "srun_args", "stderr_to_stdout", "use_srun", "ntasks_per_node", "ntasks",
            "tasks_per_node"}
# sbatch/submitit names that have a ClusterSpec field: set the field, not `additional`.
CLUSTER_FIELDS = {"partition": "partition", "account": "account", "qos": "qos", "nodes": "nodes",
                  "gpus_per_node": "gpus_per_node", "cpus_per_task": "cpus_per_task", "mem": "mem_gb",
                  "time": "time_min", "array_parallelism": "array_parallelism", "setup": "setup"}

# Fault injection for the crash-safety tests (seconds to pause at the named point).
PAUSE_BEFORE_SBATCH = "CANCELCTL_FAULT_PAUSE_BEFORE_SBATCH"
PAUSE_AFTER_SBATCH = "CANCELCTL_FAULT_PAUSE_AFTER_SBATCH"


# ---------------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class JobShape:
    """What an array needs from SLURM: submitit parameters plus the python command. Runs with equal
    shapes share an array."""

    parameters: dict[str, Any]
    python: str
    max_timeouts: int = SUBMITIT_TIMEOUTS  # time-outs submitit requeues (the plan's: `jobs.time_limit`)

    @property
    def key(self) -> str:
        import json

        return json.dumps([self.parameters, self.python, self.max_timeouts], sort_keys=True, default=str)


def slurm_available() -> bool:
    return all(shutil.which(cmd) for cmd in ("sbatch", "sacct", "squeue", "scancel", "scontrol"))


def job_shape(spec: ExperimentSpec, workdir: Path, time_limit: TimeLimitPlan | None = None) -> JobShape:
    """submitit SlurmExecutor parameters for a run (names as in submitit's `update_parameters`).
    `time_limit`: the run's planned signal lead and time-out count (`jobs.time_limit`); submitit's
    defaults without one."""
    from submitit.slurm.slurm import _convert_mem

    cluster = spec.cluster
    params: dict[str, Any] = {
        "time": cluster.time_min,
        "signal_delay_s": time_limit.lead_s if time_limit else SUBMITIT_LEAD_S,  # sbatch --signal=USR2@<lead>
        "nodes": cluster.nodes,
        "cpus_per_task": cluster.cpus_per_task,
        "array_parallelism": cluster.array_parallelism,
        "stderr_to_stdout": False,
    }
    optional = {
        "partition": cluster.partition,
        "account": cluster.account,
        "qos": cluster.qos,
        "gpus_per_node": cluster.gpus_per_node or None,
        "mem": _convert_mem(cluster.mem_gb) if cluster.mem_gb else None,
        "setup": list(cluster.setup) or None,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    if cluster.nodes > 1:
        # one task per node: the job function runs on every node, rank 0 starts the Ray head and the
        # others join it (cancelctl.jobs.raycluster); only rank 0 checkpoints and requeues (submitit)
        params["ntasks_per_node"] = 1
    python = shlex.quote(sys.executable)
    if cluster.container_image:
        image, mounts = cluster.container_image, f"{workdir}:{workdir}"
        # the image brings its own python with cancelctl installed; the work dir is mounted as is
        if cluster.container_runtime == "pyxis":
            params["srun_args"] = [f"--container-image={image}", f"--container-mounts={mounts}", f"--container-workdir={workdir}"]
            python = "python"
        else:  # apptainer: the python command itself runs in the image
            gpu = " --nv" if cluster.gpus_per_node else ""
            python = f"apptainer exec{gpu} --bind {shlex.quote(mounts)} {shlex.quote(image)} python"
    # `additional`: submitit's own parameter names go through submitit; anything else is passed as
    # a raw sbatch flag (submitit's `additional_parameters`).
    valid = submitit_parameter_names()
    raw: dict[str, Any] = {}
    issues = []
    for key, value in cluster.additional.items():
        name = str(key).replace("-", "_")
        if name in CLUSTER_FIELDS:
            issues.append(SpecIssue(None, f"cluster.additional.{key}", f"set cluster.{CLUSTER_FIELDS[name]} instead"))
        elif name in RESERVED:
            issues.append(SpecIssue(None, f"cluster.additional.{key}", "set by cancelctl (array, job name, logs); remove it"))
        elif key in valid:
            params[key] = value
        else:
            raw[key] = value
    if issues:
        raise SpecError(issues, title="invalid SLURM settings (cluster.additional): nothing was submitted")
    if raw:
        params["additional_parameters"] = raw
    return JobShape(params, python, time_limit.max_timeouts if time_limit else SUBMITIT_TIMEOUTS)


@functools.lru_cache(maxsize=1)
def submitit_parameter_names() -> frozenset[str]:
    from submitit.slurm.slurm import _get_default_parameters

    return frozenset(_get_default_parameters())


def check_shape(shape: JobShape, where: str = "cluster", folder: Path = Path("/nonexistent")) -> None:
    """Refuse parameters submitit (or sbatch's option syntax) would not accept, before anything is
    submitted: SpecError (exit 2) naming the bad key."""
    issues = []
    valid = submitit_parameter_names()
    for key in shape.parameters:
        if key not in valid:
            issues.append(SpecIssue(None, f"{where}.{key}", f"not a submitit SLURM parameter; valid: {', '.join(sorted(valid))}"))
    for key in shape.parameters.get("additional_parameters") or {}:
        if not SBATCH_FLAG.match(str(key)):
            issues.append(SpecIssue(None, f"{where}.additional.{key}", "not an sbatch option name (letters, digits, '-')"))
    if not issues:
        try:
            render_sbatch(shape, folder=folder, token="check", n_tasks=1, job_name="check", comment="check")
        except (TypeError, ValueError, AssertionError) as exc:
            issues.append(SpecIssue(None, where, f"submitit refuses these parameters: {exc}"))
    if issues:
        raise SpecError(issues, title="invalid SLURM settings (cluster.*): nothing was submitted")


def sbatch_test_only(script: Path) -> str | None:
    """Ask slurmctld whether it would accept the script (`sbatch --test-only`; nothing is queued).
    None if it would, else its refusal; SchedulerError when slurmctld did not answer (a runtime
    failure, not bad settings)."""
    result = run_command(["sbatch", "--test-only", str(script)], timeout=SBATCH_TIMEOUT_S, check=False)
    if result.returncode == 0:
        return None
    said = (result.stderr or result.stdout).strip() or f"sbatch --test-only exited {result.returncode}"
    if controller_unreachable(said):
        raise SchedulerError(f"SLURM unreachable: sbatch --test-only: {said}; the cluster settings were not checked "
                             f"and nothing was submitted: run the same command once slurmctld answers")
    return said


# What SLURM's clients print when slurmctld (or slurmdbd) did not answer, as opposed to a refusal.
_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|Zero Bytes were transmitted"
    r"|Communication connection failure|Connection timed out|Transport endpoint is not connected"
    r"|Problem talking to the database|slurmdbd.*(down|not respond)", re.IGNORECASE)


def controller_unreachable(message: str) -> bool:
    return bool(_UNREACHABLE.search(message))


# ---------------------------------------------------------------------------------- rendering


def entry_command(python: str, folder: Path, token: str) -> str:
    return f"{python} -u -m cancelctl.jobs {ARRAY_TASK_ENTRY} {shlex.quote(str(folder))} {token}"


def render_sbatch(shape: JobShape, *, folder: Path, token: str, n_tasks: int, job_name: str, comment: str) -> str:
    """The sbatch script of one array (submitit's renderer, our entry command)."""
    from submitit.slurm.slurm import _make_sbatch_string

    params = dict(shape.parameters)
    params.update(job_name=job_name, comment=comment, map_count=n_tasks)
    command = entry_command(shape.python, folder, token)
    _refuse_line_breaks({**params, "folder (the work dir)": str(folder), "command": command})
    return _make_sbatch_string(command=command, folder=folder, **params)


def _refuse_line_breaks(values: dict[str, Any], where: str = "") -> None:
    """The last guard before a script is written: a value with a line break would add lines (an
    `#SBATCH` directive) to it. The spec's types refuse these with their file:line; this catches
    what reaches the script by another way (the work dir's path, an extension's parameter)."""
    issues = []
    for key, value in values.items():
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
        for sub, item in items:
            bad = line_break_in(str(item))
            if bad is not None:
                field = f"{where}{key}" + ("" if sub is None else f".{sub}" if isinstance(value, dict) else f"[{sub}]")
                issues.append(SpecIssue(None, field, f"must be one line without control characters (found {bad!r}), got {str(item)!r}"))
    if issues:
        raise SpecError(issues, title="a value would break the sbatch script's lines: nothing was submitted")


def job_name(sweep: str, token: str) -> str:
    return f"cancelctl:{sweep}:{token}"


def job_comment(sweep: str, run_ids: Sequence[str], limit: int = 1000) -> str:
    """The run ids in array order (cut to `limit` characters; the manifest holds the full list)."""
    text = f"cancelctl sweep={sweep} runs={','.join(run_ids)}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


_MAX_ARRAY_SIZE: list[int] = []  # the cluster's answer, once it gave one


def max_array_size() -> int:
    """MaxArraySize from `scontrol show config` (array indices must stay below it). Only an answer
    is remembered: a busy slurmctld's failure is asked again next time, never cached as the default."""
    if _MAX_ARRAY_SIZE:
        return _MAX_ARRAY_SIZE[0]
    if not shutil.which("scontrol"):
        return DEFAULT_MAX_ARRAY_SIZE
    result = run_command(["scontrol", "show", "config"], timeout=QUERY_TIMEOUT_S, check=False)
    match = re.search(r"^MaxArraySize\s*=\s*(\d+)", result.stdout, re.MULTILINE)
    if result.returncode != 0 or not match:
        return DEFAULT_MAX_ARRAY_SIZE
    _MAX_ARRAY_SIZE.append(int(match.group(1)))
    return _MAX_ARRAY_SIZE[0]


# ---------------------------------------------------------------------------------- submission


def write_array_files(folder: Path, token: str, jobs: Sequence[Any], shape: JobShape, script: str) -> Path:
    """The array's pickles (`<token>_<index>.pkl`) and script, written before sbatch."""
    from submitit.core.utils import DelayedSubmission

    folder.mkdir(parents=True, exist_ok=True)
    timeout_min = shape.parameters.get("time", 5)
    for index, job in enumerate(jobs):
        delayed = DelayedSubmission(job)
        delayed.set_timeout(timeout_min, max_num_timeout=shape.max_timeouts)
        tmp = folder / f".{token}_{index}.pkl.tmp"
        delayed.dump(tmp)
        os.replace(tmp, folder / f"{token}_{index}.pkl")
    path = folder / f"{token}_submission.sh"
    path.write_text(script, encoding="utf-8")
    return path


def sbatch(script: Path, *, lock_fd: int | None = None) -> str:
    """Submit; returns the job id. The sweep's submit lock (`lock_fd`) is inherited by sbatch, so
    a launcher killed mid-call still blocks the next launch until sbatch itself has finished."""
    _pause(PAUSE_BEFORE_SBATCH)
    pass_fds = (lock_fd,) if lock_fd is not None else ()
    try:
        result = run_command(["sbatch", "--parsable", str(script)], timeout=SBATCH_TIMEOUT_S, check=False,
                             pass_fds=pass_fds)
    except CommandTimedOut as exc:
        raise AnswerLost(f"sbatch {script.name}: {exc}") from None
    said = (result.stderr or result.stdout).strip()
    if result.returncode < 0:
        raise AnswerLost(f"sbatch {script.name} was killed by signal {-result.returncode} before it answered")
    if result.returncode != 0:
        if controller_unreachable(said):  # "Socket timed out on send/recv": the request may have been queued
            raise AnswerLost(f"sbatch {script.name}: {said.splitlines()[-1] if said else 'no answer'}")
        raise SchedulerError(f"sbatch {script.name} failed: {said}")  # a refusal: nothing was queued
    job_id = result.stdout.strip().split(";")[0]  # --parsable: "<id>[;cluster]"
    if not job_id.isdigit():
        raise AnswerLost(f"sbatch {script.name}: cannot read a job id from {result.stdout.strip()[:120]!r}")
    _pause(PAUSE_AFTER_SBATCH)
    return job_id


class AnswerLost(SchedulerError):
    """sbatch ran but did not answer clearly (hung, killed, unreachable controller, output without
    a job id): the job may have been queued, so its runs are neither submitted nor unsubmitted until
    SLURM is asked for the job by name."""


class CommandTimedOut(SchedulerError):
    """A scheduler command did not answer within its timeout (it was killed)."""


def scancel(job_ids: Iterable[str]) -> None:
    ids = sorted(set(job_ids))
    if ids:
        run_command(["scancel", *ids], timeout=QUERY_TIMEOUT_S, check=True)


# ---------------------------------------------------------------------------------- helpers


def run_command(cmd: list[str], *, timeout: float, check: bool, pass_fds: Sequence[int] = ()) -> subprocess.CompletedProcess:
    try:
        # replacement characters for bytes that are not UTF-8 (a job name, a node's locale): a
        # garbled character in a status line, never a UnicodeDecodeError
        result = subprocess.run(
            cmd, capture_output=True, encoding="utf-8", errors="replace", timeout=timeout, check=False,
            pass_fds=tuple(pass_fds), stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise CommandTimedOut(f"{' '.join(cmd[:3])} ... did not answer within {timeout:.0f} s") from None
    except FileNotFoundError:
        raise SchedulerError(f"{cmd[0]} not found: is this a SLURM login node?") from None
    if check and result.returncode != 0:
        raise SchedulerError(f"{' '.join(cmd)} failed ({result.returncode}): {(result.stderr or result.stdout).strip()}")
    return result


def _pause(variable: str) -> None:
    seconds = float(os.environ.get(variable, "0") or 0)
    if seconds > 0:
        time.sleep(seconds)
