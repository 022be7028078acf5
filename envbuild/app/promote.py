"""The `envbuild promote` use case: per-architecture image digests -> one OCI image index
(x86_64 + aarch64, say) at a tag, pushed only when every digest has a passing smoke
attestation attached, signed by one of the keys given (`why_refused`).

Each digest's platform is read from its config blob (`architecture`, `os`, `variant`), never
from the user. Raises UserError (2) for references that cannot make one index,
PromoteRefused (9) when a digest has no passing smoke attestation (nothing is pushed then),
RegistryError (8) when the registry refuses or answers nonsense.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuild.app import evidence
from envbuild.core.errors import EvidenceError, PromoteRefused, UserError
from envbuild.core.values import parse_image_ref
from envbuild.engine import oci
from envbuild.engine import oci_registry as ocireg
from envbuild.engine.registry import split_ref
from envbuild.smoke import attestation as att

ClientFactory = Callable[[str, str], ocireg.RegistryClient]


@dataclass(frozen=True)
class Promoted:
    ref: str
    digest: str
    manifests: tuple[tuple[str, dict[str, str]], ...]
    """(image digest, platform) in the index, in the order given."""

    def to_json(self) -> dict[str, Any]:
        repo = self.ref.rpartition(":")[0]
        return {
            "ok": True,
            "ref": self.ref,
            "digest": self.digest,
            "repo_digest": f"{repo}@{self.digest}",
            "manifests": [{"digest": d, "platform": p} for d, p in self.manifests],
        }


def target_of(ref: str) -> tuple[str, str, str]:
    """ "registry/team/torch:1" -> (registry, repository, tag); UserError without a tag."""
    parsed = parse_image_ref(ref)
    if parsed is None or parsed.tag is None or parsed.digest is not None:
        raise UserError(
            f"{ref!r} is not a tag to promote to",
            hint="name the index's tag: registry.example.com/team/torch:2025-11",
        )
    return split_ref(ref)


def digests_of(images: Sequence[str], target: str) -> list[str]:
    """Each image as a digest of the target's repository: `sha256:...` or `<name>@sha256:...`
    with the target's name (an index names manifests of its own repository only)."""
    name = target.rpartition(":")[0]
    out: list[str] = []
    for image in images:
        parsed = parse_image_ref(image if "@" in image else f"{name}@{image}")
        if parsed is None or parsed.digest is None or parsed.digest in out:
            raise UserError(
                f"{image!r} is not a new image digest (sha256:<64 hex> or {name}@sha256:...)",
                hint="give each platform's manifest digest once, as `envbuild image --push` "
                "reports it (`pushed.digest`)",
            )
        if parsed.name != name:
            raise UserError(
                f"{image} is not in {name}",
                hint=f"push every platform's image to {name} first: an index can only name "
                "manifests of its own repository",
            )
        out.append(parsed.digest)
    if not out:
        raise UserError("promote needs at least one image digest", hint="see `--help`")
    return out


def why_refused(found: Sequence[ocireg.Referrer], digest: str, keys: Sequence[Any]) -> str | None:
    """None when a referrer holds a smoke attestation about `digest`, signed by one of `keys`
    (`envbuild.smoke.attestation`), that says passed; else why not (the first reason of the
    most convincing kind: a genuine failed pass before a forged or foreign one)."""
    envelopes = [d.data for r in found for d in r.documents if d.media_type == oci.DSSE]
    reasons: list[str] = []
    genuine_smoke = False
    for n, data in enumerate(envelopes, start=1):
        where = f"attestation {n} of {digest}"
        try:
            stmt = att.open_envelope(data, keys, where=where)
            att.check_statement(stmt, where=where, digest=digest)
        except EvidenceError as err:
            reasons.append(err.message)
            continue
        if stmt.get("predicateType") != att.PREDICATE_TYPE:
            continue
        genuine_smoke = True
        if stmt["predicate"].get("verdict") == "passed":
            return None
    if genuine_smoke:
        return "its signed smoke attestations do not say passed"
    return reasons[0] if reasons else "no smoke attestation is attached"


def promote(
    target: str,
    images: Sequence[str],
    *,
    keys: Sequence[Path],
    client: ClientFactory | None = None,
) -> Promoted:
    """`envbuild promote TARGET DIGEST... --key PUB`: the gate for every digest (a passing
    smoke attestation signed by one of `keys`), then their platforms, then the index pushed
    to TARGET."""
    registry, repo, tag = target_of(target)
    digests = digests_of(images, target)
    public = evidence.public_keys(keys)
    conn = (client or ocireg.RegistryClient)(registry, repo)
    refused = []
    for digest in digests:
        why = why_refused(ocireg.referrers(conn, digest), digest, public)
        if why is not None:
            refused.append({"digest": digest, "why": why})
    if refused:
        listed = "; ".join(f"{r['digest']}: {r['why']}" for r in refused)
        raise PromoteRefused(
            f"not promoted to {target}: {listed}",
            hint="promote only images whose smoke test passed: build each with `envbuild "
            "image DIR --push REF` and attach its smoke attestation",
            fields={"target": target, "refused": refused},
        )
    entries: list[oci.Descriptor] = []
    platforms: list[dict[str, str]] = []
    for digest in digests:
        image, platform = ocireg.platform(conn, digest)
        if platform in platforms:
            raise UserError(
                f"two images are {oci.platform_name(platform)}: an index holds one per platform",
                hint="give one digest per architecture",
                fields={"platform": platform},
            )
        platforms.append(platform)
        entries.append(oci.Descriptor(image.media_type, digest, len(image.body), platform=platform))
    index = ocireg.push_index(conn, tag, entries)
    return Promoted(target, index, tuple(zip(digests, platforms, strict=True)))
