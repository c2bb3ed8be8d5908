"""The results verbs: `list`, `logs`, `ui`, `report`, `sync` — what a work dir holds, one run's logs,
the tracking store, the compute-matched report, and the points that never reached MLflow."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from cancelctl.cli.common import (
    LatestSweep,
    Workdir,
    console,
    err_console,
    finite,
    say,
    state_counts,
    workdir_path,
)
from cancelctl.spec.metric_keys import REWARD_KEY, ComputeAxis


def list_(*, workdir: Workdir = None) -> None:
    """Sweeps of the work dir, launched last first, with their runs counted by state."""
    from cancelctl.launch.control import list_sweeps

    wd = workdir_path(workdir)
    listed = list_sweeps(wd)
    if not listed:
        console.print(f"no sweep has been run in {wd} yet (cancelctl sweep FILE)", highlight=False)
        return
    table = Table(title=f"{wd}: {len(listed)} sweep(s)", title_justify="left", box=None, pad_edge=False)
    for col in ("sweep", "runs", "states", "file"):
        table.add_column(col, no_wrap=col != "file")
    for name, states, note in listed:
        table.add_row(name, "?" if states is None else str(len(states)), "" if states is None else state_counts(states), note)
        if getattr(states, "unreachable", None):  # its states are the last SLURM gave: said, as `status` does
            say(err_console, "warning:", "yellow", f"{name}: {states.unreachable}")
    console.print(table)


def logs(
    run: Annotated[str, typer.Argument(help="Run name, run id or a unique run-id prefix (as `status` shows them).")],
    *,
    sweep: Annotated[Optional[str], typer.Option("--sweep", "-s", help="Sweep name (default: the latest).")] = None,
    lines: Annotated[int, typer.Option("--lines", "-n", min=0, help="Lines of each file to show.")] = 20,
    workdir: Workdir = None,
) -> None:
    """One run's job stdout/stderr and error.txt: their paths and last lines."""
    from cancelctl.launch.logs import run_logs

    found = run_logs(workdir_path(workdir), run, sweep, lines)
    if found.unreachable:  # the state shown is the last SLURM gave
        say(err_console, "warning:", "yellow", found.unreachable)
    s = found.state
    console.print(f"{found.sweep} / {s.name} ({s.run_id}): {s.state}" + (f" — {s.reason}" if s.reason else ""), highlight=False)
    if found.note:
        console.print(found.note, style="dim", highlight=False)
    for what, path, text in found.files:
        say(console, f"{what}:", "bold", f"{path}" + ("" if text is not None else " (none)"))
        for line in text or []:
            console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)


def ui(
    sweep: LatestSweep = None,
    *,
    port: Annotated[int, typer.Option("--port", help="Port of the UI.")] = 5000,
    host: Annotated[str, typer.Option("--host", help="Interface to bind (default loopback only).")] = "127.0.0.1",
    open_: Annotated[bool, typer.Option(
        "--open", help="Run the UI now (Ctrl-C stops it) instead of printing the command.")] = False,
    workdir: Workdir = None,
) -> None:
    """The `mlflow ui` command for the sweep's tracking store, bound to 127.0.0.1 (--open runs it)."""
    import subprocess

    from cancelctl.tracking.ui import is_loopback, shown, sweep_store, ui_command
    from cancelctl.tracking.uri import TrackingUnavailable, probe_store

    uri = sweep_store(workdir_path(workdir), sweep)
    argv = ui_command(uri, host, port)
    problem = probe_store(uri, write=False) if argv is not None else None  # mlflow ui would retry for minutes
    if problem:
        raise TrackingUnavailable(f"tracking store {uri} unusable: {problem}")
    if argv is None:
        console.print(f"the sweep logs to the tracking server {uri}: open it in a browser", highlight=False)
        return
    if not is_loopback(host):
        say(err_console, "warning:", "yellow", f"--host {host} serves the store beyond this machine")
    console.print(shown(argv), highlight=False, soft_wrap=True)
    if open_:
        console.print(f"serving on http://{host}:{port} (Ctrl-C stops it)", highlight=False)
        try:
            raise typer.Exit(subprocess.call(argv))
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def report(
    sweep: Annotated[Optional[str], typer.Argument(help="Sweep name (default: the latest sweep of the work dir).")] = None,
    *,
    baseline: Annotated[Optional[str], typer.Option(
        "--baseline", "-b", help="Arm every other arm is compared against (default: the sweep file's baseline).")] = None,
    kappa: Annotated[Optional[float], typer.Option(
        "--kappa", "-k", callback=finite, help="Reward threshold κ for Compute@Reward and steps to κ.")] = None,
    compute: Annotated[ComputeAxis, typer.Option("--compute", help="Compute axis.")] = "tokens",
    metric: Annotated[str, typer.Option("--metric", help="Training reward metric key.")] = REWARD_KEY,
    out: Annotated[Optional[Path], typer.Option("--out", help="Report folder (default: results/<sweep>).")] = None,
    allow_unmatched: Annotated[bool, typer.Option(
        "--allow-unmatched",
        help="Report arms that are not compute-matched, or ran on different GPU kinds or CPU kernels (tables say so).",
    )] = False,
    uri: Annotated[Optional[str], typer.Option("--uri", help="MLflow tracking URI (default: the sweep's store).")] = None,
    claims_only: Annotated[bool, typer.Option(
        "--claims-only", help="Print only the claims' verdicts; write nothing (the report on disk stays as it was).")] = False,
    include_stopped: Annotated[bool, typer.Option(
        "--include-stopped",
        help="Use runs a monitor rule stopped in the compute-matched tables (left out there by default; "
             "the claims always use every run).",
    )] = False,
    include_unfinished: Annotated[bool, typer.Option(
        "--include-unfinished", help="Use runs that have not FINISHED (running, failed, killed) as they are.")] = False,
    workdir: Workdir = None,
) -> None:
    """Compute-matched tables, Student's t CIs, paired tests, Compute@Reward, Jitter2, claims' verdicts, plots."""
    from cancelctl.report.options import ReportOptions
    from cancelctl.report.sweep_report import report_sweep
    from cancelctl.stats.options import ComparisonOptions

    options = ReportOptions(
        baseline=baseline, kappa=kappa, compute=compute, metric=metric, include_unfinished=include_unfinished,
        include_stopped=include_stopped, claims_only=claims_only, compare=ComparisonOptions(allow_unmatched=allow_unmatched),
    )
    result = report_sweep(workdir_path(workdir), sweep, options, out=out, uri=uri, console=console)
    if claims_only:  # printed only: the report on disk stays as the last full `report` left it
        console.print(f"claims only: nothing written; the report in {result.out_dir}/ is left as it was", highlight=False)
    else:
        console.print(f"report written to {result.out_dir}/ (report.md, report.html, tables/, plots/)", highlight=False)
    if result.still_running:
        names = ", ".join(result.still_running[:8]) + (" ..." if len(result.still_running) > 8 else "")
        say(err_console, "warning: incomplete report:", "bold yellow",
            f"{len(result.still_running)} run(s) still running were left out "
            f"({names}); report again when they have ended, or pass --include-unfinished to use them as they are")
        raise typer.Exit(1)


def sync(
    *,
    workdir: Workdir = None,
    uri: Annotated[Optional[str], typer.Option("--uri", help="Upload to this MLflow store (default: each run's own).")] = None,
) -> None:
    """Upload metrics that never reached MLflow (store was down) from the run folders' JSONL."""
    from rich.markup import escape

    from cancelctl.tracking import sync as sync_runs

    result = sync_runs(workdir_path(workdir), uri)
    store_down: dict[str, list[str]] = {}  # a store's own failure is said once, not once per run
    for run in result.runs.values():
        if run.store_down:
            store_down.setdefault(run.error, []).append(run.run_id)
            continue
        state = f"[red]{escape(run.error)}[/]" if run.error else f"{run.uploaded} points" + (" (run created)" if run.created else "")
        console.print(f"{run.run_id}  {state}", highlight=False)
    for why, run_ids in store_down.items():
        err_console.print(f"error: {why}\n  {len(run_ids)} run(s) not synced; every point stays in their metrics.jsonl "
                          "and `cancelctl sync` uploads them once the store works", highlight=False, markup=False, soft_wrap=True)
    console.print(f"uploaded {result.uploaded} points from {len(result.runs)} run folders", highlight=False)
    raise typer.Exit(1 if result.failed else 0)
