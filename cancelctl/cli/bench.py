"""The `bench` group: benchmarks that print ratios against an in-run baseline."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from cancelctl.cli.common import console

app = typer.Typer(no_args_is_help=True, help="Benchmarks that print ratios against an in-run baseline.")


# where the losses run (the first CUDA device: torch's default)
Device = Literal["cpu", "cuda"]


@app.command("losses")
def bench_losses(
    *,
    device: Annotated[Device, typer.Option("--device", help="Where the losses run.")] = "cpu",
    rows: Annotated[int, typer.Option("--rows", help="Rows (responses) of the batch: a multiple of --group.")] = 256,
    tokens: Annotated[int, typer.Option("--tokens", help="Tokens per response.")] = 1024,
    group: Annotated[int, typer.Option("--group", help="Responses per prompt (G).")] = 8,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed repetitions of each case.")] = 30,
    verl: Annotated[bool, typer.Option("--verl/--no-verl", help="Compare with verl's gspo/vanilla when installed.")] = True,
) -> None:
    """fwd+bwd of every loss, wrapper and DFPO transform as ratios measured in the same run."""
    from cancelctl.bench.losses import loss_benchmark_table, run_loss_benchmark

    # an option it cannot benchmark (--rows not a multiple of --group, no CUDA here): ArgumentError, exit 2
    result = run_loss_benchmark(device, rows, tokens, group, repeats, include_verl=verl)
    console.print(loss_benchmark_table(result, title=f"losses: {rows} rows x {tokens} tokens, G={group}, {device}"))
    missed = [r["name"] for r in result if r["ok"] is False]
    console.print("all targets met" if not missed else f"[bold red]targets missed:[/] {', '.join(missed)}")
