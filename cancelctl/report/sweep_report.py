"""`cancelctl report SWEEP` as one library call: find the sweep in the work dir (its name, baseline arm
and MLflow store as recorded at launch), collect its runs from MLflow (+ run folders), then
`build_report`. The CLI-facing orchestration; the report itself is `cancelctl.report.build`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from cancelctl.errors import SpecError, UnmatchedArmsError
from cancelctl.report.build import CollectedSweep, build_report, default_report_dir
from cancelctl.report.options import ReportOptions
from cancelctl.report.screening import ShortRunsError
from cancelctl.stats.options import ComparisonOptions

if TYPE_CHECKING:
    from cancelctl.seed_rounds import SeedRounds
    from cancelctl.stats.sequential_verdicts import SequentialVerdict

NOT_RUN = "sweep not run yet"
ACTIVE_STATES = ("RUNNING", "SCHEDULED")


def report_sweep(
    workdir: Path,
    sweep: str | None,
    options: ReportOptions = ReportOptions(),
    *,
    out: Path | None = None,
    uri: str | None = None,
    console: Console | None = None,
):
    """The report of `sweep` (the latest when None) with `options` (the baseline, when they name none,
    is the sweep file's as launched). Runs still running are left out; the returned report lists them
    in `still_running` (empty with `include_unfinished`, which uses them)."""
    from cancelctl.report.alerts import read_sweep_alerts
    from cancelctl.tracking import normalize_tracking_uri, resolve_tracking_uri
    from cancelctl.tracking.uri import check_credentials
    from cancelctl.workdir import existing_sweep

    sweep = existing_sweep(workdir, sweep).sweep  # SweepNotFound: never run here (or not a sweep name)
    if options.baseline is None:
        options = replace(options, baseline=sweep_baseline(workdir, sweep))
    store_uri, experiment = sweep_tracking_target(workdir, sweep)
    uri = normalize_tracking_uri(uri) if uri else store_uri or resolve_tracking_uri(None, workdir)
    check_credentials(uri)  # a refused password is one line, not a report from the run folders alone
    runs, metrics, store_notes = collect_sweep(uri, experiment, workdir)
    if runs.empty:
        raise SpecError(f"sweep {sweep!r} has not run yet: no runs in {uri} or under {workdir}", title=NOT_RUN)
    planned, file_note = current_sweep(workdir, sweep)
    runs, metrics, stale_notes = only_current_runs(runs, metrics, planned)
    if runs.empty:
        raise SpecError(f"sweep {sweep!r}: none of the runs the sweep file plans now has run yet (cancelctl sweep FILE)",
                        title=NOT_RUN)
    still_running = still_running_runs(runs)
    damaged = damaged_metrics(workdir, sweep, set(runs["run_id"]))
    collected = CollectedSweep(
        sweep, runs, metrics, claims=list(planned.spec.claims) if planned is not None else [],
        notes=[*store_notes, *filter(None, [file_note]), *stale_notes, *damaged.values()],
        alerts=read_sweep_alerts(workdir, sweep),
        seed_rounds=sweep_seed_rounds(workdir, sweep), rules_off=planned_rules_off(planned),
    )
    try:
        report = build_report(collected, options, out_dir=out or default_report_dir(sweep), console=console)
    except (UnmatchedArmsError, ShortRunsError) as exc:
        if not damaged:
            raise
        raise SpecError(list(damaged.values()) + [str(i) for i in exc.issues],
                        title="metrics.jsonl of some runs is truncated: their logged compute looks short "
                              "(the run ran in full; its points after the cut are lost)") from None
    report.still_running = [] if options.include_unfinished else still_running
    return report


def damaged_metrics(workdir: Path, sweep: str, run_ids: set[str]) -> dict[str, str]:
    """run id -> why its metrics.jsonl is not whole (cut short), for the runs being reported."""
    from cancelctl.workdir import sweep_run_folders

    damaged = {}
    for record, folder in sweep_run_folders(workdir, sweep):
        why = folder.metrics_damage() if record.get("run_id") in run_ids else None
        if why:
            damaged[record["run_id"]] = f"{record.get('name', record['run_id'])}: {why}"
    return damaged


def still_running_runs(runs) -> list[str]:
    """Names of the runs that have not ended (their MLflow run RUNNING or SCHEDULED): a report now is
    a snapshot of a sweep in progress."""
    if "state" not in runs.columns:
        return []
    active = runs.loc[runs["state"].isin(ACTIVE_STATES)]
    return sorted(active["name"].fillna(active["run_id"]).astype(str))


def sweep_baseline(workdir: Path, sweep: str) -> str:
    """The `baseline` arm of the sweep file, as recorded when the sweep was launched."""
    from cancelctl.workdir import sweep_paths

    store = sweep_paths(workdir, sweep).store
    manifest = store.load() if store.exists() else None
    if manifest is None or not manifest.baseline:
        arms = sorted({entry.arm for entry in manifest.runs.values()}) if manifest is not None else []
        known = f" (arms: {', '.join(arms)})" if arms else ""
        rebuilt = manifest is not None and not manifest.file  # rebuilt from the run folders: no sweep file known
        hint = "; or run `cancelctl sweep FILE` once (it reruns nothing finished) to record the file's baseline" if rebuilt else ""
        raise SpecError(f"sweep {sweep!r} names no baseline arm: pass --baseline ARM{known}{hint}", title="cannot build the report")
    return manifest.baseline


def collect_sweep(uri: str, experiment: str, workdir: Path) -> tuple:
    """The sweep's runs from the tracking store and the run folders; when the store cannot be reached
    (a tracking server down), from the run folders alone, where every point is kept — with a note."""
    from cancelctl.tracking.collect import collect, collect_run_folders
    from cancelctl.tracking.uri import fast_fail_http, probe_store

    problem = probe_store(uri, write=False)  # a read-only store (an archive) is read as it is
    if problem is None:
        try:
            with fast_fail_http():
                conflicts: list[str] = []  # points the store and the run folders disagree on
                return (*collect(uri, experiment, workdir, notes=conflicts), conflicts)
        except Exception as exc:  # noqa: BLE001 - MlflowException, connection errors: the store, not the sweep
            problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    runs, metrics = collect_run_folders(uri, experiment, workdir)
    return runs, metrics, [f"tracking store {uri} unreachable ({problem}): reported from the run folders (metrics.jsonl)"]


def current_sweep(workdir: Path, sweep: str):
    """The sweep file as it is now (the manifest records its path), planned: the runs and claims the
    report is about; and None with why when the file is gone, no longer loads or now names another
    sweep (then every collected run counts and no claim is judged: the report says so)."""
    from cancelctl.spec.expand import load_sweep, with_seeds
    from cancelctl.workdir import sweep_paths

    store = sweep_paths(workdir, sweep).store
    manifest = store.load() if store.exists() else None
    if manifest is None or not manifest.file:  # rebuilt from the run folders: no file was ever known
        return None, None
    unjudged = ("its claims are not judged and every collected run counts (`cancelctl sweep FILE` records "
                "the file again and reruns nothing finished)")
    if not Path(manifest.file).is_file():
        return None, f"the sweep file {manifest.file} recorded at launch is gone: {unjudged}"
    try:
        planned = load_sweep(manifest.file, allow_unmatched=True)
        rounds = sweep_seed_rounds(workdir, sweep)
        if rounds is not None and planned.spec.name == sweep:  # the seeds `sweep --until-decided` added
            planned = with_seeds(planned, rounds.added())
    except SpecError as exc:
        rendered = exc.render().strip()
        why = rendered.splitlines()[0] if rendered else type(exc).__name__
        return None, f"the sweep file {manifest.file} no longer loads ({why}): {unjudged}"
    if planned.spec.name != sweep:
        return None, f"the sweep file {manifest.file} now names sweep {planned.spec.name!r}: {unjudged}"
    return planned, None


def planned_rules_off(planned) -> dict[str, set[str]]:
    """arm -> the monitor rules that are off in its planned runs (none known without the sweep file)."""
    from cancelctl.spec.claims import rules_off_by_arm

    return rules_off_by_arm((run.arm, run.spec.monitor) for run in planned.runs) if planned is not None else {}


def sweep_seed_rounds(workdir: Path, sweep: str):
    """The rounds of seeds `sweep --until-decided` recorded for `sweep` (None: it never ran so)."""
    from cancelctl.seed_rounds import load_seed_rounds
    from cancelctl.workdir import sweep_paths

    return load_seed_rounds(sweep_paths(workdir, sweep).seed_rounds)


def only_current_runs(runs, metrics, planned) -> tuple:
    """Keep the runs the sweep file plans now; runs of earlier versions (an edited arm, another file
    reusing the name) are stale: listed in a note, never averaged in."""
    if planned is None:
        return runs, metrics, []
    current = {run.run_id for run in planned.runs}
    keep = runs["run_id"].isin(current)
    stale = runs.loc[~keep]
    if stale.empty:
        return runs, metrics, []
    names = ", ".join(sorted(stale["name"].astype(str)))
    note = (
        f"{len(stale)} run(s) of earlier versions of {planned.file} left out as stale (not in the sweep file "
        f"as it is now): {names}"
    )
    return runs.loc[keep], metrics[metrics["run_id"].isin(current)], [note]


def sweep_tracking_target(workdir: Path, sweep: str) -> tuple[str | None, str]:
    """(MLflow URI, experiment) the sweep's runs log to, as recorded in their run.json at launch."""
    from cancelctl.tracking.runfiles import run_store_uri
    from cancelctl.workdir import sweep_run_folders

    for record, folder in sweep_run_folders(workdir, sweep):
        return run_store_uri(record, folder.path), record.get("experiment") or sweep
    return None, sweep


def judge_until_decided(
    workdir: Path, sweep: str, rounds: SeedRounds, compare: ComparisonOptions = ComparisonOptions()
) -> list[SequentialVerdict]:
    """The sequential verdicts of `sweep` at the looks of `rounds`, from its runs in the work dir
    (tracking store and run folders, as `report` collects them) and the sweep file's claims, the arms
    compared as `compare` says (the `sweep` verb's --allow-unmatched)."""
    from cancelctl.report.alerts import read_sweep_alerts
    from cancelctl.report.prepared import prepare_sweep
    from cancelctl.report.screening import screen_points
    from cancelctl.report.sequential_claims import sequential_verdicts
    from cancelctl.tracking import resolve_tracking_uri

    planned, _ = current_sweep(workdir, sweep)  # the sweep verb loaded the file just now
    if planned is None or not planned.spec.claims:
        return []
    store_uri, experiment = sweep_tracking_target(workdir, sweep)
    runs, metrics, _ = collect_sweep(store_uri or resolve_tracking_uri(None, workdir), experiment, workdir)
    runs, metrics, _ = only_current_runs(runs, metrics, planned)
    alerts = read_sweep_alerts(workdir, sweep)
    screened = screen_points(runs, metrics, stops=alerts.stops)
    baseline = planned.spec.baseline or sorted(screened.runs["arm"].astype(str).unique())[0]
    prepared, _ = prepare_sweep(screened.runs, screened.metrics, baseline, False)
    options = ReportOptions(baseline=baseline, compare=compare)
    return sequential_verdicts(prepared, planned.spec.claims, rounds, options, alerts=alerts,
                               rules_off=planned_rules_off(planned))
