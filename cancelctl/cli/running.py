"""The running verbs: `sweep`, `watch`, `status`, `cancel` — launch a sweep through its executor,
follow it, say where each run is, stop it."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.table import Table

from cancelctl.cli.common import (
    LatestSweep,
    SweepFile,
    Workdir,
    executor_option,
    console,
    err_console,
    fail_input,
    finite,
    load_sweep_file,
    say,
    state_counts,
    workdir_path,
)
from cancelctl.errors import ArgumentError

if TYPE_CHECKING:
    from cancelctl.spec.expand import Sweep

# keyed by the state words of cancelctl.runstate (lower case)
STATE_STYLE = {"completed": "green", "failed": "bold red", "cancelled": "yellow", "running": "cyan", "pending": "dim",
               "stopped": "magenta"}


def _states_table(title: str, states) -> Table:
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for col in ("name", "run_id", "state", "job", "step", "attempts", "reason"):
        table.add_column(col, no_wrap=col != "reason")
    for s in states:
        # a token budget's step count is known only at its end: the step alone
        step = f"{s.step}/{s.steps}" if s.step is not None and s.steps else (
            str(s.step) if s.step is not None else ("starting" if s.state == "running" else ""))
        style = STATE_STYLE.get(s.state, "")
        table.add_row(
            s.name, s.run_id, f"[{style}]{s.state}[/]" if style else s.state, s.job_id or "", step, str(s.attempts), s.reason
        )
    return table


def sweep(
    path: SweepFile,
    *,
    executor: Annotated[Optional[str], executor_option("Override the spec's executor.")] = None,
    workdir: Workdir = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be submitted; submit nothing.")] = False,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Resubmit exactly the runs that failed.")] = False,
    retry_stopped: Annotated[bool, typer.Option(
        "--retry-stopped", help="Resubmit the runs a monitor rule stopped (they resume from their checkpoint).")] = False,
    wait: Annotated[Optional[bool], typer.Option(
        "--wait/--no-wait", help="Follow until done (default: yes locally, no on SLURM).")] = None,
    allow_unmatched: Annotated[bool, typer.Option("--allow-unmatched", help="Run arms that are not compute-matched.")] = False,
    until_decided: Annotated[bool, typer.Option(
        "--until-decided",
        help="Add seeds in rounds to the arms of the claims still undecided (an anytime-valid sequential test "
             "at every round) until every claim is decided or --max-seeds is reached.",
    )] = False,
    max_seeds: Annotated[Optional[int], typer.Option(
        "--max-seeds", min=2, help="--until-decided: at most this many seeds an arm (default: twice the file's).")] = None,
    batch: Annotated[Optional[int], typer.Option(
        "--batch", min=1, help="--until-decided: seeds a round adds (default 2).")] = None,
) -> None:
    """Validate, expand and run every arm of a sweep; finished or running runs are never resubmitted.
    Exit 1 when a run failed, 3 when runs were cancelled (`cancelctl cancel`) and none failed."""
    from cancelctl.executors import get_executor
    from cancelctl.launch.interrupt import (
        Interrupted,
        interrupted_message,
        signals_interrupt,
    )
    from cancelctl.launch.starting import hold_at, launching
    from cancelctl.workdir import sweep_paths

    if not until_decided and (max_seeds is not None or batch is not None):
        fail_input(ArgumentError("--max-seeds and --batch go with --until-decided"))
    wd = workdir_path(workdir)
    name = path.stem  # until the file says
    try:
        with signals_interrupt():  # from the first moment: a signal while the file is read is said too
            announced = None if dry_run else _sweep_name(path)
            name = announced or name
            # `cancel` knows the launch from here, before the file is validated (`launch_sweep` announces
            # it too, once validated, where the file gave no name this way)
            with launching(sweep_paths(wd, announced)) if announced else contextlib.nullcontext():
                hold_at("loading")
                expanded = load_sweep_file(path, allow_unmatched)
                name = expanded.name
                runner = get_executor(executor or expanded.runs[0].spec.executor)
                will_wait = (wait if wait is not None else runner.waits_by_default) and not dry_run
                launch = dict(workdir=wd, executor=executor, dry_run=dry_run, retry_failed=retry_failed,
                              retry_stopped=retry_stopped)
                if until_decided and not dry_run:  # prints its rounds and verdicts, exits
                    _until_decided(expanded, wd, will_wait, max_seeds, batch, allow_unmatched, launch)
                result = _launch(_with_rounds(expanded, wd), runner, will_wait, wd, launch)  # (a dry run: this look's)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, a closed terminal
        resume = " ".join(["cancelctl sweep", str(path)] + (["-w", str(workdir)] if workdir else [])
                          + (["--executor", executor] if executor else [])
                          + (["--until-decided"] if until_decided else [])
                          + ([f"--max-seeds {max_seeds}"] if max_seeds is not None else [])
                          + ([f"--batch {batch}"] if batch is not None else []))
        message = interrupted_message(exc, name, resume, None if dry_run else _left_by_interrupt(wd, name))
        err_console.print(message, highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code if isinstance(exc, Interrupted) else 130) from None
    _print_launch(result, expanded)


def _sweep_name(path: Path) -> str | None:
    """The sweep file's name, read without validating the file (milliseconds; validating takes a good
    part of a second); None where the file gives none so — its full load says what is wrong."""
    from cancelctl.spec.yamlpos import load_yaml_file
    from cancelctl.workdir import check_sweep_name

    try:
        data, _ = load_yaml_file(path)
        return check_sweep_name(data["name"])
    except Exception:  # noqa: BLE001 - reported by the full load, with its file:line
        return None


def _left_by_interrupt(wd: Path, name: str):
    """The states of the runs an interrupted launch left ([]: it recorded none), for its last line;
    None when they cannot be read (said as a warning)."""
    from cancelctl.errors import SweepNotFound
    from cancelctl.launch import sweep_status
    from cancelctl.launch.interrupt import signals_recorded

    with signals_recorded():  # a second signal does not cut the last line short
        try:
            return sweep_status(wd, name)
        except SweepNotFound:
            return []
        except Exception as exc:  # noqa: BLE001 - the interrupt is what this screen is about
            say(err_console, "warning:", "yellow", f"the states of sweep {name} could not be read: {exc}")
            return None


def _with_rounds(expanded: Sweep, wd: Path):
    """The sweep file plus the seeds `--until-decided` rounds added to it (they never turn stale)."""
    from cancelctl.launch.until_decided import planned_with_rounds

    return planned_with_rounds(expanded, wd)


def _until_decided(expanded: Sweep, wd: Path, will_wait: bool, max_seeds, batch, allow_unmatched: bool, launch: dict) -> None:
    """`sweep --until-decided`: rounds of seeds (`run_until_decided`), judged by the report's claims."""
    from cancelctl.launch.until_decided import DEFAULT_BATCH, run_until_decided
    from cancelctl.report.live.watch import WatchProgress
    from cancelctl.report.sweep_report import judge_until_decided
    from cancelctl.stats.options import ComparisonOptions

    compare = ComparisonOptions(allow_unmatched=allow_unmatched)

    def judge(rounds):
        return judge_until_decided(wd, expanded.name, rounds, compare)

    options = dict(executor=launch["executor"], retry_failed=launch["retry_failed"],
                   retry_stopped=launch["retry_stopped"], wait=will_wait,
                   max_seeds=max_seeds if max_seeds is not None else 2 * len(expanded.spec.seeds),
                   batch=batch if batch is not None else DEFAULT_BATCH)
    if will_wait:
        with WatchProgress(expanded.name, console=console) as view:
            result = run_until_decided(expanded, workdir=wd, judge=judge, progress=view, **options)
    else:
        result = run_until_decided(expanded, workdir=wd, judge=judge, **options)
    _print_until_decided(result, expanded)


def _print_until_decided(result, expanded: Sweep) -> None:
    from cancelctl.launch.until_decided import STILL_RUNNING
    from cancelctl.report.claims import decided_text, sequential_verdict_text
    from cancelctl.report.sequential_claims import budget_spent, seeds_per_look

    for launch in result.launches:
        for warning in launch.warnings:
            say(err_console, "warning:", "yellow", warning)
    rounds = result.rounds
    submitted = sum(len(launch.submitted) for launch in result.launches)
    console.print(f"{result.sweep}: {rounds.n_looks} look(s) ({seeds_per_look(rounds)}); submitted {submitted} run(s) "
                  f"now; {result.stopped}", highlight=False, soft_wrap=True)
    if result.stopped == STILL_RUNNING:
        console.print(f"  run the same `cancelctl sweep ... --until-decided` once they have ended: it judges look "
                      f"{rounds.n_looks} and goes on from there", highlight=False)
    for row, spent in zip(result.verdicts, budget_spent(result.verdicts, rounds)):
        v = row.verdict
        where = f" ({v.group})" if v.group else ""
        console.print(f"  {v.claim_id}{where}: {sequential_verdict_text(row)}; decided {decided_text(row, spent)}, "
                      f"{row.looks} look(s), {v.n_seeds} seeds, {v.test}", highlight=False, soft_wrap=True)
    for launch in result.launches:
        _say_failed(launch, expanded)
    if result.verdicts:
        console.print(f"the claims table: cancelctl report {result.sweep} --claims-only", highlight=False)
    raise typer.Exit(result.exit_code)


def _launch(expanded: Sweep, runner, will_wait: bool, wd: Path, launch: dict):
    from cancelctl.launch import launch_sweep

    if will_wait and runner.waits_by_default:  # the launcher drives the runs itself: it pushes states
        from cancelctl.report.live.watch import WatchProgress

        with WatchProgress(expanded.name, console=console) as view:
            return launch_sweep(expanded, wait=True, progress=view, **launch)
    result = launch_sweep(expanded, wait=False, **launch)
    if will_wait:  # a scheduler runs them (SLURM): follow them in the watch view
        _watch_submitted(wd, result)
    return result


def _print_launch(result, expanded: Sweep) -> None:
    for warning in result.warnings:
        say(err_console, "warning:", "yellow", warning)
    verb = "would submit" if result.dry_run else "submitted"
    console.print(
        f"{result.sweep} ({result.executor}): {verb} {len(result.submitted)}, "
        f"skipped {len(result.skipped_finished)} finished, {len(result.skipped_running)} running"
        # the runs that failed now are the FAILED lines below: a "0 failed" here read as none did
        + (f", {len(result.skipped_failed)} failed before (use --retry-failed)" if result.skipped_failed else "")
        + (f", {len(result.skipped_stopped)} stopped by a monitor rule (use --retry-stopped)" if result.skipped_stopped else "")
        + (f"; jobs {', '.join(result.job_ids)}" if result.job_ids else ""),
        highlight=False,
    )
    if result.dry_run:
        names = {r.run_id: r.name for r in expanded.runs}
        for run_id in result.submitted:
            console.print(f"  {names.get(run_id, run_id)}  {run_id}", highlight=False)
    _say_failed(result, expanded)
    if result.states and not result.dry_run:
        console.print(f"{result.sweep}: {state_counts(result.states)}", highlight=False)
    if result.cancelled:  # `sweep && report` must not go on with a sweep someone cancelled
        names = {r.run_id: r.name for r in expanded.runs}
        listed = ", ".join(names.get(run_id, run_id) for run_id in result.cancelled[:6]) + (" ..." if len(result.cancelled) > 6 else "")
        err_console.print(f"{result.sweep}: {len(result.cancelled)} run(s) cancelled: {listed} "
                          f"(a plain rerun submits them again)", highlight=False, markup=False)
    raise typer.Exit(result.exit_code)


def _say_failed(result, expanded: Sweep) -> None:
    """One line per failed run: its name and id, then why — error.txt's first line starts with the
    word the label already says ("FAILED <when> job …"), so it is said once."""
    names = {r.run_id: r.name for r in expanded.runs}
    for run_id, why in result.errors.items():
        why = str(why or "").removeprefix("FAILED ")
        say(err_console, "FAILED", "bold red", f"{names.get(run_id, run_id)} ({run_id}): {why}")


def _watch_submitted(workdir: Path, result) -> None:
    """`sweep --wait` on a scheduler: the watch view until every run has ended (Ctrl-C leaves them
    running); then the final states and failures go into `result` as the launcher's own wait does."""
    from cancelctl.executors.base import WATCH
    from cancelctl.launch import settle_tracking, sweep_status
    from cancelctl.launch.launcher import note_cancelled
    from cancelctl.report.live.watch import watch
    from cancelctl.runstate import FAILED

    view = watch(lambda: sweep_status(workdir, result.sweep, freshness=WATCH), title=result.sweep, console=console)
    result.states = sweep_status(workdir, result.sweep)
    if not view.interrupted:
        settle_tracking(result.states)
    for state in result.states:
        if state.state == FAILED and state.run_id not in result.failed:
            result.failed.append(state.run_id)
            result.errors[state.run_id] = state.reason
    note_cancelled(result, set(result.submitted))


def watch_sweep(
    sweep: LatestSweep = None,
    *,
    workdir: Workdir = None,
    refresh: Annotated[float, typer.Option(
        "--refresh", min=0.1, callback=finite, help="Seconds between refreshes.")] = 3.0,
) -> None:
    """Live view of a sweep (state, step, reward, rho std, entropy, ETA, alerts) until every run has ended;
    plain lines when not a terminal. Ctrl-C stops watching, never the runs. Exit 1 if a run failed."""
    from cancelctl.executors.base import WATCH
    from cancelctl.launch import sweep_status
    from cancelctl.report.live.watch import watch
    from cancelctl.workdir import existing_sweep

    wd = workdir_path(workdir)
    name = sweep or existing_sweep(wd, None).sweep  # the latest; none run here: SweepNotFound (exit 2)
    sweep_status(wd, name, freshness=WATCH)  # an unknown sweep: one clear message (exit 2), before any view
    # steps from the run folders at every refresh; SLURM asked at most every WATCH.max_age_s, in the background
    result = watch(lambda: sweep_status(wd, name, freshness=WATCH), title=name, console=console, refresh_s=refresh)
    raise typer.Exit(1 if any(run.state == "failed" for run in result.view.runs) else 0)


def status(
    sweep: LatestSweep = None,
    *,
    workdir: Workdir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print states as JSON.")] = False,
) -> None:
    """Per-run state of a sweep (one sacct call for the whole sweep on SLURM)."""
    from cancelctl.executors.base import SHOW
    from cancelctl.launch import sweep_status
    from cancelctl.workdir import existing_sweep

    wd = workdir_path(workdir)
    name = sweep or existing_sweep(wd, None).sweep  # the latest; none run here: SweepNotFound (exit 2)
    every = sweep_status(wd, name, include_stale=True, freshness=SHOW)
    states, stale = [s for s in every if not s.stale], [s for s in every if s.stale]
    if every.unreachable:  # the states shown are the last SLURM gave: said once, before them
        say(err_console, "warning:", "yellow", every.unreachable)
    if as_json:
        typer.echo(json.dumps([s.to_json() for s in every], indent=2, default=str))
        return
    console.print(_states_table(f"{name}: {state_counts(states)}", states))
    if stale:
        console.print(_states_table(f"stale: {len(stale)} run(s) of earlier versions of the sweep file "
                                    f"(not counted, not in the report): {state_counts(stale)}", stale), style="dim")


def cancel(sweep: Annotated[str, typer.Argument(help="Sweep name.")], *, workdir: Workdir = None) -> None:
    """Cancel every job of a sweep; nothing is left running."""
    from cancelctl.launch import cancel_sweep

    cancelled = cancel_sweep(workdir_path(workdir), sweep)
    console.print(f"{sweep}: cancelled {len(cancelled)} jobs" + (f" ({', '.join(cancelled)})" if cancelled else ""))
