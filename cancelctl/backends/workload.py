"""What a run's backend executes inside its job, as display lines (`cancelctl render`).

Executors never import a backend (tests/test_flow.py); the CLI resolves the backend here and hands
the lines to the executor that renders the job around them.
"""

from __future__ import annotations

from pathlib import Path

from cancelctl.spec.run import RunSpec


def workload_lines(run: RunSpec, run_dir: Path) -> list[str]:
    """What rank 0 runs once the job's nodes are up: verl's command, or the lab run in-process."""
    if run.spec.backend == "verl":
        from cancelctl.backends.verl import format_command
        from cancelctl.backends.verl.command import job_command
        from cancelctl.backends.verl.render import job_env

        return [format_command(job_command(run, run_dir), job_env(run))]
    return [f"# the {run.spec.backend} backend trains in the rank-0 process itself (cancelctl.backends.{run.spec.backend}.train)"]
