"""`cancelctl report SWEEP` as one library call: find the sweep in the work dir (its name, baseline arm
and MLflow store as recorded at launch), collect its runs from MLflow (+ run folders), then
`build_report`. The CLI-facing orchestration; the report itself is `cancelctl.report.build`."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from cancelctl.errors import SpecError
from cancelctl.report.build import build_report, default_report_dir


def report_sweep(
    workdir: Path,
    sweep: str | None,
    *,
    baseline: str | None = None,
    threshold: float | None = None,
    compute: str = "tokens",
    metric: str = "critic/score/mean",
    out: Path | None = None,
    allow_unmatched: bool = False,
    uri: str | None = None,
    console: Console | None = None,
    claims_only: bool = False,
    include_stopped: bool = False,
):
    from cancelctl.report.alerts import read_sweep_alerts
    from cancelctl.tracking import collect, resolve_tracking_uri

    sweep = sweep or latest_sweep_name(workdir)
    baseline = baseline or sweep_baseline(workdir, sweep)
    store_uri, experiment = sweep_tracking_target(workdir, sweep)
    uri = uri or store_uri or resolve_tracking_uri(None, workdir)
    runs, metrics = collect(uri, experiment, workdir)
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
        claims=sweep_claims(workdir, sweep),
        claims_only=claims_only,
        alerts=read_sweep_alerts(workdir, sweep),
        include_stopped=include_stopped,
    )


def sweep_baseline(workdir: Path, sweep: str) -> str:
    """The `baseline` arm of the sweep file, as recorded when the sweep was launched."""
    from cancelctl.workdir import sweep_paths

    store = sweep_paths(workdir, sweep).store
    manifest = store.load() if store.exists() else None
    if manifest is None or not manifest.baseline:
        arms = sorted({entry.arm for entry in manifest.runs.values()}) if manifest is not None else []
        known = f" (arms: {', '.join(arms)})" if arms else ""
        raise SpecError(f"sweep {sweep!r} names no baseline arm: pass --baseline ARM{known}")
    return manifest.baseline


def sweep_claims(workdir: Path, sweep: str) -> list:
    """The `claims:` of the sweep file as it is now (the manifest records its path); none when the file
    is gone or no longer loads (the rest of the report does not depend on it)."""
    from cancelctl.plan import load_sweep
    from cancelctl.workdir import sweep_paths

    store = sweep_paths(workdir, sweep).store
    manifest = store.load() if store.exists() else None
    if manifest is None or not manifest.file or not Path(manifest.file).is_file():
        return []
    try:
        return list(load_sweep(manifest.file, allow_unmatched=True).spec.claims)
    except SpecError:
        return []


def latest_sweep_name(workdir: Path) -> str:
    from cancelctl.workdir import latest_sweep

    name = latest_sweep(workdir)
    if name is None:
        raise SpecError(f"no sweep has been run in {workdir} (run `cancelctl sweep FILE` first, or pass SWEEP)")
    return name


def sweep_tracking_target(workdir: Path, sweep: str) -> tuple[str | None, str]:
    """(MLflow URI, experiment) the sweep's runs log to, as recorded in their run.json at launch."""
    from cancelctl.workdir import sweep_run_records

    for record in sweep_run_records(workdir, sweep):
        return record.get("tracking_uri"), record.get("experiment") or sweep
    return None, sweep
