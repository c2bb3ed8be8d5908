"""The report as one self-contained HTML file: inline CSS, plots as base64 PNG, no external assets
(it must open from a cluster's scratch dir, an email attachment or a CI artifact)."""

from __future__ import annotations

import base64
from html import escape

import pandas as pd

from cancelctl.report.formatting import header_lines
from cancelctl.report.prepared import NOT_MATCHED, Report

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto;
       max-width: 1700px; padding: 0 1.5em; color: #1d2330; }
h1 { font-size: 1.6em; margin-bottom: .2em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #d5d9e0; padding-bottom: .2em; }
ul.summary { padding-left: 1.2em; color: #384152; }
.banner { background: #fde8e8; border: 2px solid #c62828; color: #8e1b1b; padding: .8em 1em;
          font-weight: 600; border-radius: 4px; margin: 1em 0; }
.banner ul { font-weight: 400; margin: .4em 0 0; }
p.note { color: #5b6475; margin: .3em 0; font-size: .92em; }
p.note.unmatched { color: #b71c1c; font-weight: 600; }
table { border-collapse: collapse; margin: .6em 0 1em; font-size: .92em; }
th, td { border: 1px solid #d5d9e0; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #eef1f5; }
tr:nth-child(even) td { background: #f8f9fb; }
td.num { font-variant-numeric: tabular-nums; white-space: nowrap; }
td.text { min-width: 14em; max-width: 30em; }
.table-scroll { max-width: 100%; overflow-x: auto; }
img { max-width: 100%; height: auto; border: 1px solid #e3e6eb; margin: .5em 0 1em; }
footer { margin-top: 3em; color: #8a92a3; font-size: .85em; }
"""


NOWRAP_CHARS = 40  # cells up to this long (numbers, intervals, names) keep one line; longer prose wraps


def html_table(frame: pd.DataFrame) -> str:
    """A table in its own horizontal scroll box: a wide one (the claims table) scrolls inside the page
    instead of running off its right edge."""
    head = "".join(f"<th>{escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for row in frame.itertuples(index=False):
        cells = "".join(f'<td class="{"num" if len(str(v)) <= NOWRAP_CHARS else "text"}">{escape(str(v))}</td>' for v in row)
        rows.append(f"<tr>{cells}</tr>")
    return f'<div class="table-scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def embedded_png(path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{escape(path.stem)}" src="data:image/png;base64,{data}">'


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>cancelctl report: {escape(report.sweep)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>Sweep report: {escape(report.sweep)}</h1>",
    ]
    if not report.compute_matched:
        items = "".join(f"<li>{escape(str(v))}</li>" for v in report.violations)
        parts.append(f'<div class="banner">⚠ {NOT_MATCHED} — reported with --allow-unmatched<ul>{items}</ul></div>')
    summary = "".join(f"<li>{escape(line.replace('**', ''))}</li>" for line in header_lines(report))
    parts.append(f'<ul class="summary">{summary}</ul>')
    for table in report.tables:
        if not table.shown:
            continue
        parts.append(f"<h2>{escape(table.title)}</h2>")
        for note in table.notes:
            css = "note unmatched" if NOT_MATCHED in note else "note"
            parts.append(f'<p class="{css}">{escape(note)}</p>')
        if not table.display.empty:
            parts.append(html_table(table.display))
        parts += [embedded_png(report.plots[name]) for name in table.plots]
    parts.append("<footer>cancelctl report · tables as CSV/JSON in tables/ · statistics: cancelctl.analysis</footer>")
    parts.append("</body></html>")
    return "\n".join(parts)
