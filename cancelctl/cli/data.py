"""The `data` group: the papers' datasets and offline reasoning-gym sets in verl's parquet format."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from cancelctl.cli.common import console, err_console

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
    names: Annotated[list[str], typer.Argument(help="Dataset names (see `cancelctl data list`).")],
    *,
    out: Annotated[Path, typer.Option("--out", help="Folder; each dataset goes to OUT/NAME/SPLIT.parquet.")] = Path("data"),
    seed: Annotated[int, typer.Option("--seed", help="Seed of a generated (reasoning-gym) set.")] = 0,
    size: Annotated[Optional[int], typer.Option(
        "--size", min=1, help="Train rows of a generated set; first rows of a Hub set.")] = None,
) -> None:
    """Download or generate each dataset and write verl's RLHFDataset parquet (a second call does nothing)."""
    from cancelctl.data import ProgressEvent, prepare

    def progress(event: ProgressEvent) -> None:
        if event.stage in ("download", "generate"):  # the slow parts; each file's line follows below
            where = f" {event.split}" if event.split else ""
            err_console.print(f"{event.dataset}{where}: {event.stage}…", highlight=False)

    made = prepare(names, out, seed=seed, size=size, progress=progress)  # an unknown name: exit 2
    for dataset in made:
        rows = ", ".join(f"{split} {count:,}" for split, count in dataset.rows.items())
        state = "already there" if dataset.reused else "written"
        console.print(f"{dataset.name}: {rows} rows {state} in {dataset.folder}", highlight=False)
