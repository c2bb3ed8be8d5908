"""The report as Markdown (`report.md`): summary, each shown table with its notes and plots."""

from __future__ import annotations

import pandas as pd

from cancelctl.report.formatting import header_lines
from cancelctl.report.prepared import NOT_MATCHED, Report


def _md_cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(_md_cell(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def render_markdown(report: Report) -> str:
    lines = [f"# Sweep report: {report.sweep}", ""]
    lines += [f"- {line}" for line in header_lines(report)] + [""]
    for table in report.tables:
        if not table.shown:
            continue
        lines += [f"## {table.title}", ""]
        lines += [f"- {'**' + note + '**' if NOT_MATCHED in note else note}" for note in table.notes]
        if table.notes:
            lines.append("")
        if not table.display.empty:
            lines += [markdown_table(table.display), ""]
        for plot in table.plots:
            lines += [f"![{plot}](plots/{report.plots[plot].name})", ""]
    return "\n".join(lines)
