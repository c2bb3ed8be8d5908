"""The `data` group: the papers' datasets and offline reasoning-gym sets in verl's parquet format."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from cancelctl.cli.common import console, err_console, fail_input
from cancelctl.errors import ArgumentError

app = typer.Typer(no_args_is_help=True, help="Datasets in verl's parquet format, and the rewards that score them.")


@app.command("list")
def data_list() -> None:
    """What `data prepare` can make: source, rows per file, the verifier that scores it."""
    from cancelctl.data import catalog

    table = Table(title="cancelctl data")
    for column in ("name", "source", "size", "verifier"):
        table.add_column(column)
    for item in catalog():
        table.add_row(item.name, item.source, item.size, item.verifier)
    console.print(table)


@app.command("prepare")
def data_prepare(
    names: list[str] = typer.Argument(..., help="Dataset names (see `cancelctl data list`)."),
    out: Path = typer.Option(Path("data"), "--out", help="Folder; each dataset goes to OUT/NAME/SPLIT.parquet."),
    seed: int = typer.Option(0, "--seed", help="Seed of a generated (reasoning-gym) set."),
    size: Optional[int] = typer.Option(None, "--size", min=1, help="Train rows of a generated set; first rows of a Hub set."),
) -> None:
    """Download or generate each dataset and write verl's RLHFDataset parquet (a second call does nothing)."""
    from cancelctl.data import ProgressEvent, UnknownDataset, prepare

    def progress(event: ProgressEvent) -> None:
        if event.stage in ("download", "generate"):  # the slow parts; each file's line follows below
            where = f" {event.split}" if event.split else ""
            err_console.print(f"{event.dataset}{where}: {event.stage}…", highlight=False)

    try:
        made = prepare(names, out, seed=seed, size=size, progress=progress)
    except UnknownDataset as exc:
        fail_input(ArgumentError(str(exc)))
    for dataset in made:
        rows = ", ".join(f"{split} {count:,}" for split, count in dataset.rows.items())
        state = "already there" if dataset.reused else "written"
        console.print(f"{dataset.name}: {rows} rows {state} in {dataset.folder}", highlight=False)
