"""`envbuild render DIR`: print or write the Dockerfile of a locked image folder."""

from __future__ import annotations

from pathlib import Path

import click

from envbuild.cli import console
from envbuild.cli.options import build_inputs, help_epilog, matrix_overlay
from envbuild.render.dockerfile import BuildInputs


@click.command(
    "render",
    help=(
        "Print or write the Dockerfile of a locked image folder. Reads DIR/envbuild.lock "
        "(never re-resolves; a stale lock stops with the command to run). A DIR/Dockerfile.j2 "
        "may extend the built-in template and override its blocks."
    ),
    epilog=help_epilog(
        [
            "envbuild render images/torch-train",
            "envbuild render images/torch-train -o Dockerfile --context build/",
            "envbuild render images/torch-train --index-url https://mirror.example/simple",
        ],
        [
            (0, "rendered"),
            (1, "the lock is missing, stale or edited (the hint is the command to run)"),
            (2, "bad input (flags, lock values, template)"),
        ],
    ),
)
@click.argument("image_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the Dockerfile to this file (atomically) instead of printing it.",
)
@click.option(
    "--context",
    type=click.Path(path_type=Path),
    help="Also write the whole build context: a folder, or a reproducible .tar file.",
)
@build_inputs
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='One JSON object on stdout ("ok", "dockerfile", "output", "context", "left_out", ...).',
)
def command(
    image_dir: Path,
    output: Path | None,
    context: Path | None,
    build_inputs: BuildInputs,
    as_json: bool,
) -> None:
    from envbuild.app import render

    result = render.render(
        image_dir=image_dir,
        build_inputs=build_inputs,
        output=output,
        context=context,
        matrix_overlay=matrix_overlay(),
    )
    if as_json:
        console.emit_json(
            {
                "ok": True,
                "dockerfile": result.dockerfile,
                "output": None if result.output is None else str(result.output),
                "context": None if result.context is None else str(result.context),
                "context_files": result.context_files,
                "left_out": None
                if result.left_out is None
                else [entry.to_json() for entry in result.left_out],
                "notes": list(result.notes),
            }
        )
        return
    for note in result.notes:
        click.echo(note, err=True)
    if result.output is None:
        console.line(result.dockerfile.rstrip("\n"))
    else:
        click.echo(f"wrote {result.output}", err=True)
    if result.context is not None:
        click.echo(f"wrote {result.context} ({result.context_files} files)", err=True)
    else:
        # The Dockerfile COPYs files only the context holds (requirements.lock, payload/, the
        # project's code): `docker build` beside the request alone fails.
        click.echo(
            f"note: it builds from its context: write both with `envbuild render {image_dir} "
            f"-o build/Dockerfile --context build/`, or build, smoke-test and tag with "
            f"`envbuild image {image_dir}`",
            err=True,
        )
    if result.left_out:
        from envbuild.request.sourcetree import keep_hint, left_out_line

        click.echo(left_out_line(result.left_out), err=True)
        if keep := keep_hint(result.left_out):
            click.echo("  " + keep, err=True)
