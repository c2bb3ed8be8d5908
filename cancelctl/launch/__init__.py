"""Execution: launch a sweep through an executor (`cancelctl.executors`: SLURM job arrays, submitit's
local executor one run per core, or in-process debug); follow, cancel and retry it.

API (the CLI's verbs are thin wrappers)::

    launch_sweep(sweep, *, workdir, executor=None, dry_run=False, retry_failed=False,
                 wait=None, progress=None, retry_stopped=False) -> LaunchResult
    sweep_status(workdir, sweep=None) -> list[RunState]          # latest sweep when None
    wait_for_sweep(workdir, sweep, progress=None, poll_s=5.0, timeout_s=None) -> list[RunState]
    cancel_sweep(workdir, sweep) -> list[str]                    # cancelled job ids
    latest_sweep(workdir) -> str | None
    until_decided.run_until_decided(sweep, *, workdir, judge, max_seeds, batch=2, ...)  # sweep --until-decided

`progress` is called with the current `list[RunState]` at every poll.

Work dir layout (default ./.cancelctl or $CANCELCTL_WORKDIR; paths: `cancelctl.workdir`)::

    <workdir>/
      mlflow.db                     default MLflow store (sqlite), unless tracking.uri says otherwise
      mlartifacts/                  its artifact root
      cache/                        shared by runs (lab warm-start policies)
      sweeps/<sweep>/
        manifest.json               runs, submissions (intent before sbatch, job id after); atomic
        manifest.lock               short read-modify-write lock of the manifest
        submit.lock                 held by the launcher (and inherited by each sbatch) while submitting
        driver.log                  output of a detached local driver (wait=False)
        runs/<name>__<run_id>/      e.g. gspo-G=8-s0__01be704be275 (older work dirs: runs/<run_id>/)
          run.json                  RunSpec, tracking URI, MLflow run id (written at launch)
          metrics.jsonl             every metric point (RunLogger)
          sync_state.json           what of metrics.jsonl is in MLflow
          checkpoint.pt             backend checkpoint (resume after requeue/timeout/retry)
          result.json               final metrics: the run completed
          error.txt                 why it failed or was interrupted (+ traceback); error.prev.txt
          job.json, attempts.jsonl  current attempt (pid, host, job id) and every start/end
          alerts.jsonl, stopped.json  the in-job monitor's alerts; the rule that stopped the run
        submitit/                   SLURM: <token>_submission.sh, <token>_<i>.pkl, <job>_<i>_0_log.{out,err}
          local/                    local executor: <pid>_0_log.{out,err}, pickles

States: see `cancelctl.runstate`. Failure policy: a run that raises is FAILED with its
traceback in error.txt; a job killed from outside (scancel, OOM, node failure) is FAILED from the
scheduler's state; a rerun never submits a completed or active run again.
"""

from cancelctl.errors import SchedulerError
from cancelctl.executors.base import ArrayPlan
from cancelctl.launch.control import cancel_sweep, settle_tracking, sweep_status, wait_for_sweep
from cancelctl.launch.launcher import LaunchResult, launch_sweep
from cancelctl.runstate import ACTIVE, TERMINAL, RunState
from cancelctl.workdir import latest_sweep

__all__ = [
    "ACTIVE",
    "TERMINAL",
    "ArrayPlan",
    "LaunchResult",
    "RunState",
    "SchedulerError",
    "cancel_sweep",
    "latest_sweep",
    "launch_sweep",
    "settle_tracking",
    "sweep_status",
    "wait_for_sweep",
]
