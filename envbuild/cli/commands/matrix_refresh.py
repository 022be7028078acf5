"""`envbuild matrix refresh`: new framework releases from PyPI (and the PyTorch index and the
nvidia/cuda tag list) into the matrix, as a reviewable change. Registered in the `matrix` group
(envbuild/cli/commands/matrix.py)."""

from __future__ import annotations

import click

from envbuild.cli import console
from envbuild.cli.options import help_epilog

SOURCES = ("pypi", "pytorch-index", "registry")
FRAMEWORKS = ("torch", "jax", "tensorflow")


@click.command(
    "refresh",
    help=(
        "Read framework releases from PyPI (Simple API + wheel metadata), the PyTorch index "
        "and the nvidia/cuda tag list; append new release rows to matrix/<framework>.toml and "
        "print a diff summary. Derived builds and changed facts are reported, never written "
        "over. Unreachable sources are skipped with a warning (exit 3 when none works). Never "
        "runs implicitly: lock and resolve do not touch the network for the matrix."
    ),
    epilog=help_epilog(
        [
            "envbuild matrix refresh --dry-run",
            "envbuild matrix refresh --framework torch --source pypi",
        ],
        [
            (0, "done (or already up to date)"),
            (2, "bad input, or the refresh would make the matrix invalid"),
            (3, "no source could be read"),
        ],
    ),
)
@click.option(
    "--source",
    "sources",
    type=click.Choice(SOURCES),
    multiple=True,
    help="Read only this source (repeatable). Default: all.",
)
@click.option(
    "--framework",
    "frameworks",
    type=click.Choice(FRAMEWORKS),
    multiple=True,
    help="Refresh only this framework (repeatable). Default: all.",
)
@click.option("--dry-run", is_flag=True, help="Print what would change; write nothing.")
@click.option("--no-cache", is_flag=True, help="Ignore the HTTP cache (~/.cache/envbuild/http).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def command(
    sources: tuple[str, ...],
    frameworks: tuple[str, ...],
    dry_run: bool,
    no_cache: bool,
    as_json: bool,
) -> None:
    from envbuild.app import matrix
    from envbuild.matrix.refresh import summary_lines
    from envbuild.matrix.refresh.pypi import Fetcher

    result = matrix.refresh_matrix(
        sources=sources or SOURCES,
        frameworks=frameworks or FRAMEWORKS,
        dry_run=dry_run,
        fetcher=Fetcher(use_cache=not no_cache),
    )
    for source, message in result.sources_failed:
        console.warn(f"{source} skipped: {message}")
    if as_json:
        console.emit_json(result.to_json())
        return
    for text in summary_lines(result.plan):
        console.line(text)
    if dry_run:
        console.line("dry run: nothing written")
    elif result.written:
        for path in result.written:
            console.line(f"wrote {path} (review with `git diff`)")
    else:
        console.line("matrix already up to date: nothing written")
