"""`envbuild matrix`: a group of subcommands over the compatibility matrix.

Subcommands are listed in SUBCOMMANDS and imported only when they run (the same lazy group as
the top level, `envbuild.cli.lazy`), so `envbuild matrix --help` stays light and one
broken subcommand module cannot break another.
"""

from __future__ import annotations

import click

from envbuild.cli.lazy import CommandTable, LazyGroup
from envbuild.cli.options import help_epilog

# name -> (module exposing `command`, one-line help). Add a subcommand with one line here.
SUBCOMMANDS: CommandTable = {
    "check": (
        "envbuild.cli.commands.matrix_check",
        "Validate the matrix (and an overlay) strictly; exit 1 on any problem.",
    ),
    "refresh": (
        "envbuild.cli.commands.matrix_refresh",
        "Read new releases from PyPI, the PyTorch index and the registry into the matrix.",
    ),
}


@click.group(
    "matrix",
    cls=LazyGroup,
    table=SUBCOMMANDS,
    epilog=help_epilog(
        ["envbuild matrix check", "envbuild matrix refresh --dry-run"],
        [(0, "ok"), (1, "check found problems"), (2, "bad input"), (3, "no source reachable")],
    ),
)
def command() -> None:
    """Check or refresh the compatibility matrix (matrix/*.toml, see matrix/README.md)."""
