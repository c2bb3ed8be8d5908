"""`cancelctl` command line: each verb is a thin function over a library call, in one module per group
of verbs; this module makes the Typer app and registers them, in the order `cancelctl --help` lists them.

    inspecting   validate, plan, schema, render, smoke   what a sweep file says; `smoke` tries it on CPU
    running      sweep, watch, status, cancel            launch, follow, stop
    results      list, logs, ui, report, sync            what a work dir holds and what it found
    data         data list, data prepare                 a sub-app: datasets in verl's parquet format
    models       model list, model prepare               a sub-app: pretrained models as HF folders
    bench        bench losses                            a sub-app
    common       the consoles, --workdir, and the one error handler (`VerbGroup`)

Exit codes: 0 ok, 1 runtime failure, 2 bad input (spec or arguments) with a one-screen message: the
project's errors and the OS's are turned into that screen in one place, `common.VerbGroup.invoke`,
which every verb (sub-apps' included) runs inside.
Heavy imports (torch, mlflow, verl) happen inside the verbs that need them, so `validate` and
`plan` stay fast.
"""

from __future__ import annotations

import typer

from cancelctl.cli import bench, data, inspecting, models, results, running
from cancelctl.cli.common import VerbGroup

app = typer.Typer(
    cls=VerbGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Run and compare group-based RL ablations (GRPO, GSPO, DFPO, ...) on SLURM or the CPU lab.",
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"cancelctl {version('cancelctl')}")
        except PackageNotFoundError:
            typer.echo("cancelctl (not installed: no version)")
        raise typer.Exit(0)


@app.callback()
def _main_options(
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Run and compare group-based RL ablations (GRPO, GSPO, DFPO, ...) on SLURM or the CPU lab."""


# The verbs, in the order `cancelctl --help` lists them (a group's sub-app: `add_typer`).
VERBS = (
    ("validate", inspecting.validate), ("plan", inspecting.plan), ("schema", inspecting.schema),
    ("render", inspecting.render), ("smoke", inspecting.smoke),
    ("sweep", running.sweep), ("watch", running.watch_sweep), ("status", running.status), ("cancel", running.cancel),
    ("list", results.list_), ("logs", results.logs), ("ui", results.ui), ("report", results.report),
    ("sync", results.sync),
)
for name, verb in VERBS:
    app.command(name)(verb)
app.add_typer(data.app, name="data")
app.add_typer(models.app, name="model")
app.add_typer(bench.app, name="bench")


def main() -> None:  # console script
    app()
