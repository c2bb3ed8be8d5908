"""`cancelctl` command line: each verb is a thin function over a library call.

Exit codes: 0 ok, 1 runtime failure, 2 bad input (spec or arguments) with a one-screen message.
Heavy imports (torch, mlflow, verl) happen inside the verbs that need them, so `validate` and
`plan` stay fast.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from cancelctl.errors import SpecError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Run and compare group-based RL ablations (GRPO, GSPO, DFPO, ...) on SLURM or the CPU lab.",
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks that print ratios against an in-run baseline.")
app.add_typer(bench_app, name="bench")

# Piped output (CI logs, `| less`) gets a wide console instead of rich's 80-column default.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
console = Console(width=_WIDTH)
err_console = Console(stderr=True, width=_WIDTH)

DEFAULT_WORKDIR = Path(".cancelctl")
WorkdirOpt = typer.Option(
    None, "--workdir", "-w", help="Work dir (manifests, run folders, sqlite MLflow). Default: $CANCELCTL_WORKDIR or ./.cancelctl"
)


def workdir_path(workdir: Optional[Path]) -> Path:
    return (workdir or Path(os.environ.get("CANCELCTL_WORKDIR", DEFAULT_WORKDIR))).resolve()


def fail_input(exc: SpecError, file: str | None = None) -> None:
    title = f"{file}: {exc.title}" if file else exc.title
    err_console.print(f"[bold red]error:[/] {title}", highlight=False)
    for line in exc.render().splitlines():
        err_console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(2)


def load_or_exit(path: Path, allow_unmatched: bool = False):
    from cancelctl.plan import load_sweep

    try:
        return load_sweep(path, allow_unmatched=allow_unmatched)
    except SpecError as exc:
        fail_input(exc)


# ---------------------------------------------------------------- spec verbs


@app.command()
def validate(
    paths: list[Path] = typer.Argument(..., help="Sweep files (YAML)."),
    allow_unmatched: bool = typer.Option(False, help="Accept arms that are not compute-matched."),
    skip_verl: bool = typer.Option(False, help="Skip composing verl configs with Hydra."),
) -> None:
    """Validate sweep files: schema, expansion, compute matching, and verl's real config (offline)."""
    from cancelctl.validate import validate_files

    report = validate_files(paths, allow_unmatched=allow_unmatched, compose_verl=not skip_verl)
    for item in report.files:
        if item.ok:
            console.print(f"[green]ok[/]   {item.path}  ({item.n_runs} runs{item.note})", highlight=False)
        else:
            err_console.print(f"[bold red]FAIL[/] {item.path}: {item.title}", highlight=False)
            for line in item.lines[:20]:
                err_console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
            if len(item.lines) > 20:
                err_console.print(f"  ... and {len(item.lines) - 20} more", highlight=False)
    if report.verl_status:
        console.print(f"[dim]{report.verl_status}[/]", highlight=False)
    raise typer.Exit(0 if report.ok else 2)


@app.command()
def plan(
    path: Path = typer.Argument(..., help="Sweep file."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    allow_unmatched: bool = typer.Option(False, help="Accept arms that are not compute-matched."),
) -> None:
    """List the runs a sweep expands to, with stable run ids and planned compute."""
    sweep = load_or_exit(path, allow_unmatched)
    if as_json:
        rows = [
            {
                "name": r.name,
                "arm": r.arm,
                "axes": r.axes,
                "seed": r.seed,
                "run_id": r.run_id,
                "group": r.group,
                "backend": r.spec.backend,
                "executor": r.spec.executor,
                **{f"planned_{k}": v for k, v in r.planned_compute().items()},
            }
            for r in sweep.runs
        ]
        typer.echo(json.dumps({"sweep": sweep.name, "baseline": sweep.spec.baseline, "runs": rows}, indent=2))
        return
    axes = list(sweep.runs[0].axes) if sweep.runs else []
    table = Table(title=f"{sweep.name}: {len(sweep.runs)} runs", title_justify="left", box=None, pad_edge=False)
    for col in ["name", "arm", *(a.rsplit(".", 1)[-1] for a in axes), "seed", "run_id", "backend", "executor"]:
        table.add_column(col, no_wrap=True)
    table.add_column("gen tokens", no_wrap=True, justify="right")
    table.add_column("updates", no_wrap=True, justify="right")
    for r in sweep.runs:
        c = r.planned_compute()
        table.add_row(
            r.name, r.arm, *[str(r.axes[a]) for a in axes], str(r.seed), r.run_id, r.spec.backend, r.spec.executor,
            _si(c["gen_tokens"]), f"{c['update_steps']:,}",
        )
    console.print(table)
    for w in sweep.warnings:
        err_console.print(f"[yellow]NOT compute-matched:[/] {w}", highlight=False)


def _si(n: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:g}"


@app.command()
def schema(output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to this file.")) -> None:
    """JSON Schema of the sweep file (for yaml-language-server / editors)."""
    from cancelctl.schema import sweep_json_schema

    text = json.dumps(sweep_json_schema(), indent=2) + "\n"
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        console.print(f"wrote {output}")
    else:
        typer.echo(text, nl=False)


@app.command()
def render(
    path: Path = typer.Argument(..., help="Sweep file."),
    run: str = typer.Option(..., "--run", help="Run id (or run name) from `cancelctl plan`."),
) -> None:
    """Show what the backend would launch: the verl command + overrides, or the lab config."""
    sweep = load_or_exit(path, allow_unmatched=True)
    match = [r for r in sweep.runs if run in (r.run_id, r.name)]
    if not match:
        fail_input(SpecError(f"--run {run!r}: no such run in {path} (see `cancelctl plan {path}`)"))
    target = match[0]
    if target.spec.backend == "verl":
        from cancelctl.backends.verl import render_command

        typer.echo(" \\\n    ".join(render_command(target)))
    else:
        typer.echo(json.dumps(target.to_json(), indent=2))


# ---------------------------------------------------------------- results verbs


@app.command()
def report(
    sweep: Optional[str] = typer.Argument(None, help="Sweep name (default: the latest sweep of the work dir)."),
    baseline: str = typer.Option(..., "--baseline", "-b", help="Arm every other arm is compared against."),
    threshold: Optional[float] = typer.Option(None, "--threshold", "-k", help="Reward threshold kappa for Compute@Reward."),
    compute: str = typer.Option("tokens", "--compute", help="Compute axis: tokens | updates | hours."),
    metric: str = typer.Option("critic/score/mean", "--metric", help="Training reward metric key."),
    out: Optional[Path] = typer.Option(None, "--out", help="Report folder (default: results/<sweep>)."),
    allow_unmatched: bool = typer.Option(False, help="Report arms that are not compute-matched (tables say so)."),
    uri: Optional[str] = typer.Option(None, "--uri", help="MLflow tracking URI (default: the sweep's store)."),
    workdir: Optional[Path] = WorkdirOpt,
) -> None:
    """Compute-matched comparison tables, bootstrap CIs, paired tests, Compute@Reward, Jitter2, plots."""
    from cancelctl.reporting import report_sweep

    try:
        result = report_sweep(
            workdir_path(workdir), sweep, baseline=baseline, threshold=threshold, compute=compute, metric=metric,
            out=out, allow_unmatched=allow_unmatched, uri=uri, console=console,
        )
    except SpecError as exc:
        fail_input(exc)
    console.print(f"report written to {result.out_dir}/ (report.md, report.html, tables/, plots/)", highlight=False)


@app.command()
def sync(
    workdir: Optional[Path] = WorkdirOpt,
    uri: Optional[str] = typer.Option(None, "--uri", help="Upload to this MLflow store (default: each run's own)."),
) -> None:
    """Upload metrics that never reached MLflow (store was down) from the run folders' JSONL."""
    from cancelctl.tracking import sync as sync_runs

    result = sync_runs(workdir_path(workdir), uri)
    for run in result.runs.values():
        state = f"[red]{run.error}[/]" if run.error else f"{run.uploaded} points" + (" (run created)" if run.created else "")
        console.print(f"{run.run_id}  {state}", highlight=False)
    console.print(f"uploaded {result.uploaded} points from {len(result.runs)} run folders", highlight=False)
    raise typer.Exit(1 if result.failed else 0)


def main() -> None:  # console script
    try:
        app()
    except SpecError as exc:  # raised by library calls that parse arguments late
        err_console.print(f"[bold red]error:[/] {exc.title}", highlight=False)
        err_console.print(exc.render(), highlight=False, markup=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
