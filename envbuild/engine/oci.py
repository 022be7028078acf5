"""OCI documents, pure: the artifact manifest that refers to an image (`subject`), the
referrers index of the tag fallback, cosign's `.att` manifest, the image index of a promote,
and the checks that a registry's answer is the document it claims to be.

Sources a reader can open:
- OCI image spec v1.1, manifest.md ("artifactType", "subject", the empty descriptor) and
  image-index.md: https://github.com/opencontainers/image-spec/blob/v1.1.0/
- OCI distribution spec v1.1, "Referrers Tag Schema" (`<alg>-<ref>` holding an image index):
  https://github.com/opencontainers/distribution-spec/blob/v1.1.0/spec.md#referrers-tag-schema
- cosign's attestation layout: specs/ATTESTATION_SPEC.md, `sha256-<hex>.att`
  (pkg/oci/remote/options.go `AttestationTagSuffix`, remote.go `normalize`), one layer per
  envelope with media type `application/vnd.dsse.envelope.v1+json` (pkg/types/payload.go
  `DssePayloadType`) and the layer annotation `predicateType`
  (cmd/cosign/cli/attest/attest.go), config `application/vnd.oci.image.config.v1+json`
  (pkg/oci/static/options.go, the default `ConfigMediaType`) in github.com/sigstore/cosign.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envbuild.core.documents import DocumentError, json_loads
from envbuild.core.errors import RegistryError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DSSE = "application/vnd.dsse.envelope.v1+json"
CYCLONEDX = "application/vnd.cyclonedx+json"

IMAGE_MANIFESTS = (OCI_MANIFEST, DOCKER_MANIFEST)
INDEXES = (OCI_INDEX, DOCKER_LIST)

EMPTY_JSON = b"{}"
"""The empty config's bytes (image spec, "Guidance for an Empty Descriptor")."""
PREDICATE_TYPE_ANNOTATION = "predicateType"
"""cosign's layer annotation for an attestation's in-toto predicate type."""

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical(document: Mapping[str, Any]) -> bytes:
    """The bytes envbuild pushes: sorted keys, no spaces, so one document has one digest."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor (image spec descriptor.md)."""

    media_type: str
    digest: str
    size: int
    annotations: Mapping[str, str] = field(default_factory=dict)
    artifact_type: str = ""
    platform: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        }
        if self.artifact_type:
            out["artifactType"] = self.artifact_type
        if self.platform:
            out["platform"] = dict(self.platform)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    @classmethod
    def of(cls, media_type: str, data: bytes, **extra: Any) -> Descriptor:
        return cls(media_type, sha256_digest(data), len(data), **extra)


@dataclass(frozen=True)
class Document:
    """One document attached to an image, opaque bytes with their media type (the smoke
    attestation's DSSE envelope, the CycloneDX SBOM)."""

    media_type: str
    data: bytes
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def descriptor(self) -> Descriptor:
        return Descriptor.of(self.media_type, self.data, annotations=dict(self.annotations))


def artifact_manifest(
    subject: Descriptor, artifact_type: str, documents: Sequence[Document]
) -> bytes:
    """An OCI image manifest that refers to `subject`: the empty config, one layer per
    document, `artifactType` (image spec v1.1 manifest.md, "Guidelines for Artifact Usage")."""
    if not documents:
        raise ValueError("an artifact needs at least one document")
    empty = Descriptor.of(OCI_EMPTY, EMPTY_JSON)
    return canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": artifact_type,
            "config": empty.to_json(),
            "layers": [d.descriptor.to_json() for d in documents],
            "subject": Descriptor(subject.media_type, subject.digest, subject.size).to_json(),
        }
    )


def referrers_tag(digest: str) -> str:
    """ "sha256:<hex>" -> "sha256-<hex>" (distribution spec v1.1, "Referrers Tag Schema")."""
    check_digest(digest)
    return digest.replace(":", "-", 1)


def attestation_tag(digest: str) -> str:
    """ "sha256:<hex>" -> "sha256-<hex>.att", where cosign looks for attestations."""
    return referrers_tag(digest) + ".att"


def check_digest(digest: str) -> str:
    if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return digest


def referrers_index(existing: Mapping[str, Any] | None, added: Descriptor) -> bytes | None:
    """The referrers index with `added` in it, keeping every descriptor already there (the
    tag is updated, not overwritten); None when it is there already (nothing to push)."""
    manifests = list(existing.get("manifests", [])) if existing else []
    if any(isinstance(m, dict) and m.get("digest") == added.digest for m in manifests):
        return None
    manifests.append(added.to_json())
    return canonical({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests})


def attestation_config(layers: Sequence[Mapping[str, Any]]) -> bytes:
    """The image config cosign writes for its `.att` image: an OCI config whose rootfs lists
    each layer (its envelopes are stored uncompressed, so a layer's diff id is its digest)."""
    return canonical(
        {
            "architecture": "",
            "os": "",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [str(m["digest"]) for m in layers]},
        }
    )


def attestation_layers(
    existing: Mapping[str, Any] | None, envelopes: Iterable[Document]
) -> list[dict[str, Any]] | None:
    """The `.att` manifest's layers: the ones already there and each new envelope (media type
    DSSE, annotation `predicateType`); None when every envelope is there already."""
    layers = [dict(m) for m in existing.get("layers", [])] if existing else []
    known = {m.get("digest") for m in layers}
    added = [e.descriptor.to_json() for e in envelopes if e.descriptor.digest not in known]
    if not added:
        return None
    return layers + added


def attestation_manifest(layers: Sequence[Mapping[str, Any]], config: bytes) -> bytes:
    return canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": Descriptor.of(OCI_CONFIG, config).to_json(),
            "layers": list(layers),
        }
    )


def image_index(entries: Sequence[Descriptor]) -> bytes:
    """The OCI image index of a promote: one descriptor per platform (image-index.md)."""
    return canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [e.to_json() for e in entries],
        }
    )


# --- a registry's answers, checked (nonsense is a RegistryError, never a KeyError) ----------


def nonsense(what: str, url: str, why: str) -> RegistryError:
    return RegistryError(
        f"the registry answered nonsense for {what}: {why}",
        hint="the registry (or a proxy in front of it) is broken or is not an OCI registry; "
        "check the address and its logs",
        fields={"url": url, "kind": "invalid"},
    )


def parse_json(data: bytes, what: str, url: str) -> dict[str, Any]:
    try:
        doc = json_loads(data)
    except (DocumentError, UnicodeDecodeError) as err:
        raise nonsense(what, url, f"not JSON ({err})") from None
    if not isinstance(doc, dict):
        raise nonsense(what, url, "not a JSON object")
    return doc


def descriptors(doc: Mapping[str, Any], key: str, what: str, url: str) -> list[Descriptor]:
    """The descriptors under `key` ("manifests" of an index, "layers" of a manifest)."""
    items = doc.get(key, [])
    if not isinstance(items, list):
        raise nonsense(what, url, f"`{key}` is not a list")
    return [descriptor(item, what, url) for item in items]


def descriptor(item: object, what: str, url: str) -> Descriptor:
    if not isinstance(item, dict):
        raise nonsense(what, url, "a descriptor that is not an object")
    media_type, digest, size = item.get("mediaType"), item.get("digest"), item.get("size")
    annotations = item.get("annotations") or {}
    platform = item.get("platform") or {}
    if (
        not isinstance(media_type, str)
        or not isinstance(digest, str)
        or _DIGEST.fullmatch(digest) is None
        or not isinstance(size, int)
        or isinstance(size, bool)
        or size < 0
        or not isinstance(annotations, dict)
        or not all(isinstance(v, str) for v in annotations.values())
        or not isinstance(platform, dict)
    ):
        raise nonsense(what, url, f"a malformed descriptor {str(item)[:200]}")
    artifact_type = item.get("artifactType", "")
    return Descriptor(
        media_type,
        digest,
        size,
        annotations=annotations,
        artifact_type=artifact_type if isinstance(artifact_type, str) else "",
        platform={k: str(v) for k, v in platform.items() if isinstance(v, str)},
    )


def platform_of(config: Mapping[str, Any], what: str, url: str) -> dict[str, str]:
    """An image config's platform (image spec config.md: `architecture`, `os`, `variant`)."""
    arch, os_name, variant = config.get("architecture"), config.get("os"), config.get("variant")
    if not isinstance(arch, str) or not arch or not isinstance(os_name, str) or not os_name:
        raise nonsense(what, url, "an image config without `architecture` and `os`")
    platform = {"architecture": arch, "os": os_name}
    if isinstance(variant, str) and variant:
        platform["variant"] = variant
    return platform


def platform_name(platform: Mapping[str, str]) -> str:
    """{"os": "linux", "architecture": "arm64", "variant": "v8"} -> "linux/arm64/v8"."""
    parts = (platform.get("os", ""), platform.get("architecture", ""), platform.get("variant", ""))
    return "/".join(p for p in parts if p)
