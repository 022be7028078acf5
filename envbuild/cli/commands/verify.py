"""`envbuild verify`: check an image's evidence downstream: the signature (one of --key), that
it is about this image's digest and this lock, and where the image was proven.

Contract: exit 0 verified (the GPU classes and driver branches it passed on are listed), 2 bad
input, 20 no attestation, 21 signed by another key, 22 changed after signing, 23 about another
image digest, 24 passed under another lock. `--json` prints one object (docs/evidence.md).
"""

from __future__ import annotations

from pathlib import Path

import click

from envbuild.cli import console
from envbuild.cli.options import help_epilog, public_keys
from envbuild.core.errors import UserError


@click.command(
    "verify",
    short_help="Check an image's signed smoke attestation and SBOM.",
    epilog=help_epilog(
        [
            "envbuild verify torch.tar --key envbuild.pub --lock images/torch-train",
            "envbuild verify registry.example.com/ml/torch@sha256:... --key envbuild.pub",
            "envbuild verify --attestation torch.intoto.jsonl --digest sha256:... --key a.pub",
        ],
        [
            (0, "verified: signature, digest and lock match"),
            (2, "bad input"),
            (20, "no smoke attestation found"),
            (21, "signed by none of the keys given"),
            (22, "changed after it was signed"),
            (23, "about another image digest"),
            (24, "the image passed under another lock"),
        ],
    ),
)
@click.argument("target", required=False, metavar="ARCHIVE_OR_REF")
@public_keys(
    required=True,
    help="A PEM public key; repeat during a key rotation (any one of them may have signed).",
)
@click.option(
    "--attestation",
    "bundles",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="An .intoto.jsonl bundle (default: the one beside ARCHIVE).",
)
@click.option("--digest", metavar="sha256:HEX", help="The image digest it must be about.")
@click.option(
    "--lock",
    "lock_dir",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="The image folder (or envbuild.lock) whose lock the image must have passed under.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def command(
    target: str | None,
    keys: tuple[Path, ...],
    bundles: tuple[Path, ...],
    digest: str | None,
    lock_dir: Path | None,
    as_json: bool,
) -> None:
    """Verify the smoke attestation of ARCHIVE_OR_REF (a `--save` docker-archive, or
    REGISTRY/REPO@sha256:... whose referrers hold it) or of --attestation FILE."""
    from envbuild.app import evidence

    if target is None and not bundles:
        raise UserError(
            "nothing to verify", hint="give ARCHIVE, REGISTRY/REPO@sha256:... or --attestation FILE"
        )
    envelopes: list[tuple[str, bytes]] = []
    sources: list[str] = []
    if target is not None and not Path(target).exists() and "@sha256:" in target:
        ref_digest, envelopes = evidence.registry_envelopes(target)
        if digest is not None and digest != ref_digest:
            raise UserError(f"--digest {digest} is not {target}'s digest")
        digest, sources = ref_digest, [target]
    elif target is not None:
        archive = Path(target)
        archive_id = evidence.archive_digest(archive)
        if digest is not None and digest != archive_id:
            raise UserError(f"--digest {digest} is not {archive}'s image id {archive_id}")
        digest = archive_id
        bundles = bundles or (archive.with_name(archive.name + evidence.BUNDLE_SUFFIX),)
    result = evidence.verify(
        bundles=bundles,
        keys=keys,
        digest=digest,
        lock_sha256=evidence.lock_sha256_of(lock_dir) if lock_dir is not None else None,
        envelopes=envelopes,
        sources=sources,
    )
    if as_json:
        console.emit_json(result.to_json())
        return
    console.line(f"verified: {result.statements} signed attestations about {digest or 'the image'}")
    if result.lock_sha256:
        console.line(f"  lock:   sha256 {result.lock_sha256}")
    if result.sbom_components:
        console.line(f"  sbom:   {result.sbom_components} components (signed)")
    console.line("  proven on:")
    for p in result.proven_on:
        cc = f" (cc {p['cc']})" if p["cc"] else ""
        branch = f", driver branch {p['driver_branch']}" if p["driver_branch"] else ""
        console.line(f"    {p['product']}{cc}{branch}")
