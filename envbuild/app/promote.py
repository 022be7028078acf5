"""The `envbuild promote` use case: per-architecture image digests -> one OCI image index
(x86_64 + aarch64, say) at a tag, pushed only when every digest has a passing smoke
attestation attached (`passed`).

Each digest's platform is read from its config blob (`architecture`, `os`, `variant`), never
from the user. Raises UserError (2) for references that cannot make one index,
PromoteRefused (9) when a digest has no passing smoke attestation (nothing is pushed then),
RegistryError (8) when the registry refuses or answers nonsense.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from envbuild.core.documents import DocumentError, json_loads
from envbuild.core.errors import PromoteRefused, UserError
from envbuild.core.values import parse_image_ref
from envbuild.engine import oci
from envbuild.engine import oci_registry as ocireg
from envbuild.engine.registry import split_ref

SMOKE_PREDICATE = "https://envbuild.dev/smoke/v1"
IN_TOTO = "application/vnd.in-toto+json"

ClientFactory = Callable[[str, str], ocireg.RegistryClient]


def statement(envelope: bytes) -> dict[str, Any] | None:
    """The in-toto Statement a DSSE envelope carries (its base64 `payload`, DSSE v1.0
    envelope.md), or None when the bytes are not one."""
    try:
        doc = json_loads(envelope)
        if not isinstance(doc, dict) or doc.get("payloadType") != IN_TOTO:
            return None
        payload = doc.get("payload")
        if not isinstance(payload, str):
            return None
        inner = json_loads(base64.b64decode(payload, validate=True))
    except (DocumentError, binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return inner if isinstance(inner, dict) else None


def passed(envelope: bytes) -> bool:
    """Does this envelope say the smoke test passed: an envbuild smoke Statement whose
    predicate's verdict is "passed". The payload is only decoded here, not verified: the
    signature check replaces this function."""
    found = statement(envelope)
    if found is None or found.get("predicateType") != SMOKE_PREDICATE:
        return False
    predicate = found.get("predicate")
    return isinstance(predicate, dict) and predicate.get("verdict") == "passed"


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


def about(envelope: bytes, digest: str) -> bool:
    """Does the envelope's Statement name `digest` among its subjects (in-toto Statement v1:
    `subject[].digest.sha256`)? An attestation of another image attached here does not
    count for this one."""
    subjects = (statement(envelope) or {}).get("subject")
    algorithm, _, hex_digits = digest.partition(":")
    return isinstance(subjects, list) and any(
        isinstance(s, dict)
        and isinstance(s.get("digest"), dict)
        and s["digest"].get(algorithm) == hex_digits
        for s in subjects
    )


def why_refused(found: Sequence[ocireg.Referrer], digest: str) -> str | None:
    """None when a referrer holds a passing smoke attestation about `digest`; else why not."""
    envelopes = [d for r in found for d in r.documents if d.media_type == oci.DSSE]
    smoke = [
        e for e in envelopes if (statement(e.data) or {}).get("predicateType") == SMOKE_PREDICATE
    ]
    own = [e for e in smoke if about(e.data, digest)]
    if any(passed(e.data) for e in own):
        return None
    if own:
        return "its smoke attestations do not say passed"
    if smoke:
        return "its smoke attestations are about another image"
    return "no smoke attestation is attached"


def promote(target: str, images: Sequence[str], *, client: ClientFactory | None = None) -> Promoted:
    """`envbuild promote TARGET DIGEST...`: the gate for every digest, then their platforms,
    then the index pushed to TARGET."""
    registry, repo, tag = target_of(target)
    digests = digests_of(images, target)
    conn = (client or ocireg.RegistryClient)(registry, repo)
    refused = []
    for digest in digests:
        why = why_refused(ocireg.referrers(conn, digest), digest)
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
