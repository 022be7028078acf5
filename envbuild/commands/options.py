"""Options that several commands share, declared once so they read and check the same.

`build_inputs`: what `render` and `image` take to build behind proxies and air gaps (none of
them loosens hash checking); `host_facts`: the hidden recorded-host input of `doctor` and
`validate` (also ENVBUILD_HOST_FACTS).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def build_inputs(f: F) -> F:
    """--base-image, --ca-cert, --index-url, --find-links, --buildkit."""
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
    for decorate in reversed(decorators):
        f = decorate(f)
    return f


def host_facts(what: str) -> Callable[[F], F]:
    """The hidden --host-facts FILE (env ENVBUILD_HOST_FACTS): `what` instead of this host."""
    return click.option(
        "--host-facts",
        "facts_file",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        envvar="ENVBUILD_HOST_FACTS",
        hidden=True,
        help=f"{what} recorded facts (doctor --json output) instead of this host.",
    )
