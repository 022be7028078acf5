"""`envbuild lock DIR`: pin the whole stack of an image folder into DIR/envbuild.lock."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import click

from envbuild.cli import console
from envbuild.cli.options import help_epilog, matrix_overlay

if TYPE_CHECKING:
    from envbuild.app.lock import LockOutcome
    from envbuild.core.models import Lock


@click.command(
    "lock",
    short_help="Pin the whole stack of an image folder into envbuild.lock.",
    epilog=help_epilog(
        [
            "envbuild lock images/torch-train",
            "envbuild lock --upgrade-package numpy images/torch-train",
            "envbuild lock --check images/torch-train",
        ],
        [
            (0, "written, unchanged, or (--check) fresh"),
            (1, "nothing fits the request; or (--check) the lock is missing, stale or edited"),
            (2, "bad input (envbuild.toml, flags, matrix)"),
            (3, "pinning failed, or an index could not be reached"),
        ],
    ),
)
# A str, not a pathlib.Path: pathlib's import would come before uv's head start.
@click.argument("image_dir", metavar="DIR", type=click.Path())
@click.option(
    "--check",
    is_flag=True,
    help="No network: exit 0 if the lock is fresh, 1 if it is missing, stale or edited.",
)
@click.option("--upgrade", is_flag=True, help="Re-resolve everything; ignore previous picks.")
@click.option(
    "--upgrade-package",
    "upgrade_packages",
    multiple=True,
    metavar="NAME",
    callback=lambda _ctx, _param, names: _package_names(names),
    help="Re-resolve NAME only (repeatable); other previous picks are kept.",
)
@click.option("--offline", is_flag=True, help="Use only the uv cache; fail if it is not enough.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def command(
    image_dir: str,
    check: bool,
    upgrade: bool,
    upgrade_packages: tuple[str, ...],
    offline: bool,
    as_json: bool,
) -> None:
    """Resolve DIR/envbuild.toml against the matrix, pin every Python package with hashes for
    the image's platform (delegated to uv), and write DIR/envbuild.lock when it changed.

    Without --upgrade, previous picks that still satisfy the request are kept.
    """
    import os

    from envbuild.lock import headstart

    if check and (upgrade or upgrade_packages or offline):
        from envbuild.core.errors import UserError

        raise UserError(
            "--check verifies the lock as it is; it cannot be combined with "
            "--upgrade, --upgrade-package or --offline",
            hint=f"run `envbuild lock --check {image_dir}` alone",
        )
    # uv starts before the lock path is even imported when this folder was locked the same
    # way before (envbuild/lock/headstart.py says when its result is taken); --check runs no uv.
    options = headstart.lock_options(upgrade, offline, upgrade_packages, os.environ)
    ahead = headstart.idle() if check else headstart.begin(image_dir, options)
    with ahead:
        from pathlib import Path

        from envbuild.app import lock
        from envbuild.lock import pins as pydeps

        outcome = lock.lock(
            image_dir=Path(image_dir),
            check=check,
            upgrade=upgrade,
            upgrade_packages=upgrade_packages,
            offline=offline,
            matrix_overlay=matrix_overlay(),
            runner=ahead.runner(pydeps.run_subprocess),
        )
    if as_json:
        _emit_json(outcome)
        return
    _print(outcome)


def _emit_json(outcome: LockOutcome) -> None:
    stack = outcome.lock.stack
    console.emit_json(
        {
            "ok": True,
            "status": outcome.status,
            "path": str(outcome.path),
            "input_hash": outcome.lock.input_hash,
            "framework": {
                "name": stack.framework.name,
                "version": stack.framework.version,
                "variant": stack.framework.variant,
                "index_url": stack.framework.index_url,
            },
            "cuda": stack.cuda,
            "cudnn": stack.cudnn,
            "nccl": stack.nccl,
            "python": stack.python,
            "base_image": stack.base_image.ref,
            "base_digest": outcome.lock.base_digest,
            "packages": len(outcome.lock.packages),
            "warnings": list(outcome.warnings),
            "tool": outcome.tool or None,
            "built_from_source": _built_from_source(outcome.lock),
            "left_out": None
            if outcome.left_out is None
            else [entry.to_json() for entry in outcome.left_out],
        }
    )


def _print(outcome: LockOutcome) -> None:
    stack = outcome.lock.stack
    for warning in outcome.warnings:
        console.warn(warning)
    fw = stack.framework
    what = f"{fw.name} {fw.version} ({fw.variant})"
    if outcome.status == "fresh":
        console.line(f"{outcome.path}: fresh ({what}, {len(outcome.lock.packages)} packages)")
        return
    verb = "wrote" if outcome.status == "written" else "unchanged"
    console.line(
        f"{verb} {outcome.path}: {what}, CUDA {stack.cuda or '-'}, Python {stack.python}, "
        f"{len(outcome.lock.packages)} packages"
        + (f" pinned by {outcome.tool}" if outcome.tool else "")
    )
    console.line(
        f"  base: {stack.base_image.ref}" + ("" if outcome.lock.base_digest else " (unpinned)")
    )
    if stack.floors is not None:
        console.line("  " + _driver_line(stack.floors.effective, outcome.lock.targets.driver))
    if outcome.left_out:
        from envbuild.request.sourcetree import keep_hint, left_out_line

        console.line("  " + left_out_line(outcome.left_out))
        if keep := keep_hint(outcome.left_out):
            console.line("    " + keep)
    for source in _built_from_source(outcome.lock):
        console.line(
            f"  from source: {source['name']} {source['version']} (no wheel fits; sdist "
            f"{source['sha256']}, build requires {', '.join(source['build_requires']) or '-'}), "
            + (
                "pure Python, built into a wheel (no compiler)"
                if source["pure"]
                else f"compiled for {' '.join(source['cuda_archs'])} with {source['toolchain']}"
            )
        )


def _driver_line(floor: str, oldest: str | None) -> str:
    """The driver the hosts need: the first thing to check on a GPU host, so said on the
    console, not only in the lock's notes."""
    if oldest is not None:
        return f"driver: >= {floor} on every host ([targets] driver {oldest} meets it)"
    return (
        f"driver: >= {floor} on every host (no [targets] driver given: name the oldest "
        "driver of your hosts there, and the lock picks a stack that runs on it)"
    )


def _built_from_source(lock: Lock) -> list[dict[str, Any]]:
    """The packages the image compiles from their sdists, and how (the lock's [build])."""
    build = lock.build
    if build is None:
        return []
    if build.toolchain == "none":
        toolchain = "no compiler"
    elif build.toolchain == "devel":
        # A framework base compiles in a stage of itself (no separate devel builder image).
        builder = lock.stack.base_image.builder or lock.stack.base_image.ref
        toolchain = f"nvcc of {builder}"
    else:
        pins = {p.name: p.version for p in (*lock.packages, *build.packages)}
        names = [
            n
            for n in build.toolchain_packages
            if n.startswith(("cuda-toolkit", "nvidia-cuda-nvcc"))
        ]
        toolchain = (
            "CUDA toolkit wheels (" + ", ".join(f"{n} {pins.get(n, '?')}" for n in names) + ")"
        )
    return [
        {
            "name": p.name,
            "version": p.version,
            "sha256": p.hashes[0] if p.hashes else "",
            "build_requires": list(p.build_requires),
            "cuda_archs": [] if p.pure else list(build.cuda_archs),
            "toolchain": "no compiler" if p.pure else toolchain,
            "pure": p.pure,
        }
        for p in lock.packages
        if p.sdist
    ]


# PEP 508 names (packaging.utils' own rule): what reaches uv after --upgrade-package.
_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)


def _package_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """--upgrade-package values: package names only. Click takes the word after the option as
    its value, so `--upgrade-package --offline` would hand uv an option as a name."""
    for name in names:
        if not _NAME.match(name):
            raise click.BadParameter(
                f"{name!r} is not a package name (write --upgrade-package NAME, e.g. numpy)",
                param_hint="--upgrade-package",
            )
    return names
