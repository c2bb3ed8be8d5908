"""`cancelctl report` as one library call: collect a sweep from MLflow (+ run folders), then report."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from cancelctl.errors import SpecError


def report_sweep(
    workdir: Path,
    sweep: str | None,
    *,
    baseline: str,
    threshold: float | None = None,
    compute: str = "tokens",
    metric: str = "critic/score/mean",
    out: Path | None = None,
    allow_unmatched: bool = False,
    uri: str | None = None,
    console: Console | None = None,
):
    from cancelctl.report import build_report, default_report_dir
    from cancelctl.tracking import collect, resolve_tracking_uri

    sweep = sweep or latest_sweep_name(workdir)
    uri = uri or sweep_tracking_uri(workdir, sweep) or resolve_tracking_uri(None, workdir)
    runs, metrics = collect(uri, sweep, workdir)
    if runs.empty:
        raise SpecError(f"sweep {sweep!r}: no runs found in {uri} or under {workdir}")
    return build_report(
        runs,
        metrics,
        sweep=sweep,
        baseline=baseline,
        threshold=threshold,
        compute=compute,
        metric=metric,
        out_dir=out or default_report_dir(sweep),
        allow_unmatched=allow_unmatched,
        console=console,
    )


def latest_sweep_name(workdir: Path) -> str:
    from cancelctl.launch import latest_sweep

    name = latest_sweep(workdir)
    if name is None:
        raise SpecError(f"no sweep has been run in {workdir} (run `cancelctl sweep FILE` first, or pass SWEEP)")
    return name


def sweep_tracking_uri(workdir: Path, sweep: str) -> str | None:
    from cancelctl.launch import sweep_tracking_uri as uri_of

    return uri_of(workdir, sweep)
