"""`envbuild resolve`: pick a driver/CUDA/framework stack for the targets, or say why none fits.

Contract: exit 0 a stack was found, 1 nothing fits, 2 bad input. `--json` prints one
object: {"ok": true, "stack": {...}, "notes": [...]} or {"ok": false, "reasons": [...],
"alternatives": [...]}.
"""

from __future__ import annotations

import click

from envbuild.cli import console
from envbuild.cli.options import help_epilog, matrix_overlay
from envbuild.core.models import FLAVOURS, FRAMEWORK_INDEX_POLICIES, PLATFORMS


@click.command(
    "resolve",
    short_help="Pick a driver/CUDA/framework stack for the targets.",
    epilog=help_epilog(
        [
            "envbuild resolve --framework torch --gpu H100 --gpu L4 --driver 570.124.06",
            "envbuild resolve --framework 'jax[cuda13]' --host --json",
            "envbuild resolve --hosts fleet.jsonl --cpu",
        ],
        [(0, "a stack was found"), (1, "nothing fits (with the reasons)"), (2, "bad input")],
    ),
)
@click.option(
    "--framework",
    "framework",
    default="torch",
    show_default=True,
    metavar="REQ",
    help="A requirement: torch, torch==2.6.*, torch>=2.7, tensorflow==2.15.*, jax, jax[cuda13].",
)
@click.option("--python", "python", metavar="X.Y", help="Python version (default: the OS's).")
@click.option(
    "--gpu",
    "gpus",
    multiple=True,
    metavar="GPU",
    help="A target GPU: a name (H100, RTX 5090), sm_XX or a compute capability (9.0). Repeat "
    "for a mixed fleet: one image for all of them.",
)
@click.option("--driver", metavar="VERSION", help="The oldest NVIDIA driver on the targets.")
@click.option("--cuda", "cuda", metavar="SPEC", help="CUDA version range: 12.8, >=12.6, <13.")
@click.option("--host", is_flag=True, help="Add this machine's GPUs and driver (NVML).")
@click.option(
    "--hosts",
    "hosts_files",
    multiple=True,
    metavar="FILE",
    # Strings, made Paths below only when given: pathlib (with urllib.parse and ipaddress)
    # is a visible part of a plain resolve's start otherwise.
    type=click.Path(),
    help="Add the GPUs and drivers of recorded hosts (`envbuild doctor --json` output).",
)
@click.option("--os", "os_name", metavar="OS", help="ubuntu24.04, ubuntu22.04, debian12, ...")
@click.option(
    "--flavour",
    type=click.Choice(FLAVOURS),
    default="auto",
    show_default=True,
    help="Base image: auto (smallest that works), plain OS, an nvidia/cuda flavour, or cpu.",
)
@click.option("--cpu", is_flag=True, help="A CPU-only stack.")
@click.option(
    "--strict-compat",
    is_flag=True,
    help="Require each CUDA toolkit's own driver floor (no minor-version compatibility).",
)
@click.option(
    "--compile-extensions", is_flag=True, help="The image compiles CUDA extensions (devel builder)."
)
@click.option(
    "--platform",
    type=click.Choice(PLATFORMS),
    default="x86_64",
    show_default=True,
    help="CPU architecture of the image.",
)
@click.option(
    "--framework-index",
    type=click.Choice(FRAMEWORK_INDEX_POLICIES),
    default="auto",
    show_default=True,
    help="Where the framework build may come from: auto (the best build), pypi (only builds "
    "that install from PyPI or the configured index), index (the framework's own index).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def command(
    framework: str,
    python: str | None,
    gpus: tuple[str, ...],
    driver: str | None,
    cuda: str | None,
    host: bool,
    hosts_files: tuple[str, ...],
    os_name: str | None,
    flavour: str,
    cpu: bool,
    strict_compat: bool,
    compile_extensions: bool,
    platform: str,
    framework_index: str,
    as_json: bool,
) -> None:
    """Pick the newest framework build that runs on every target GPU and driver, with its
    CUDA, cuDNN, NCCL, Python, OS and base image; explain why when nothing fits."""
    from envbuild.app import resolve
    from envbuild.core.models import Unsatisfiable
    from envbuild.resolver import result_to_json, result_to_text

    if hosts_files:
        from pathlib import Path

        files = tuple(Path(f) for f in hosts_files)
    else:
        files = ()
    result = resolve.resolve(
        framework=framework,
        python=python,
        gpus=gpus,
        driver=driver,
        cuda=cuda,
        host=host,
        hosts_files=files,
        os_name=os_name,
        flavour=flavour,
        cpu=cpu,
        strict_compat=strict_compat,
        compile_extensions=compile_extensions,
        platform=platform,
        framework_index=framework_index,
        matrix_overlay=matrix_overlay(),
    )
    if as_json:
        console.emit_json(result_to_json(result))
    else:
        for text in result_to_text(result):
            console.line(text)
    if isinstance(result, Unsatisfiable):
        click.get_current_context().exit(1)
