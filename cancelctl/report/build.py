"""`build_report`: the collected frames in, the report folder out (model → tables → plots → files).

Writes `report.md`, a self-contained `report.html`, every table as CSV and JSON (`tables/`) and the
plots (`plots/`) into `out_dir`; prints the tables to a rich console when one is given.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from cancelctl.errors import ArgumentError, SpecError
from cancelctl.report.alerts import SweepAlerts, alerts_table, leave_out_stopped
from cancelctl.report.claims import claims_notes, verdict_rows, verdicts_as_records
from cancelctl.report.model import (
    CANNOT,
    REWARD_KEY,
    ComputeAxis,
    Report,
    ReportTable,
    UnmatchedArmsError,
    prepare_sweep,
)
from cancelctl.report.plots import attach_plots, draw_plots
from cancelctl.report.render_data import write_table_files
from cancelctl.report.render_html import render_html
from cancelctl.report.render_markdown import render_markdown
from cancelctl.report.render_terminal import print_report
from cancelctl.report.screening import ShortRunsError, rejected_table, screen_points
from cancelctl.report.sequential_claims import sequential_claims_table, sequential_verdicts
from cancelctl.report.tables import build_tables
from cancelctl.report.thresholds import check_threshold, default_kappa
from cancelctl.stats import compute_match, verdicts
from cancelctl.stats.frames import COMPUTE_KEYS

if TYPE_CHECKING:
    from rich.console import Console

    from cancelctl.seed_rounds import SeedRounds
    from cancelctl.spec.claims import ClaimSpec


def build_report(
    runs: pd.DataFrame,
    metrics: pd.DataFrame,
    *,
    sweep: str,
    baseline: str,
    threshold: float | None = None,
    compute: ComputeAxis = "tokens",
    metric: str = REWARD_KEY,
    out_dir: Path,
    allow_unmatched: bool = False,
    console: Console | None = None,
    smooth_window: int = 1,
    token_tol: float = 0.10,
    include_unfinished: bool = False,
    plots: bool = True,
    claims: Sequence[ClaimSpec] = (),
    claims_only: bool = False,
    notes: Sequence[str] = (),
    alerts: SweepAlerts | None = None,
    include_stopped: bool = False,
    seed_rounds: SeedRounds | None = None,
    rules_off: Mapping[str, Collection[str]] | None = None,
) -> Report:
    """Build the sweep report and write it to `out_dir` (the report folder itself, e.g.
    results/<sweep>; see `default_report_dir`) — unless `claims_only`.

    Raises UnmatchedArmsError (exit 2) when arms of a group differ in logged compute, unless
    `allow_unmatched`; then every table says which groups are not matched. Raises SpecError on bad
    arguments (unknown baseline, compute axis). `threshold` is κ for Compute@Reward and steps to
    threshold; None picks `default_kappa` and the report states it. Only FINISHED runs are used
    unless `include_unfinished`. `console`: a rich Console to print the tables on, or None.
    `claims`: the sweep file's claims, judged per comparison group into the "claims" table
    (`cancelctl.stats.verdicts`); `claims_only` prints only that table and writes nothing: the report
    already on disk (report.md, report.html, tables/, plots/) stays as the last full report left it.
    `seed_rounds`: the looks of a sweep run until decided (`sweep --until-decided`): its claims are then
    judged at every look by the e-process (`cancelctl.report.sequential_claims`).
    `alerts`: the monitor's alerts and stops from the run folders (`read_sweep_alerts`): an "Alerts"
    table, and runs a rule stopped left out of the tables unless `include_stopped` (a note says so).
    `rules_off`: arm -> the monitor rules that are off in its runs (`spec.claims.rules_off_by_arm`): an
    outcome claim on one of them says it cannot be judged.
    Points that cannot be right (non-finite, outside the run's budget) are rejected and listed in a
    "Rejected points" table; finished runs whose points end before their budget are left out unless
    `include_unfinished` (`cancelctl.report.screening`).
    """
    if compute not in COMPUTE_KEYS:
        raise ArgumentError(f"--compute must be one of {', '.join(COMPUTE_KEYS)}, got {compute!r}")
    if smooth_window < 1:
        raise SpecError(f"smooth_window must be >= 1, got {smooth_window}", title=CANNOT)
    check_metric(metric, metrics)
    stops = alerts.stops if alerts is not None else {}
    # a run a rule stopped ends early on purpose: never "short"; the claims use it (a stop is an
    # outcome), the compute-matched tables only with include_stopped
    screened = screen_points(runs, metrics, include_short=include_unfinished, stops=stops)
    table_runs, stopped_notes = leave_out_stopped(screened.runs, alerts.stopped if alerts is not None else {}, include_stopped)
    try:
        prepared, prepare_notes = prepare_sweep(table_runs, screened.metrics, baseline, include_unfinished)
    except SpecError as exc:
        if not screened.short:
            raise
        raise ShortRunsError(exc, screened) from None
    notes = [*notes, *stopped_notes, *screened.notes, *prepare_notes]
    violations = compute_match.check_compute_matched(prepared.runs.reset_index(drop=True), prepared.by_key, tol=token_tol)
    if violations and not allow_unmatched:
        raise UnmatchedArmsError(violations)

    if threshold is None:
        kappa, kappa_note = default_kappa(prepared, metric)
    else:
        check_threshold(float(threshold), prepared, metric)
        kappa, kappa_note = float(threshold), f"κ = {threshold:.4g} (given)"
    tables = build_tables(
        prepared, violations, metric=metric, compute=compute, kappa=kappa, smooth_window=smooth_window,
        token_tol=token_tol,
    )
    if alerts is not None:
        tables.append(alerts_table(alerts.alerts))
    if not screened.rejected.empty:
        tables.append(rejected_table(screened.rejected))
    if len(table_runs) < len(screened.runs):  # said on every table that leaves them out, not only once above
        left_out = len(screened.runs) - len(table_runs)
        for table in tables:
            if table.name not in ("alerts", "rejected_points"):
                table.notes.append(f"without the {left_out} run(s) a monitor rule stopped (--include-stopped uses "
                                   "them here; the claims use them)")
    if claims:
        judged_on = prepared
        if len(table_runs) < len(screened.runs):  # the claims see every run, stopped ones included
            judged_on, _ = prepare_sweep(screened.runs, screened.metrics, baseline, include_unfinished)
        if seed_rounds is not None:  # run until decided: every claim at every look, by the e-process
            judged = sequential_verdicts(judged_on, claims, seed_rounds, threshold=threshold, metric=metric,
                                         allow_unmatched=allow_unmatched, token_tol=token_tol, alerts=alerts,
                                         rules_off=rules_off)
            tables.insert(0, sequential_claims_table(judged, seed_rounds))
        else:
            tables.insert(0, claims_table(judged_on, claims, kappa, allow_unmatched, token_tol, alerts, rules_off))
        if claims_only:
            for table in tables[1:]:
                table.shown = False
    report = Report(
        sweep=sweep, out_dir=Path(out_dir), baseline=baseline, metric=metric, compute=compute,
        kappa=kappa, kappa_note=kappa_note, violations=violations, tables=tables, notes=notes,
    )
    if not claims_only:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if plots:
            report.plots = draw_plots(prepared, report, out / "plots")
            attach_plots(report)
        write_report(report)
    if console is not None:
        print_report(report, console)
    return report


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


def claims_table(prepared, claims, kappa, allow_unmatched, token_tol, alerts=None, rules_off=None) -> ReportTable:
    """The sweep file's claims judged on this sweep, every run included (a run a monitor rule
    stopped too): supported / contradicted / inconclusive (or why not judged), effect with 95% CI,
    claim p and Holm-adjusted p, seeds needed; a note per claim that used or left out stopped runs."""
    judged = verdicts.judge_claims(
        claims, prepared.runs, prepared.by_key, kappa=kappa, groups=prepared.groups,
        allow_unmatched=allow_unmatched, token_tol=token_tol,
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
