"""Evidence that travels with the image (docs/evidence.md): after a pass, the signed smoke
attestation and the SBOM of the whole stack, written beside a `--save` archive (or into
`--evidence DIR`); downstream, `envbuild verify` checks them against the image and the lock.

Files (the in-toto "bundle" convention of one DSSE envelope per line, `.intoto.jsonl`, as
SLSA's generators write it, github.com/in-toto/attestation/blob/main/spec/v1/bundle.md):
  <archive>.intoto.jsonl  the smoke attestation, then the SBOM attestation (both signed)
  <archive>.cdx.json      the SBOM itself, for tools that read CycloneDX files
Several passes (hosts) append their own lines to one bundle; `verify` reads them all.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from envbuild import __version__
from envbuild.core import fsio
from envbuild.core.errors import AttestationMissing, UserError
from envbuild.core.models import Lock
from envbuild.core.values import parse_image_ref
from envbuild.engine.registry import split_ref
from envbuild.lock import format as lockfmt
from envbuild.lock import sbom as sbommod
from envbuild.smoke import attestation as att
from envbuild.smoke.attestation import Subject

__all__ = ["Evidence", "Subject", "Verified", "archive_digest", "make", "verify", "write"]

BUNDLE_SUFFIX = ".intoto.jsonl"
SBOM_SUFFIX = ".cdx.json"
PASSWORD_ENV = "ENVBUILD_SIGNING_KEY_PASSWORD"
MAX_BUNDLE_BYTES = 4 << 20
"""A bundle holds a few envelopes of tens of kB each; 4 MiB is far above any real one."""


@dataclass(frozen=True)
class Evidence:
    """One pass's documents: the signed smoke attestation, the SBOM and its signed envelope."""

    attestation: bytes
    sbom: bytes
    sbom_attestation: bytes
    subjects: tuple[att.Subject, ...]


def load_signer(path: Path) -> Any:
    """The signer of `--sign-key PATH` (read before the build: a bad key fails in seconds)."""
    try:
        pem = fsio.read_input(path, what="--sign-key", limit=1 << 20)
    except FileNotFoundError:
        raise UserError(
            f"--sign-key {path} does not exist",
            hint="make a key: openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 "
            f"-out {path} (docs/evidence.md)",
        ) from None
    password = os.environ.get(PASSWORD_ENV)
    return att.load_signer(pem, password=password.encode() if password else None)


def make(
    *,
    lock: Lock,
    lock_sha256: str,
    report: Mapping[str, Any],
    subjects: Sequence[att.Subject],
    gpu_attach: str,
    engine: str,
    signer: Any,
    finished: datetime | None = None,
) -> Evidence:
    """The documents of one pass of `lock`'s image, about `subjects`."""
    when = (finished or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    host = att.host_fingerprint(report, gpu_attach=gpu_attach, engine=engine)
    pred = att.predicate(
        report,
        host=host,
        lock_sha256=lock_sha256,
        lock_name=lock.name,
        envbuild_version=__version__,
        finished=when,
    )
    bom = sbommod.sbom(lock, lock_sha256)
    return Evidence(
        attestation=att.sign(att.statement(subjects, pred), signer),
        sbom=bom,
        sbom_attestation=att.sign(
            att.statement(subjects, json.loads(bom), predicate_type=sbommod.PREDICATE_TYPE),
            signer,
        ),
        subjects=tuple(subjects),
    )


def write(evidence: Evidence, stem: Path) -> dict[str, str]:
    """`stem`.intoto.jsonl (appended to: one bundle per image, a line per pass) and
    `stem`.cdx.json, written atomically; their paths."""
    bundle = stem.with_name(stem.name + BUNDLE_SUFFIX)
    sbom_path = stem.with_name(stem.name + SBOM_SUFFIX)
    try:
        stem.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fsio.write_error(exc, stem.parent, "evidence folder") from None
    kept = b""
    if bundle.exists():
        kept = fsio.read_input(bundle, what="evidence bundle", limit=MAX_BUNDLE_BYTES)
        if kept and not kept.endswith(b"\n"):
            kept += b"\n"
    body = kept + evidence.attestation + b"\n" + evidence.sbom_attestation + b"\n"
    fsio.write_output(bundle, body, what="the attestation bundle")
    fsio.write_output(sbom_path, evidence.sbom, what="the SBOM")
    return {"bundle": str(bundle), "sbom": str(sbom_path)}


def attach(evidence: Evidence, ref: str, digest: str) -> list[str]:
    """The evidence pushed as OCI artifacts referring to the pushed manifest `digest` of `ref`
    (docs/evidence.md, "Registry layout"): the smoke attestation and the SBOM attestation
    (DSSE, also in cosign's `.att`), and the SBOM itself; the artifacts' digests."""
    from envbuild.engine import oci
    from envbuild.engine import oci_registry as ocireg

    registry, repo, _tag = split_ref(ref)
    client = ocireg.RegistryClient(registry, repo)
    done = [
        ocireg.attach(
            client, digest, oci.DSSE, [ocireg.attestation(evidence.attestation, att.PREDICATE_TYPE)]
        ),
        ocireg.attach(
            client,
            digest,
            oci.DSSE,
            [ocireg.attestation(evidence.sbom_attestation, sbommod.PREDICATE_TYPE)],
        ),
        ocireg.attach(client, digest, oci.CYCLONEDX, [oci.Document(oci.CYCLONEDX, evidence.sbom)]),
    ]
    return [a.digest for a in done]


def registry_envelopes(ref: str) -> tuple[str, list[tuple[str, bytes]]]:
    """(digest, [(where, envelope)]) of `REGISTRY/REPO@sha256:...`: every DSSE envelope the
    registry lists as a referrer of the digest (referrers API, fallback tag, cosign's .att)."""
    from envbuild.engine import oci
    from envbuild.engine import oci_registry as ocireg

    parsed = parse_image_ref(ref)
    if parsed is None or parsed.digest is None:
        raise UserError(
            f"{ref!r} is not an image digest reference",
            hint="give REGISTRY/REPO@sha256:... as `envbuild image --push` reported it",
        )
    registry, repo, _tag = split_ref(ref)
    client = ocireg.RegistryClient(registry, repo)
    found = ocireg.referrers(client, parsed.digest)
    out = []
    seen: set[str] = set()
    for r in found:
        for n, doc in enumerate(d for d in r.documents if d.media_type == oci.DSSE):
            key = oci.sha256_digest(doc.data)
            if key not in seen:
                seen.add(key)
                out.append(
                    (f"{ref} ({r.source} referrer {r.descriptor.digest[:19]}, {n + 1})", doc.data)
                )
    return parsed.digest, out


# --- downstream: verify ------------------------------------------------------------------


@dataclass(frozen=True)
class Verified:
    """What `envbuild verify` proved: the digest, the lock, and where the image passed."""

    digest: str | None
    lock_sha256: str | None
    proven_on: list[dict[str, str]]
    statements: int
    sbom_components: int
    sources: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "digest": self.digest,
            "lock_sha256": self.lock_sha256,
            "proven_on": self.proven_on,
            "attestations": self.statements,
            "sbom_components": self.sbom_components,
            "sources": self.sources,
        }


def archive_digest(path: Path) -> str:
    """The image id (config digest) of a docker-archive: what `docker load` gives back, and
    the subject of the attestation written beside it (docker save's manifest.json "Config")."""
    try:
        with tarfile.open(path, mode="r:") as tar:
            member = tar.getmember("manifest.json")
            handle = tar.extractfile(member) if member.size < (1 << 20) else None
            manifest: Any = json.loads(handle.read()) if handle is not None else None
    except (OSError, tarfile.TarError, KeyError, ValueError) as exc:
        raise UserError(
            f"{path} is not a docker-archive envbuild can read ({exc})",
            hint="give the archive `envbuild image --save` wrote, or --digest sha256:...",
        ) from None
    try:
        config = str(manifest[0]["Config"])
    except (TypeError, KeyError, IndexError):
        raise UserError(f"{path}: manifest.json names no image config") from None
    hexpart = config.rsplit("/", 1)[-1].removesuffix(".json")
    return "sha256:" + hexpart


def bundle_envelopes(bundles: Sequence[Path]) -> list[tuple[str, bytes]]:
    """(where, envelope) of every line of every bundle file; a missing file says so."""
    out: list[tuple[str, bytes]] = []
    for bundle in bundles:
        if not bundle.exists():
            raise AttestationMissing(
                f"no attestation at {bundle}",
                hint="write one with `envbuild image --sign-key KEY --save FILE` (or --evidence)",
            )
        lines = fsio.read_input(bundle, what="attestation", limit=MAX_BUNDLE_BYTES).splitlines()
        for n, line in enumerate((ln for ln in lines if ln.strip()), start=1):
            out.append((f"{bundle} (envelope {n})", line))
    return out


def verify(
    *,
    bundles: Sequence[Path] = (),
    keys: Sequence[Path],
    digest: str | None,
    lock_sha256: str | None,
    envelopes: Sequence[tuple[str, bytes]] = (),
    sources: Sequence[str] = (),
) -> Verified:
    """Every envelope (of `bundles`, and `envelopes` fetched elsewhere) verified by one of
    `keys`, about `digest`, under the lock; at least one of them the smoke attestation."""
    public = public_keys(keys)
    statements: list[dict[str, Any]] = []
    components = 0
    for where, envelope in [*bundle_envelopes(bundles), *envelopes]:
        stmt = att.open_envelope(envelope, public, where=where)
        att.check_statement(stmt, where=where, digest=digest, lock_sha256=lock_sha256)
        if stmt.get("predicateType") == sbommod.PREDICATE_TYPE:
            components = max(components, len(stmt["predicate"].get("components") or ()))
        statements.append(stmt)
    looked = [*map(str, bundles), *sources]
    if not any(s.get("predicateType") == att.PREDICATE_TYPE for s in statements):
        raise AttestationMissing(
            f"no smoke attestation in {', '.join(looked) or 'what was given'}",
            hint="an image is proven by `envbuild image --sign-key KEY`; rebuild it so",
        )
    return Verified(
        digest=digest,
        lock_sha256=lock_sha256,
        proven_on=att.proven_on(statements),
        statements=len(statements),
        sbom_components=components,
        sources=looked,
    )


def public_keys(paths: Sequence[Path]) -> list[Any]:
    """The PEM public keys of `--key` options (any one of them may have signed)."""
    if not paths:
        raise UserError("no --key given", hint="pass the PEM public key the images are signed with")
    return [att.load_public_key(_read_key(k)) for k in paths]


def _read_key(path: Path) -> bytes:
    try:
        return fsio.read_input(path, what="--key", limit=1 << 20)
    except FileNotFoundError:
        raise UserError(f"--key {path} does not exist", hint="give the PEM public key") from None


def lock_sha256_of(path: Path) -> str:
    """The sha256 of the lock at `path`: an image folder or an envbuild.lock file."""
    folder = path.parent if path.name == lockfmt.LOCK_FILE else path
    text = lockfmt.read_lock_text(folder)
    if text is None:
        raise UserError(f"{folder} has no envbuild.lock", hint=f"lock it: envbuild lock {folder}")
    return lockfmt.lock_sha256(text)
