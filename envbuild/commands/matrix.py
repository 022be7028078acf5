"""`envbuild matrix`: a group of subcommands over the compatibility matrix.

Subcommands are listed in SUBCOMMANDS and imported only when they run (like cli.py's
commands), so `envbuild matrix --help` stays light and one broken subcommand module cannot
break another.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import click

from envbuild import console

# name -> (module exposing `command`, one-line help). Add a subcommand with one line here.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "check": (
        "envbuild.commands.matrix",
        "Validate the matrix (and an overlay) strictly; exit 1 on any problem.",
    ),
    # `matrix refresh` (issue 10) lives in its own module:
    "refresh": (
        "envbuild.commands.matrix_refresh",
        "Read new releases from PyPI, the PyTorch index and the registry into the matrix.",
    ),
}


class _LazyMatrixGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = SUBCOMMANDS.get(cmd_name)
        if entry is None:
            return None
        if cmd_name == "check":
            return check
        sub: click.Command = importlib.import_module(entry[0]).command
        return sub

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        from envbuild.cli import no_such_command

        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in SUBCOMMANDS:
            raise no_such_command(ctx, name, SUBCOMMANDS)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)])


@click.group("matrix", cls=_LazyMatrixGroup)
def command() -> None:
    """Check or refresh the compatibility matrix (matrix/*.toml, see matrix/README.md)."""


@click.command("check")
@click.option(
    "--overlay",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="A folder of matrix files merged over the built-in ones (rows with the same key "
    "replace, new rows add). Default: $ENVBUILD_MATRIX_OVERLAY.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def check(ctx: click.Context, overlay: Path | None, as_json: bool) -> None:
    """Validate every matrix file strictly: unknown keys, wrong types, missing sources, bad
    versions, duplicate rows, dangling references and contradictions between files.

    Exit 0 with a one-line summary; exit 1 with "file: row: problem" lines; exit 2 when a
    file cannot be read or is not TOML.
    """
    from envbuild import api

    report = api.matrix_check(overlay=overlay)
    if as_json:
        console.emit_json(report.to_json())
    else:
        for text in report.problems:
            console.line(text)
        for text in report.warnings:
            console.warn(text)
        console.line(report.summary())
    if not report.ok:
        ctx.exit(1)
