"""The inspecting verbs: `validate`, `plan`, `schema`, `render` — what a sweep file says and what it
would launch, with nothing submitted or written to a work dir — and `smoke`, which runs every verl
configuration for two steps on CPU (in the work dir's `smoke/`, never the sweep's own runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table
from rich.text import Text

from cancelctl.cli.common import (
    AllowUnmatched,
    SweepFile,
    Workdir,
    console,
    err_console,
    executor_option,
    fail_input,
    load_sweep_file,
    say,
    workdir_path,
)
from cancelctl.errors import ArgumentError


def validate(
    paths: Annotated[list[Path], typer.Argument(help="Sweep files (YAML).")],
    *,
    allow_unmatched: AllowUnmatched = False,
    skip_verl: Annotated[bool, typer.Option("--skip-verl", help="Skip composing verl configs with Hydra.")] = False,
    skip_data: Annotated[bool, typer.Option(
        "--skip-data", help="Do not read verl runs' data files (e.g. they exist only on the cluster).")] = False,
) -> None:
    """Validate sweep files: schema, expansion, compute matching, verl's real config (offline) and
    the verl runs' data files."""
    from cancelctl.backends.validate import validate_files

    if err_console.is_terminal:  # a spinner with the current step; plain lines when piped (CI logs)
        with err_console.status("validating") as spinner:
            report = validate_files(paths, allow_unmatched=allow_unmatched, compose_verl=not skip_verl,
                                    check_data=not skip_data, progress=lambda message: spinner.update(message))
    else:
        plain = (lambda message: err_console.print(message, highlight=False, markup=False, style="dim")) \
            if len(paths) > 1 or not skip_verl else None
        report = validate_files(paths, allow_unmatched=allow_unmatched, compose_verl=not skip_verl, check_data=not skip_data,
                                progress=plain)
    _print_validation(report)
    raise typer.Exit(0 if report.ok else 2)


def _print_validation(report) -> None:
    for item in report.files:
        if item.ok:
            say(console, "ok  ", "green", f"{item.path}  ({item.n_runs} runs{item.note})")
        else:
            say(err_console, "FAIL", "bold red", f"{item.path}: {item.title}")
            for line in item.lines[:20]:
                err_console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
            if len(item.lines) > 20:
                err_console.print(f"  ... and {len(item.lines) - 20} more", highlight=False)
    for status in filter(None, [report.backend_status, report.data_status, report.memory_status]):
        console.print(Text(status, style="dim"), highlight=False, soft_wrap=True)  # a status quotes `[extra]`s


def plan(
    path: SweepFile,
    *,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    allow_unmatched: AllowUnmatched = False,
) -> None:
    """List the runs a sweep expands to, with stable run ids, planned compute, the allocations of
    cluster.time_min each SLURM run is expected to need, and each verl configuration's
    estimated GPU memory per GPU, where the model's config.json is on this machine (with --json, also the
    prompts verl keeps under max_prompt_length, where the data and the tokenizer are on this machine)."""
    from cancelctl.backends.plan_rows import plan_rows
    from cancelctl.spec.batching import minibatch_order_note

    sweep = load_sweep_file(path, allow_unmatched=allow_unmatched)
    planned = plan_rows(sweep)
    if as_json:
        typer.echo(json.dumps({"sweep": sweep.name, "baseline": sweep.spec.baseline,
                               "runs": [row.to_json() for row in planned.rows],
                               "prompt_lengths_skipped": planned.prompt_lengths_skipped or None,
                               "gpu_memory_skipped": planned.gpu_memory_skipped or None}, indent=2))
        return
    axes = list(sweep.runs[0].axes) if sweep.runs else []
    table = Table(title=f"{sweep.name}: {len(sweep.runs)} runs", title_justify="left", box=None, pad_edge=False)
    for col in ["name", "arm", *(a.rsplit(".", 1)[-1] for a in axes), "seed", "run_id", "backend", "executor", "loss", "clip",
                "groups"]:
        table.add_column(col, no_wrap=True)
    for col in ("budget", "gen tokens", "updates"):
        table.add_column(col, no_wrap=True, justify="right")
    if planned.has_time_limits:
        table.add_column("allocations", no_wrap=True, justify="right")
    if planned.has_gpu_memory:
        table.add_column("GPU memory (GiB per GPU)", no_wrap=True)
    if planned.has_prompt_lengths:
        table.add_column("prompts kept", no_wrap=True)
    for row in planned.rows:
        r, c = row.run, row.run.planned_compute()
        table.add_row(
            r.name, r.arm, *[str(r.axes[a]) for a in axes], str(r.seed), r.run_id, r.spec.backend, r.spec.executor,
            r.spec.algorithm.loss, f"{r.spec.algorithm.clip_low:g}/{r.spec.algorithm.clip_high:g}",
            minibatch_order_note(r.spec), _budget(r.spec.budget), _si(c["gen_tokens"]),
            "at the budget" if c["update_steps"] is None else f"{c['update_steps']:,}",  # known when the run ends
            *([_allocations_cell(row.time_limit)] if planned.has_time_limits else []),
            *([_leveled(*row.memory_cell())] if planned.has_gpu_memory else []),
            *([_leveled(*row.prompts_cell())] if planned.has_prompt_lengths else []),
        )
    console.print(table)
    if planned.prompt_lengths_skipped:
        console.print(Text(planned.prompt_lengths_skipped, style="dim"), highlight=False, soft_wrap=True)
    if planned.gpu_memory_skipped:
        console.print(Text(planned.gpu_memory_skipped, style="dim"), highlight=False, soft_wrap=True)
    for w in sweep.warnings:
        say(err_console, "NOT compute-matched:", "yellow", w)


LEVEL_STYLE = {"": "", "warn": "yellow", "refused": "bold red"}


def _leveled(text: str, level: str) -> Text:
    return Text(text, style=LEVEL_STYLE[level])


def _allocations_cell(limit) -> Text:
    """"3" allocations of cluster.time_min expected; "-" where the backend has no estimate."""
    if limit is None or limit.allocations is None:
        return Text("-")
    return Text(str(limit.allocations), style="" if limit.holds_one_step else "yellow")


BUDGET_UNITS = {"steps": "steps", "gen_tokens": "tokens", "update_steps": "updates"}


def _budget(budget) -> str:
    """The budget on its axis: "200 steps", "98.3k tokens", "800 updates"."""
    return f"{_si(budget.amount)} {BUDGET_UNITS[budget.axis]}"


def _si(n: float) -> str:
    """3 significant digits in the smallest unit that keeps them below 1000 ("98.3k", "1M" for
    999,950, never "1e+03k"); past the largest unit a power of ten ("1e18", never "1e+06T")."""
    if n < 1e3:
        return f"{n:g}"
    for unit, scale in (("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12)):
        shown = f"{n / scale:.3g}"
        if "e" not in shown and float(shown) < 1e3:
            return f"{shown}{unit}"
    return f"{n:.3g}".replace("e+", "e")


def schema(*, output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to this file.")] = None) -> None:
    """JSON Schema of the sweep file (for yaml-language-server / editors)."""
    from cancelctl.spec.schema import sweep_json_schema

    text = json.dumps(sweep_json_schema(), indent=2) + "\n"
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        console.print(f"wrote {output}")
    else:
        typer.echo(text, nl=False)


def render(
    path: SweepFile,
    *,
    run: Annotated[str, typer.Option("--run", help="Run id (or run name) from `cancelctl plan`.")],
    workdir: Workdir = None,
) -> None:
    """Show what the backend would launch: the verl command + overrides, or the lab config; with
    executor slurm, the exact sbatch script and in-task commands (Ray start-up on multi-node runs)."""
    sweep = load_sweep_file(path, allow_unmatched=True)
    match = [r for r in sweep.runs if run in (r.run_id, r.name)]
    if not match:
        fail_input(ArgumentError(f"--run {run!r}: no such run in {path} (see `cancelctl plan {path}`)"))
    target = match[0]
    from cancelctl.backends.registry import get_backend
    from cancelctl.executors import get_executor

    backend = get_backend(target.spec.backend)  # executors never import a backend: the lines are handed over
    job = get_executor(target.spec.executor).render_job(
        target, workdir_path(workdir), lambda run_dir: backend.workload_lines(target, run_dir))
    if job is not None:  # e.g. SLURM: the sbatch script and in-task commands
        typer.echo(job, nl=False)
    else:
        typer.echo(backend.rendered_run(target))
    for note in backend.render_notes(target):  # on stderr: the command stays pasteable
        say(err_console, "note:", "yellow", note)


def smoke(
    path: SweepFile,
    *,
    executor: Annotated[str, executor_option("Where the smoke jobs run: local (this machine) or slurm.")] = "local",
    partition: Annotated[Optional[str], typer.Option(
        "--partition", help="SLURM partition for the CPU smoke jobs (default: the spec's).")] = None,
    model: Annotated[Optional[str], typer.Option(
        "--model", help="A folder (or cached hub id) whose config and tokenizer stand in for the specs' model.path.")] = None,
    resume_each: Annotated[bool, typer.Option(
        "--resume-each",
        help="Resume every configuration (default: one per checkpoint family: model, trainer, sampler).")] = False,
    workdir: Workdir = None,
) -> None:
    """Run every distinct verl configuration (arm x grid point, one seed) for two real training steps,
    a checkpoint and a resume, on CPU with a tiny model of its family and the first rows of its data.
    Refused first, before any job: data verl could not read, and prompts that max_prompt_length would
    leave fewer than a step of. Exit 0 only when every configuration passes."""
    from cancelctl.backends.validate import validate_files
    from cancelctl.smoke import run_smoke

    sweep = load_sweep_file(path, allow_unmatched=True)  # compute matching is the sweep's business, not the smoke's
    # the data files and their prompts' lengths, before any job
    # GPU memory is validate's: the smoke runs a tiny model of the family on CPU
    checked = validate_files([path], allow_unmatched=True, compose_verl=False, check_memory=False, model=model)
    if not checked.ok:
        _print_validation(checked)
        raise typer.Exit(2)
    _print_data_notes(checked)
    with err_console.status("smoke") as spinner:
        result = run_smoke(sweep, workdir=workdir_path(workdir), executor=executor, partition=partition, model=model,
                           resume_each=resume_each,
                           progress=lambda message: spinner.update(message))
    _print_smoke(result)
    raise typer.Exit(result.exit_code)


def _print_data_notes(report) -> None:
    """validate's warnings on the data (prompts verl drops) and why a check was skipped, on stderr."""
    for item in report.files:
        for warning in (w for w in item.note.split("; warning: ")[1:] if w):
            say(err_console, "warning:", "yellow", warning)
    if report.data_status:
        err_console.print(Text(report.data_status, style="dim"), highlight=False, soft_wrap=True)


def _print_smoke(result) -> None:
    from cancelctl.smoke import OK

    table = Table(title=f"{result.sweep}: smoke of {len(result.rows)} verl configurations", title_justify="left",
                  box=None, pad_edge=False)
    for col in ("configuration", "result", "seconds", "cause / note"):
        table.add_column(col, no_wrap=col != "cause / note", overflow="fold")
    for row in result.rows:
        style = "green" if row.status == OK else "bold red"
        table.add_row(row.configuration, f"[{style}]{row.status}[/]", f"{row.seconds:.0f}" if row.seconds else "-",
                      Text(row.remark))
    console.print(table)
    if result.unsmoked_runs:
        console.print(f"[dim]{result.unsmoked_runs} runs of a backend without a smoke: nothing to smoke "
                      "(the lab runs on this machine as it is)[/]")
    console.print(f"[dim]{result.seconds:.0f} s in all; jobs and logs: {result.directory}[/]", highlight=False)
