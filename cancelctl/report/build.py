"""`build_report`: the collected sweep in, the report folder out — screen the points, the tables,
the claims, then the files (report.md, a self-contained report.html, every table as CSV and JSON under
`tables/`, the plots under `plots/`), printed to a rich console when one is given.

The settings are one frozen `ReportOptions` (`cancelctl.report.options`), built where the verb reads
its options; what the report is about is one `CollectedSweep`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from cancelctl.errors import ArgumentError, SpecError, UnmatchedArmsError
from cancelctl.report.alerts import SweepAlerts, alerts_table, leave_out_stopped
from cancelctl.report.claims import claims_notes, verdict_rows, verdicts_as_records
from cancelctl.report.prepared import UNMATCHED_LOGGED, PreparedSweep, Report, ReportTable, prepare_sweep
from cancelctl.report.options import ReportOptions
from cancelctl.report.plots import attach_plots, draw_plots
from cancelctl.report.render_data import write_table_files
from cancelctl.report.render_html import render_html
from cancelctl.report.render_markdown import render_markdown
from cancelctl.report.render_terminal import print_report
from cancelctl.report.screening import Screened, ShortRunsError, rejected_table, screen_points
from cancelctl.report.sequential_claims import sequential_claims_table, sequential_verdicts
from cancelctl.report.tables import build_tables
from cancelctl.report.thresholds import check_threshold, default_kappa
from cancelctl.stats import compute_match, hardware_match, verdicts
from cancelctl.stats.compute_match import ComputeViolation

if TYPE_CHECKING:
    from rich.console import Console

    from cancelctl.seed_rounds import SeedRounds
    from cancelctl.spec.claims import ClaimSpec


@dataclass(frozen=True)
class CollectedSweep:
    """What a report is about, as `cancelctl.report.sweep_report` collected it: the sweep's name, its
    runs and tidy metrics (`cancelctl.tracking.collect`), the sweep file's claims, notes on what the
    collection left out, the monitor's alerts and stops (`alerts.read_sweep_alerts`), the looks of a
    sweep run until decided (`sweep --until-decided`: its claims are then judged at every look by the
    e-process, `cancelctl.report.sequential_claims`) and, per arm, the monitor rules that are off in its
    runs (`spec.claims.rules_off_by_arm`: an outcome claim on one of them cannot be judged)."""

    name: str
    runs: pd.DataFrame
    metrics: pd.DataFrame
    claims: Sequence[ClaimSpec] = ()
    notes: Sequence[str] = ()
    alerts: SweepAlerts | None = None
    seed_rounds: SeedRounds | None = None
    rules_off: Mapping[str, Collection[str]] = field(default_factory=dict)


@dataclass
class _Kept:
    """The points a report may use: `screened` (every run, stopped ones too: the claims' runs), the
    runs of the compute-matched tables, those prepared, and the notes saying what was left out."""

    screened: Screened
    table_runs: pd.DataFrame
    prepared: PreparedSweep
    notes: list[str]

    @property
    def stopped_left_out(self) -> int:
        return len(self.screened.runs) - len(self.table_runs)


def build_report(
    sweep: CollectedSweep, options: ReportOptions, *, out_dir: Path, console: Console | None = None
) -> Report:
    """Build the sweep report and write it to `out_dir` (the report folder itself, e.g.
    results/<sweep>; see `default_report_dir`) — unless `options.claims_only`, which prints the claims
    table only and writes nothing (the report on disk stays as the last full report left it).

    Points that cannot be right (non-finite, outside the run's budget) are rejected and listed in a
    "Rejected points" table; finished runs whose points end before their budget are left out unless
    `include_unfinished` (`cancelctl.report.screening`); runs a monitor rule stopped are left out of
    the compute-matched tables unless `include_stopped` (a note says so), never out of the claims.
    Raises UnmatchedArmsError (exit 2) when arms of a group differ in logged compute or ran on
    different hardware (GPU kinds, CPU kernel levels: `stats.hardware_match`), unless
    `allow_unmatched`; then every table says which groups are not matched. Raises SpecError on bad
    input (unknown baseline, a --metric never logged, a κ outside every value).
    """
    if options.baseline is None:
        raise ArgumentError("no baseline arm: pass --baseline ARM", title="cannot build the report")
    check_metric(options.metric, sweep.metrics)
    kept = _screen(sweep, options)
    runs = kept.prepared.runs.reset_index(drop=True)
    violations = compute_match.check_compute_matched(runs, kept.prepared.by_key, tol=options.token_tol)
    violations += hardware_match.check_hardware_matched(runs)  # GPU kinds, CPU kernels
    if violations and not options.allow_unmatched:
        raise UnmatchedArmsError([str(v) for v in violations], title=UNMATCHED_LOGGED)
    kappa, kappa_note = _kappa(kept.prepared, options)
    tables = _tables(kept, violations, kappa, sweep.alerts, options)
    if sweep.claims:
        tables.insert(0, _claims_table(sweep, kept, kappa, options))
        if options.claims_only:
            for table in tables[1:]:
                table.shown = False
    report = Report(
        sweep=sweep.name, out_dir=Path(out_dir), baseline=options.baseline, metric=options.metric,
        compute=options.compute, kappa=kappa, kappa_note=kappa_note, violations=violations, tables=tables,
        notes=[*sweep.notes, *kept.notes],
    )
    if not options.claims_only:
        _write(report, kept.prepared, options.plots)
    if console is not None:
        print_report(report, console)
    return report


def _screen(sweep: CollectedSweep, options: ReportOptions) -> _Kept:
    """Screen the points, leave out the stopped runs the tables should not use, prepare the rest.
    A run a rule stopped ends early on purpose: never "short"; the claims use it (a stop is an
    outcome), the compute-matched tables only with include_stopped."""
    alerts = sweep.alerts
    screened = screen_points(sweep.runs, sweep.metrics, include_short=options.include_unfinished,
                             stops=alerts.stops if alerts is not None else {})
    table_runs, stopped_notes = leave_out_stopped(
        screened.runs, alerts.stopped if alerts is not None else {}, options.include_stopped)
    try:
        prepared, prepare_notes = prepare_sweep(table_runs, screened.metrics, options.baseline, options.include_unfinished)
    except SpecError as exc:
        if not screened.short:
            raise
        raise ShortRunsError(exc, screened) from None
    return _Kept(screened, table_runs, prepared, [*stopped_notes, *screened.notes, *prepare_notes])


def _kappa(prepared: PreparedSweep, options: ReportOptions) -> tuple[float | None, str]:
    """κ and the line stating it: the one given (checked against the values), else the default."""
    if options.kappa is None:
        return default_kappa(prepared, options.metric)
    check_threshold(float(options.kappa), prepared, options.metric)
    return float(options.kappa), f"κ = {options.kappa:.4g} (given)"


def _tables(
    kept: _Kept, violations: list[ComputeViolation], kappa: float | None, alerts: SweepAlerts | None,
    options: ReportOptions,
) -> list[ReportTable]:
    """The compute-matched tables, then the alerts and the rejected points; each table that leaves
    the stopped runs out says so (not only once above)."""
    tables = build_tables(
        kept.prepared, violations, metric=options.metric, compute=options.compute, kappa=kappa,
        smooth_window=options.smooth_window, token_tol=options.token_tol,
    )
    if alerts is not None:
        tables.append(alerts_table(alerts.alerts))
    if not kept.screened.rejected.empty:
        tables.append(rejected_table(kept.screened.rejected))
    if kept.stopped_left_out:
        for table in tables:
            if table.name not in ("alerts", "rejected_points"):
                table.notes.append(f"without the {kept.stopped_left_out} run(s) a monitor rule stopped "
                                   "(--include-stopped uses them here; the claims use them)")
    return tables


def _claims_table(sweep: CollectedSweep, kept: _Kept, kappa: float | None, options: ReportOptions) -> ReportTable:
    """The sweep file's claims on every run, stopped ones included: at every look by the e-process for
    a sweep run until decided, else once (`claims_table`)."""
    judged_on = kept.prepared
    if kept.stopped_left_out:
        judged_on, _ = prepare_sweep(kept.screened.runs, kept.screened.metrics, options.baseline,
                                     options.include_unfinished)
    if sweep.seed_rounds is not None:
        judged = sequential_verdicts(judged_on, sweep.claims, sweep.seed_rounds, options, alerts=sweep.alerts,
                                     rules_off=sweep.rules_off)
        return sequential_claims_table(judged, sweep.seed_rounds)
    return claims_table(judged_on, sweep.claims, kappa, options, sweep.alerts, sweep.rules_off)


def _write(report: Report, prepared: PreparedSweep, plots: bool) -> None:
    report.out_dir.mkdir(parents=True, exist_ok=True)
    if plots:
        report.plots = draw_plots(prepared, report, report.out_dir / "plots")
        attach_plots(report)
    write_report(report)


def check_metric(metric: str, metrics: pd.DataFrame) -> None:
    """A --metric the sweep never logged (a typo) is refused with the keys it did log, closest first."""
    import difflib

    known = sorted(metrics["key"].astype(str).unique()) if "key" in metrics.columns else []
    if metric in known or not known:
        return
    close = difflib.get_close_matches(metric, known, n=5, cutoff=0.5)
    shown = known[:80]
    raise ArgumentError(
        ([f"did you mean: {', '.join(close)}"] if close else [])
        + [f"known metrics ({len(known)}): {', '.join(shown)}{' ...' if len(known) > len(shown) else ''}"],
        title=f"--metric {metric!r}: not logged by any run of this sweep",
    )


def claims_table(
    prepared: PreparedSweep, claims: Sequence[ClaimSpec], kappa: float | None, options: ReportOptions,
    alerts: SweepAlerts | None = None, rules_off: Mapping[str, Collection[str]] | None = None,
) -> ReportTable:
    """The sweep file's claims judged on this sweep, every run included (a run a monitor rule
    stopped too): supported / contradicted / inconclusive (or why not judged), effect with 95% CI,
    claim p and Holm-adjusted p, seeds needed; a note per claim that used or left out stopped runs."""
    judged = verdicts.judge_claims(
        claims, prepared.runs, prepared.by_key, options.compare, kappa=kappa, groups=prepared.groups,
        alerts=alerts.alerts if alerts is not None else None, stops=alerts.stops if alerts is not None else None,
        rules_off=rules_off,
    )
    return ReportTable(
        "claims", "Claims", pd.DataFrame(verdicts_as_records(judged)),
        pd.DataFrame(verdict_rows(judged)), claims_notes(judged),
    )


def default_report_dir(sweep: str, root: Path = Path("results")) -> Path:
    return Path(root) / sweep


def write_report(report: Report) -> None:
    """tables/<name>.csv and .json, report.md, report.html in report.out_dir."""
    files = write_table_files(report, report.out_dir / "tables")
    md_path, html_path = report.out_dir / "report.md", report.out_dir / "report.html"
    md_path.write_text(render_markdown(report))
    html_path.write_text(render_html(report))
    report.files = files + [md_path, html_path] + list(report.plots.values())
