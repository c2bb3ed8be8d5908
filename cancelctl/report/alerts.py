"""What the in-job monitor (`cancelctl.jobs.monitor`) left in the run folders, for the report: every alert
per run (the "Alerts" table), and the runs a `stop` rule ended — kept out of the compute-matched
tables unless asked, since a run stopped early has not spent the compute its arm is compared at.
The claims use every run, stopped ones included: a stop is an outcome (`cancelctl.stats.outcomes`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from cancelctl.report.prepared import ReportTable
from cancelctl.stats.verdict_types import Stop

ALERT_COLUMNS = ["run_id", "name", "arm", "seed", "step", "rule", "action", "metric", "value", "threshold", "message"]


@dataclass
class SweepAlerts:
    alerts: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ALERT_COLUMNS))
    stops: dict[str, Stop] = field(default_factory=dict)  # run id -> the rule and step that stopped it

    @property
    def stopped(self) -> dict[str, str]:
        """run id -> "<rule> at step N", as the notes say it."""
        return {run_id: f"{stop.rule} at step {stop.step}" for run_id, stop in self.stops.items()}


def read_sweep_alerts(workdir: Path, sweep: str) -> SweepAlerts:
    """alerts.jsonl and stopped.json of every run folder of the sweep (through cancelctl.workdir)."""
    from cancelctl.jobs.monitor import read_alerts, read_stop
    from cancelctl.workdir import sweep_run_folders

    rows, stops = [], {}
    for record, folder in sweep_run_folders(workdir, sweep):
        run = record.get("run") or {}
        run_id = str(record.get("run_id") or run.get("run_id") or folder.path.name)
        name, arm, seed = run.get("name") or folder.path.name, run.get("arm", ""), run.get("seed")
        for alert in read_alerts(folder.path):
            rows.append({"run_id": run_id, "name": name, "arm": arm, "seed": seed, **alert.to_json()})
        stop = read_stop(folder.path)
        if stop is not None and folder.result.exists():  # the job ended the run: it is stopped
            stops[run_id] = Stop(stop.rule, stop.step)
    frame = pd.DataFrame(rows, columns=ALERT_COLUMNS) if rows else pd.DataFrame(columns=ALERT_COLUMNS)
    return SweepAlerts(frame, stops)


def leave_out_stopped(
    runs: pd.DataFrame, stopped: Mapping[str, str], include_stopped: bool
) -> tuple[pd.DataFrame, list[str]]:
    """`runs` without those a monitor rule stopped (unless `include_stopped`), and a note saying so."""
    hit = runs["run_id"].astype(str).isin(list(stopped)) if stopped else pd.Series(False, index=runs.index)
    if not hit.any():
        return runs, []
    names = [f"{row['name'] if pd.notna(row.get('name')) else row['run_id']} ({stopped[str(row['run_id'])]})"
             for _, row in runs.loc[hit].iterrows()]
    shown = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
    if include_stopped:
        return runs, [f"{len(names)} run(s) stopped by a monitor rule are included (include_stopped): {shown}; "
                      "their compute ends at the stop."]
    return runs.loc[~hit], [f"{len(names)} run(s) stopped by a monitor rule are left out of the compute-matched "
                            f"tables: {shown} — pass --include-stopped to use them. The claims use every run, "
                            "stopped ones included (a stop is an outcome; each claim says what it did with them)."]


def alerts_table(alerts: pd.DataFrame) -> ReportTable:
    """One row per alert raised in the sweep's runs, by run then step."""
    data = alerts.sort_values(["name", "step", "rule"], kind="stable").reset_index(drop=True) if not alerts.empty else alerts
    display = pd.DataFrame({
        "run": data["name"].astype(str),
        "step": data["step"].astype(str),
        "rule": data["rule"].astype(str),
        "action": data["action"].astype(str),
        "metric": data["metric"].astype(str),
        "message": data["message"].astype(str),
    }) if not data.empty else pd.DataFrame()
    notes = [] if not data.empty else ["no monitor alerts in this sweep's run folders"]
    notes.append("alerts raised inside the jobs by the spec's `monitor:` rules (alerts.jsonl of each run folder); "
                 "a `stop` ended its run at that step, checkpoint kept.")
    return ReportTable("alerts", "Alerts", data, display, notes)
