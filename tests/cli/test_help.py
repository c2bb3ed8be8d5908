"""Every verb's --help: a flag that takes no value shows none (typer 0.29 prints `<bool>` after every
flag, its own --help included: pyproject keeps typer below it)."""

from __future__ import annotations

import click
import typer.main
from typer.testing import CliRunner

from cancelctl.cli import app

runner = CliRunner()


def command_paths(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [path]
    for name, sub in getattr(command, "commands", {}).items():
        paths += command_paths(sub, (*path, name))
    return paths


def test_no_flag_shows_a_value_in_any_help():
    paths = command_paths(typer.main.get_command(app))
    assert len(paths) > 15  # every verb and group, the app itself
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, (path, result.output)
        assert "--help" in result.output and "<bool>" not in result.output, (path, result.output)
