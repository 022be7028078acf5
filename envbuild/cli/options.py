"""Options that several commands share, declared once so they read and check the same.

`build_inputs`: what `render` and `image` take to build behind proxies and air gaps (none of
them loosens hash checking), handed to the command as one `BuildInputs` value;
`host_facts`: the hidden recorded-host input of `doctor` and `validate` (also
ENVBUILD_HOST_FACTS); `matrix_overlay`: the one read of ENVBUILD_MATRIX_OVERLAY;
`help_epilog`: the examples and exit codes every command's --help ends with; `gpu_choice`:
how `image` and `validate` attach GPUs, handed over as one `GpuChoice` value.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    # Imported where an option needs it: `resolve` (which imports this module) never does.
    from pathlib import Path

F = TypeVar("F", bound=Callable[..., Any])

_BUILD_INPUT_NAMES = ("base_image", "ca_cert", "index_url", "find_links", "buildkit")


def matrix_overlay() -> Path | None:
    """The matrix overlay folder ($ENVBUILD_MATRIX_OVERLAY; unset or empty: none), read here
    at the edge and passed down to the use case as a value."""
    from envbuild.matrix import overlay_from_env

    return overlay_from_env()


def help_epilog(examples: Sequence[str], exit_codes: Sequence[tuple[int, str]]) -> str:
    """The end of a command's --help: examples, then what each exit code means (Click keeps
    a paragraph that starts with \\b as written)."""
    lines = ["\b", "Examples:"] + [f"  {example}" for example in examples]
    lines += ["", "\b", "Exit codes:"] + [f"  {code}  {meaning}" for code, meaning in exit_codes]
    return "\n".join(lines)


def build_inputs(f: F) -> F:
    """--base-image, --ca-cert, --index-url, --find-links, --buildkit, given to the command
    as one keyword argument `build_inputs` (a BuildInputs)."""
    # Imported by the commands that take these options, not by every command.
    from pathlib import Path

    from envbuild.render.dockerfile import BuildInputs

    @functools.wraps(f)
    def collected(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in _BUILD_INPUT_NAMES}
        return f(*args, build_inputs=BuildInputs(**values), **kwargs)

    decorators = (
        click.option(
            "--base-image",
            metavar="REF",
            help="Replace the locked base image (a mirror or a local image).",
        ),
        click.option(
            "--ca-cert",
            type=click.Path(dir_okay=False, exists=True, path_type=Path),
            help="A proxy's CA certificate (PEM), trusted by apt and pip during the build only.",
        ),
        click.option(
            "--index-url",
            metavar="URL",
            help="A package index mirror; hashes are still checked.",
        ),
        click.option(
            "--find-links",
            type=click.Path(file_okay=False, exists=True, path_type=Path),
            help="A wheelhouse folder copied into the build; hashes are still checked.",
        ),
        click.option(
            "--buildkit",
            is_flag=True,
            help="Use BuildKit (`docker buildx`: cache and secret mounts).",
        ),
    )
    wrapped: Any = collected
    for decorate in reversed(decorators):
        wrapped = decorate(wrapped)
    decorated: F = wrapped
    return decorated


def gpu_choice(f: F) -> F:
    """--gpu-attach and --gpu-devices, given to the command as one keyword argument `gpu`
    (a GpuChoice; UserError, exit 2, for a device that is no index or UUID)."""
    from envbuild.host.gpu_attach import CHOICES, GpuChoice

    @functools.wraps(f)
    def collected(*args: Any, **kwargs: Any) -> Any:
        gpu = GpuChoice.parse(kwargs.pop("gpu_attach"), kwargs.pop("gpu_devices"))
        return f(*args, gpu=gpu, **kwargs)

    decorators = (
        click.option(
            "--gpu-attach",
            type=click.Choice(CHOICES),
            default="auto",
            envvar="ENVBUILD_GPU_ATTACH",
            show_default=True,
            help="How the smoke container gets the GPUs: auto (what the engine offers: CDI, "
            "then --gpus, then the nvidia runtime; `envbuild doctor` shows it), or force one.",
        ),
        click.option(
            "--gpu-devices",
            metavar="all|LIST",
            help="The GPUs to attach: all, or indexes / UUIDs (0,1 or GPU-3f2a...) [all].",
        ),
    )
    wrapped: Any = collected
    for decorate in reversed(decorators):
        wrapped = decorate(wrapped)
    decorated: F = wrapped
    return decorated


def host_facts(what: str) -> Callable[[F], F]:
    """The hidden --host-facts FILE (env ENVBUILD_HOST_FACTS): `what` instead of this host."""
    from pathlib import Path

    return click.option(
        "--host-facts",
        "facts_file",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        envvar="ENVBUILD_HOST_FACTS",
        hidden=True,
        help=f"{what} recorded facts (doctor --json output) instead of this host.",
    )


def image_lock(f: F) -> F:
    """`--lock DIR` (into `lock_dir`, required): the image folder an image was built from,
    whose envbuild.lock says what the image needs (the fleet scripts and Jobs)."""
    from pathlib import Path

    return click.option(
        "--lock",
        "lock_dir",
        required=True,
        type=click.Path(file_okay=False, exists=True, path_type=Path),
        help="The image folder the image was built from (its envbuild.lock).",
    )(f)


def public_keys(*, required: bool, help: str) -> Callable[[F], F]:
    """`--key PUB` (repeatable, into `keys`): the PEM public keys a smoke attestation may be
    signed with (verify, promote, validate --evidence; docs/evidence.md)."""
    from pathlib import Path

    return click.option(
        "--key",
        "keys",
        multiple=True,
        required=required,
        type=click.Path(dir_okay=False, path_type=Path),
        metavar="PUB",
        help=help,
    )


def report_page(f: F) -> F:
    """`--report FILE.html`: the smoke run's page (charts, checks, readings, memory fit)."""
    from pathlib import Path

    return click.option(
        "--report",
        "report_path",
        type=click.Path(path_type=Path),
        metavar="FILE.html",
        help="Also write one self-contained HTML page: telemetry charts, checks, readings, "
        "memory fit (written on a failure too).",
    )(f)
