"""What every verb module of the CLI shares: the consoles (wide when piped), the `--workdir`
option, and the one-screen failure messages with their exit codes (2 bad input, 1 runtime)."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.text import Text

from cancelctl.errors import SpecError, WorkdirStateError
from cancelctl.runstate import state_counts  # noqa: F401 - the verbs' one way to count states

# Piped output (CI logs, `| less`) gets a wide console instead of rich's 80-column default.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
console = Console(width=_WIDTH)
err_console = Console(stderr=True, width=_WIDTH)

DEFAULT_WORKDIR = Path(".cancelctl")
WorkdirOpt = typer.Option(
    None, "--workdir", "-w", help="Work dir (manifests, run folders, sqlite MLflow). Default: $CANCELCTL_WORKDIR or ./.cancelctl"
)


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
    """Bad input (SpecError): exit 2; a work dir that cannot be read or written: exit 1, one screen."""
    if isinstance(exc, SpecError):
        fail_input(exc)
    if isinstance(exc, OSError):
        from cancelctl.workdir import os_error_message

        exc = os_error_message(exc)
    say(err_console, "error:", "bold red", exc)
    raise typer.Exit(1)


def load_or_exit(path: Path, allow_unmatched: bool = False):
    from cancelctl.spec.expand import load_sweep

    try:
        return load_sweep(path, allow_unmatched=allow_unmatched)
    except (SpecError, WorkdirStateError, OSError) as exc:
        fail(exc)
