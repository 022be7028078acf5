"""`envbuild promote`: one image index from per-architecture digests, each gated on its
passing smoke attestation."""

from __future__ import annotations

from pathlib import Path

import click

from envbuild.cli import console
from envbuild.cli.options import help_epilog, public_keys


@click.command(
    "promote",
    help=(
        "Push an OCI image index (a multi-arch tag) naming each DIGEST, only when every one "
        "has a passing smoke attestation attached in the registry, signed by one of --key. The platform of each comes "
        "from its image config; every digest must be in TARGET's repository."
    ),
    epilog=help_epilog(
        [
            "envbuild promote registry.example.com/team/torch:1 sha256:1a2b... sha256:3c4d... "
            "--key envbuild.pub",
            "envbuild promote 127.0.0.1:5000/torch:1 127.0.0.1:5000/torch@sha256:1a2b... "
            "--key envbuild.pub --json",
        ],
        [
            (0, "the index was pushed"),
            (2, "bad input (a reference, a digest given twice, two images of one platform)"),
            (8, "the registry refused or answered nonsense"),
            (9, "a digest has no passing smoke attestation: nothing was pushed"),
        ],
    ),
)
@click.argument("target")
@click.argument("digests", nargs=-1, required=True)
@public_keys(
    required=True,
    help="A PEM public key the smoke attestations may be signed with (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def command(target: str, digests: tuple[str, ...], keys: tuple[Path, ...], as_json: bool) -> None:
    from envbuild.app import promote
    from envbuild.engine.oci import platform_name

    done = promote.promote(target, digests, keys=keys)
    if as_json:
        console.emit_json(done.to_json())
        return
    for digest, platform in done.manifests:
        console.line(f"  {platform_name(platform)}  {digest}")
    console.line(f"promoted {done.ref} ({done.digest})")
