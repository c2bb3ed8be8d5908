"""Every table as data: `tables/<name>.csv` (the numbers) and `tables/<name>.json` (title, notes,
compute-matched flag, rows), for notebooks and CI checks."""

from __future__ import annotations

import json
from pathlib import Path

from cancelctl.report.prepared import Report


def write_table_files(report: Report, tables_dir: Path) -> list[Path]:
    """Write each table's CSV and JSON into `tables_dir`; returns the paths written."""
    tables_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for table in report.tables:
        csv_path, json_path = tables_dir / f"{table.name}.csv", tables_dir / f"{table.name}.json"
        if table.data.columns.empty:  # a "not logged" section: no header to write
            csv_path.write_text("")
        else:
            table.data.to_csv(csv_path, index=False)
        rows = json.loads(table.data.to_json(orient="records")) if not table.data.empty else []
        payload = {"title": table.title, "notes": table.notes, "compute_matched": report.compute_matched, "rows": rows}
        json_path.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n")
        files += [csv_path, json_path]
    return files
