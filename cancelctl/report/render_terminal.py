"""The report on a rich console: summary, each shown table with its notes under it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cancelctl.report.formatting import header_lines
from cancelctl.report.prepared import NOT_MATCHED, Report

if TYPE_CHECKING:
    from rich.console import Console


def print_report(report: Report, console: Console) -> None:
    """The tables on a rich console, each with its notes under it."""
    from rich.table import Table

    console.rule(f"[bold]Sweep report: {report.sweep}")
    for line in header_lines(report):
        console.print(line.replace("**", ""), highlight=False, markup=False)
    for table in report.tables:
        if not table.shown:
            continue
        rich_table = Table(title=table.title, title_justify="left", show_lines=False)
        for column in table.display.columns:
            rich_table.add_column(str(column), overflow="fold")
        for row in table.display.itertuples(index=False):
            rich_table.add_row(*(str(v) for v in row))
        if not table.display.empty:
            console.print(rich_table)
        else:
            console.print(f"[bold]{table.title}[/]", highlight=False)
        for note in table.notes:
            style = "bold red" if NOT_MATCHED in note else "dim"
            console.print(note, style=style, highlight=False, markup=False)
    console.print(f"written: {report.out_dir}/report.md, report.html, tables/*.csv|json", highlight=False, markup=False)
