"""`envbuild matrix check`: validate the matrix (and an overlay) strictly. Registered in the
`matrix` group (envbuild/cli/commands/matrix.py)."""

from __future__ import annotations

from pathlib import Path

import click

from envbuild.cli import console
from envbuild.cli.options import help_epilog, matrix_overlay


@click.command(
    "check",
    epilog=help_epilog(
        ["envbuild matrix check", "envbuild matrix check --overlay site-matrix/ --json"],
        [
            (0, "valid (a one-line summary)"),
            (1, 'problems ("file: row: problem" lines)'),
            (2, "a file cannot be read or is not TOML"),
        ],
    ),
)
@click.option(
    "--overlay",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="A folder of matrix files merged over the built-in ones (rows with the same key "
    "replace, new rows add). Default: $ENVBUILD_MATRIX_OVERLAY.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.pass_context
def command(ctx: click.Context, overlay: Path | None, as_json: bool) -> None:
    """Validate every matrix file strictly: unknown keys, wrong types, missing sources, bad
    versions, duplicate rows, dangling references and contradictions between files."""
    from envbuild.app import matrix

    report = matrix.check(overlay=overlay if overlay is not None else matrix_overlay())
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
