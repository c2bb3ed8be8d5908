"""What a run's backend executes inside its job, as display lines (`cancelctl render`): around the
executor's job (`workload_lines`), alone where the executor adds nothing (`rendered_run`), and the
notes that go with it (`render_notes`).

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


def rendered_run(run: RunSpec) -> str:
    """What `render` prints where the executor has no job script: verl's command with its environment,
    or the run's spec as JSON (the lab trains in-process)."""
    if run.spec.backend == "verl":
        from cancelctl.backends.verl import format_command, render_command
        from cancelctl.backends.verl.render import job_env

        return format_command(render_command(run), job_env(run))
    import json

    return json.dumps(run.to_json(), indent=2)


def render_notes(run: RunSpec) -> list[str]:
    """What the rendered command does not say: verl's rollout precision on this machine's CPU."""
    if run.spec.backend != "verl":
        return []
    from cancelctl.backends.verl.render import rollout_precision_note
    from cancelctl.jobs.hardware import cpu_flags

    note = rollout_precision_note(run, cpu_flags())
    return [note] if note else []
