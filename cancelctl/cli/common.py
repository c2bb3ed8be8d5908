"""What every verb module of the CLI shares: the consoles (wide when piped), the `--workdir`
option, and the one handler that turns the project's errors into a one-screen message and an
exit code (2 bad input, 1 runtime): `VerbGroup`, the Typer group every verb runs under."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

from cancelctl.errors import CancelctlError, SpecError, os_error_message
from cancelctl.runstate import state_counts  # noqa: F401 - the verbs' one way to count states

# Piped output (CI logs, `| less`) gets a wide console instead of rich's 80-column default.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
console = Console(width=_WIDTH)
err_console = Console(stderr=True, width=_WIDTH)

DEFAULT_WORKDIR = Path(".cancelctl")
Workdir = Annotated[Optional[Path], typer.Option(
    "--workdir", "-w", help="Work dir (manifests, run folders, sqlite MLflow). Default: $CANCELCTL_WORKDIR or ./.cancelctl"
)]
SweepFile = Annotated[Path, typer.Argument(help="Sweep file.")]
LatestSweep = Annotated[Optional[str], typer.Argument(help="Sweep name (default: the latest).")]
AllowUnmatched = Annotated[bool, typer.Option("--allow-unmatched", help="Accept arms that are not compute-matched.")]


def _registered_executor(value: str | None) -> str | None:
    """`--executor`'s check: a registered executor's name (the registry is open: an extension's
    executor registered after this module was imported counts), else typer's bad-parameter screen,
    exit 2, naming the known ones."""
    from cancelctl.spec.executors import executor_names, expected_executors

    if value is not None and value not in executor_names():
        raise typer.BadParameter(f"{value!r}: expected {expected_executors()}")
    return value


def executor_option(help: str) -> Any:
    """`--executor NAME`: its choices listed in --help (the registered ones), any other refused."""
    from cancelctl.spec.executors import executor_names

    return typer.Option("--executor", "-e", metavar="<" + "|".join(executor_names()) + ">", callback=_registered_executor, help=help)




def finite(value: float | None) -> float | None:
    """Callback of every float option: `nan` and `inf` parse as floats but mean nothing here."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value}: expected a finite number")
    return value


def workdir_path(workdir: Optional[Path]) -> Path:
    return (workdir or Path(os.environ.get("CANCELCTL_WORKDIR", DEFAULT_WORKDIR))).resolve()


def say(out: Console, label: str, style: str, text: object) -> None:
    """`label` in `style`, then `text` exactly as it is: a message quotes paths, names and errors,
    whose `[...]` must never be read as rich markup (nor the label's markup printed literally)."""
    out.print(Text.assemble((label, style), " ", str(text)), highlight=False, soft_wrap=True)


def fail_input(exc: SpecError, file: str | None = None) -> None:
    title = f"{file}: {exc.title}" if file else exc.title
    say(err_console, "error:", "bold red", title)
    for line in exc.render().splitlines():
        err_console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(2)


def fail(exc: Exception) -> None:
    """Bad input (SpecError): exit 2; a runtime failure (the scheduler, the work dir, the tracking
    store, an OS error): exit 1 — one screen, the message itself, never only a class name."""
    if isinstance(exc, SpecError):
        fail_input(exc)
    say(err_console, "error:", "bold red", failure_message(exc))
    raise typer.Exit(getattr(exc, "exit_code", 1))


def failure_message(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return os_error_message(exc)
    return str(exc) or type(exc).__name__


# What the one handler turns into a screen: the project's errors and the OS's (a work dir file, a
# lock held too long, a network that is not there). Anything else is a bug and keeps its traceback.
HANDLED = (SpecError, CancelctlError, OSError)


class VerbGroup(TyperGroup):
    """The CLI's one error path (as fastapi-cli's): every verb, and every verb of a sub-app, runs
    inside this group's `invoke`, so a handled error raised anywhere below a verb becomes its
    screen and exit code here, and the verbs hold no copies of this `except`."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except HANDLED as exc:
            fail(exc)


def load_sweep_file(path: Path, allow_unmatched: bool = False):
    """The sweep file planned (spec.expand imported on use: `--help` stays fast); a bad one is the
    one handler's (exit 2, file:line)."""
    from cancelctl.spec.expand import load_sweep

    return load_sweep(path, allow_unmatched=allow_unmatched)
