"""The lazy command group: a command's module is imported only when that command runs, so
`envbuild --help` (and `envbuild matrix --help`) start without jinja2, tomlkit, docker, pynvml
or torch, and one broken command module cannot break another.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import click

CommandTable = Mapping[str, tuple[str, str]]
"""name -> (module exposing `command`, one-line help). Help is kept here so listing needs no
imports."""


def no_such_command(ctx: click.Context, name: str, known: Iterable[str]) -> click.UsageError:
    """The "No such command" error with the closest names (Click's own suggestions read
    `self.commands`, which lazy groups leave empty)."""
    import difflib

    close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
    message = f"No such command {name!r}."
    if close:
        message += " Did you mean " + " or ".join(repr(c) for c in close) + "?"
    return click.UsageError(message, ctx=ctx)


class LazyGroup(click.Group):
    """A group whose subcommands are named in `table` and imported on use."""

    def __init__(self, *args: Any, table: CommandTable, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.table = table

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.table)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = self.table.get(cmd_name)
        if entry is None:
            return None
        if ctx.resilient_parsing or "--help" in sys.argv[1:2]:
            # `envbuild --help` lists commands without importing them.
            return click.Command(cmd_name, help=entry[1], short_help=entry[1])
        command: click.Command = importlib.import_module(entry[0]).command
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in self.table:
            raise no_such_command(ctx, name, self.table)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, self.table[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
