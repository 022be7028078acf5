"""The registry side of the evidence (thin I/O): documents pushed as OCI artifacts that refer
to an image digest, the referrers tag fallback and cosign's `.att` tag kept up to date, the
referrers of a digest read back, an image's platform, and a pushed image index.

Over `requests` with `envbuild.engine.registry`'s retrying session and anonymous token
handling. Every answer is bounded (bytes and the client's total time) and checked; a registry
that answers nonsense, refuses or cannot be reached is a RegistryError (exit 8).
Layouts and their sources: `envbuild.engine.oci`; docs/evidence.md, "Registry layout".
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envbuild.core.errors import RegistryError
from envbuild.engine import oci
from envbuild.engine import registry as reg

ACCEPT_MANIFEST = ", ".join((*oci.IMAGE_MANIFESTS, *oci.INDEXES))
MAX_ENTRIES = 1000
"""Referrers of a digest, and layers of one manifest, read at most: more is refused, not cut
(a cut list could hide the one passing attestation). cosign refuses more than 1000 layers
in its tags too (pkg/oci/remote/signatures.go `maxLayers`)."""


@dataclass(frozen=True)
class Limits:
    request_s: float = 15.0
    """One request's connect and read timeout."""
    total_s: float = 300.0
    """Everything one client asks, together."""
    manifest_bytes: int = reg.MAX_MANIFEST_BYTES
    blob_bytes: int = 32 << 20
    """A document or config envbuild reads back (an SBOM of a large image is a few MiB)."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Manifest:
    media_type: str
    body: bytes
    digest: str

    @property
    def descriptor(self) -> oci.Descriptor:
        return oci.Descriptor(self.media_type, self.digest, len(self.body))


@dataclass(frozen=True)
class Referrer:
    """One artifact found for a digest, with its documents; `source` is where it was found:
    "api" (referrers API), "tag" (the referrers tag fallback) or "att" (cosign's tag)."""

    descriptor: oci.Descriptor
    source: str
    documents: tuple[oci.Document, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Attached:
    digest: str
    """The artifact manifest's digest."""
    referrers: str
    """ "api": the registry lists it itself (`OCI-Subject`); "tag": the fallback tag."""
    attestation_tag: str | None
    """The `.att` tag updated, when the artifact held DSSE envelopes."""


class RegistryClient:
    """One repository of one registry, over HTTP (HTTPS; plain HTTP only on this machine, as
    the engines allow it there, `envbuild.engine.registry.is_loopback`)."""

    def __init__(
        self, registry: str, repo: str, *, limits: Limits | None = None, session: Any = None
    ) -> None:
        self.registry, self.repo = registry, repo
        self.limits = limits or Limits()
        self._session = session if session is not None else reg.retrying_session()
        self._deadline = time.monotonic() + self.limits.total_s
        self._auth: dict[str, str] = {}
        self._base: str | None = None

    # --- HTTP, bounded ------------------------------------------------------------------

    def _origin(self) -> str:
        """ "http(s)://<registry>", the scheme found on first use."""
        if self._base is None:
            self._base = self._scheme()
        return self._base

    def _url(self, path: str) -> str:
        return f"{self._origin()}/v2/{self.repo}/{path}"

    def _scheme(self) -> str:
        import requests

        schemes = ("https", "http") if reg.is_loopback(self.registry) else ("https",)
        for scheme in schemes:
            url = f"{scheme}://{self.registry}/v2/"
            try:
                ping = self._send("GET", url, {}, None, 64 << 10)
            except RegistryError as err:
                if isinstance(err.__cause__, requests.exceptions.SSLError) and scheme == "https":
                    continue
                raise
            # 200, or 401 before a login: the registry API is here (distribution spec,
            # "Determining support"); anything else is some other server.
            if ping.status not in (200, 401):
                raise oci.nonsense("GET /v2/", url, f"HTTP {ping.status}: not a registry")
            return f"{scheme}://{self.registry}"
        raise AssertionError("unreachable: the last scheme raises or returns")

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        max_bytes: int | None = None,
    ) -> Answer:
        """One request to this repository (`path` under /v2/<repo>/ or a full URL), with a
        bearer token fetched once on a 401."""
        url = path if "://" in path else self._url(path)
        limit = self.limits.manifest_bytes if max_bytes is None else max_bytes
        # The token goes to this registry only: an upload Location may name another host.
        ours = url.startswith(f"{self._origin()}/")
        answer = self._send(method, url, {**(headers or {}), **self._auth_for(ours)}, data, limit)
        if answer.status == 401 and ours and not self._auth:
            self._login(url, answer)
            answer = self._send(method, url, {**(headers or {}), **self._auth}, data, limit)
        if answer.status in (401, 403):
            raise _refused(url, answer, "auth")
        return answer

    def _auth_for(self, ours: bool) -> dict[str, str]:
        return self._auth if ours else {}

    def _login(self, url: str, refused: Answer) -> None:
        token = reg.bearer_token(
            self._session,
            refused.headers.get("WWW-Authenticate", ""),
            f"repository:{self.repo}:pull,push",
            self._timeout(url),
        )
        if token is not None:
            self._auth = {"Authorization": f"Bearer {token}"}

    def _timeout(self, url: str) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise RegistryError(
                f"the registry {self.registry} took longer than {self.limits.total_s:.0f} s",
                hint="the registry is slow or stalled; retry, or check its load",
                fields={"url": url, "kind": "timeout"},
            )
        return min(self.limits.request_s, left)

    def _send(
        self, method: str, url: str, headers: Mapping[str, str], data: bytes | None, limit: int
    ) -> Answer:
        import requests
        import urllib3

        try:
            resp = self._session.request(
                method,
                url,
                headers=dict(headers),
                data=data,
                timeout=self._timeout(url),
                stream=True,
            )
            with resp:
                body = b"" if method == "HEAD" else self._read(resp, url, limit)
                return Answer(resp.status_code, resp.headers, body)
        # urllib3's own errors (a broken or timed-out read) reach here from `raw` unwrapped.
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as err:
            raise RegistryError(
                f"the registry {self.registry} cannot be reached: {type(err).__name__}: {err}",
                hint=f"check the address and that this machine reaches {self.registry}",
                fields={"url": url, "kind": "unreachable"},
            ) from err

    def _read(self, resp: Any, url: str, limit: int) -> bytes:
        declared = resp.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            raise oci.nonsense(url, url, f"{declared} bytes, more than the {limit} expected")
        chunks: list[bytes] = []
        size = 0
        # read1: what one socket read gave (urllib3 >= 2), so a registry dribbling bytes
        # meets the deadline between reads; `read(n)` would wait for all n bytes first.
        read = getattr(resp.raw, "read1", None) or resp.raw.read
        while chunk := read(64 << 10, decode_content=True):
            size += len(chunk)
            if size > limit:
                raise oci.nonsense(url, url, f"more than the {limit} bytes expected")
            chunks.append(chunk)
            self._timeout(url)  # a registry dribbling bytes still ends at the deadline
        return b"".join(chunks)

    # --- manifests and blobs --------------------------------------------------------------

    def manifest(self, reference: str, accept: str = ACCEPT_MANIFEST) -> Manifest | None:
        """The manifest at a tag or digest, its bytes checked against the digest; None: 404."""
        answer = self.request("GET", f"manifests/{reference}", headers={"Accept": accept})
        if answer.status == 404:
            return None
        _expect(answer, (200,), f"manifest {reference}", self.registry)
        digest = reg.verified_digest(
            f"{self.registry}/{self.repo}@{reference}",
            answer.body,
            answer.headers.get("Docker-Content-Digest", ""),
        )
        if reference.startswith("sha256:") and digest != reference:
            raise oci.nonsense(
                f"manifest {reference}", self.registry, f"its bytes hash to {digest}"
            )
        media_type = answer.headers.get("Content-Type", "").partition(";")[0].strip()
        doc = oci.parse_json(answer.body, f"manifest {reference}", self.registry)
        media_type = str(doc.get("mediaType") or media_type)
        if media_type not in (*oci.IMAGE_MANIFESTS, *oci.INDEXES):
            raise oci.nonsense(f"manifest {reference}", self.registry, f"media type {media_type!r}")
        return Manifest(media_type, answer.body, digest)

    def put_manifest(self, reference: str, media_type: str, body: bytes) -> Answer:
        answer = self.request(
            "PUT", f"manifests/{reference}", headers={"Content-Type": media_type}, data=body
        )
        _expect(answer, (200, 201), f"the manifest push to {reference}", self.registry)
        return answer

    def put_blob(self, data: bytes) -> str:
        """A blob pushed in one request (distribution spec, "Pushing a blob monolithically"),
        unless the registry has it already."""
        digest = oci.sha256_digest(data)
        if self.request("HEAD", f"blobs/{digest}").status == 200:
            return digest
        start = self.request("POST", "blobs/uploads/")
        _expect(start, (202,), "a blob upload", self.registry)
        location = start.headers.get("Location", "")
        if not location:
            raise oci.nonsense("a blob upload", self.registry, "no Location header")
        if location.startswith("/"):
            location = self._origin() + location
        sep = "&" if "?" in location else "?"
        done = self.request(
            "PUT",
            f"{location}{sep}digest={digest}",
            headers={"Content-Type": "application/octet-stream"},
            data=data,
        )
        _expect(done, (201,), f"the blob push of {digest}", self.registry)
        return digest

    def blob(self, digest: str, max_bytes: int | None = None) -> bytes:
        limit = self.limits.blob_bytes if max_bytes is None else max_bytes
        answer = self.request("GET", f"blobs/{oci.check_digest(digest)}", max_bytes=limit)
        _expect(answer, (200,), f"blob {digest}", self.registry)
        if oci.sha256_digest(answer.body) != digest:
            raise oci.nonsense(f"blob {digest}", self.registry, "its bytes hash to another digest")
        return answer.body

    def referrers_api(self, digest: str) -> list[oci.Descriptor] | None:
        """The referrers API's list (distribution spec v1.1, "Listing Referrers"); None when
        the registry has no such API (404: docker-registry 2.8)."""
        answer = self.request(
            "GET", f"referrers/{oci.check_digest(digest)}", headers={"Accept": oci.OCI_INDEX}
        )
        if answer.status == 404:
            return None
        _expect(answer, (200,), f"the referrers of {digest}", self.registry)
        index = oci.parse_json(answer.body, f"the referrers of {digest}", self.registry)
        return oci.descriptors(index, "manifests", f"the referrers of {digest}", self.registry)


def _expect(answer: Answer, statuses: Sequence[int], what: str, registry: str) -> None:
    if answer.status in statuses:
        return
    raise _refused(f"{registry}: {what}", answer, "other")


def _refused(what: str, answer: Answer, kind: str) -> RegistryError:
    text = answer.body[:500].decode("utf-8", "replace").strip()
    kind = {429: "quota", 413: "quota", 401: "auth", 403: "auth"}.get(answer.status, kind)
    hints = {
        "auth": "the registry wants credentials envbuild does not have (only anonymous tokens "
        "are asked for): use a registry or repository that allows it",
        "quota": "the registry refused for a quota or rate limit: wait and rerun",
        "other": "read the registry's message",
    }
    return RegistryError(
        f"{what}: the registry answered HTTP {answer.status} {text}",
        hint=hints[kind],
        fields={"status": answer.status, "kind": kind},
    )


# --- the operations -------------------------------------------------------------------------


def attestation(envelope: bytes, predicate_type: str) -> oci.Document:
    """A DSSE envelope as a document: its media type and cosign's `predicateType` annotation."""
    return oci.Document(oci.DSSE, envelope, {oci.PREDICATE_TYPE_ANNOTATION: predicate_type})


def subject(client: RegistryClient, digest: str) -> Manifest:
    """The image manifest (or index) `digest` names; RegistryError when the registry lacks it."""
    found = client.manifest(oci.check_digest(digest))
    if found is None:
        raise RegistryError(
            f"{client.registry}/{client.repo}@{digest} is not in the registry",
            hint="push the image first (`envbuild image DIR --push REF`) and use the digest "
            "it reports",
            fields={"digest": digest, "kind": "missing"},
        )
    return found


def attach(
    client: RegistryClient, digest: str, artifact_type: str, documents: Sequence[oci.Document]
) -> Attached:
    """Push `documents` as one OCI artifact whose `subject` is the image `digest`: blobs, the
    manifest by its digest; then, when the registry does not say it lists referrers itself
    (no `OCI-Subject` header: distribution spec v1.1, "Pushing Manifests with Subject"), the
    referrers tag; and cosign's `.att` tag for the DSSE envelopes among them."""
    image = subject(client, digest)
    client.put_blob(oci.EMPTY_JSON)
    for document in documents:
        client.put_blob(document.data)
    body = oci.artifact_manifest(image.descriptor, artifact_type, documents)
    pushed = oci.sha256_digest(body)
    answer = client.put_manifest(pushed, oci.OCI_MANIFEST, body)
    listed = answer.headers.get("OCI-Subject", "") == digest
    if not listed:
        added = oci.Descriptor(oci.OCI_MANIFEST, pushed, len(body), artifact_type=artifact_type)
        update_referrers_tag(client, digest, added)
    envelopes = [d for d in documents if d.media_type == oci.DSSE]
    att = update_attestation_tag(client, digest, envelopes) if envelopes else None
    return Attached(pushed, "api" if listed else "tag", att)


def update_referrers_tag(client: RegistryClient, digest: str, added: oci.Descriptor) -> None:
    """The referrers tag with `added` appended to what it holds (a 404 starts an empty index;
    anything but an index there is refused, as the spec asks, rather than overwritten)."""
    tag = oci.referrers_tag(digest)
    current = client.manifest(tag, accept=oci.OCI_INDEX)
    existing: dict[str, Any] | None = None
    if current is not None:
        if current.media_type != oci.OCI_INDEX:
            raise RegistryError(
                f"the tag {tag} of {client.repo} holds a {current.media_type}, not the "
                "referrers index the OCI distribution spec puts there",
                hint=f"something else uses the tag {tag}; move it away, then attach again",
                fields={"tag": tag, "kind": "invalid"},
            )
        existing = oci.parse_json(current.body, f"tag {tag}", client.registry)
        oci.descriptors(existing, "manifests", f"tag {tag}", client.registry)  # checked
    body = oci.referrers_index(existing, added)
    if body is not None:
        client.put_manifest(tag, oci.OCI_INDEX, body)


def update_attestation_tag(
    client: RegistryClient, digest: str, envelopes: Iterable[oci.Document]
) -> str | None:
    """cosign's `sha256-<hex>.att` with `envelopes` appended to the layers it holds (cosign
    appends too); the tag, or None when every envelope was there already."""
    tag = oci.attestation_tag(digest)
    current = client.manifest(tag, accept=oci.OCI_MANIFEST)
    existing = None
    if current is not None:
        existing = oci.parse_json(current.body, f"tag {tag}", client.registry)
        oci.descriptors(existing, "layers", f"tag {tag}", client.registry)  # checked
    layers = oci.attestation_layers(existing, envelopes)
    if layers is None:
        return tag
    config = oci.attestation_config(layers)
    client.put_blob(config)
    client.put_manifest(tag, oci.OCI_MANIFEST, oci.attestation_manifest(layers, config))
    return tag


def _documents(client: RegistryClient, reference: str) -> tuple[oci.Document, ...]:
    found = client.manifest(reference, accept=oci.OCI_MANIFEST)
    if found is None:
        return ()
    doc = oci.parse_json(found.body, f"manifest {reference}", client.registry)
    layers = oci.descriptors(doc, "layers", f"manifest {reference}", client.registry)
    return tuple(
        oci.Document(layer.media_type, client.blob(layer.digest), dict(layer.annotations))
        for layer in _capped(layers, f"manifest {reference}", client.registry)
    )


def _capped(items: list[oci.Descriptor], what: str, url: str) -> list[oci.Descriptor]:
    if len(items) > MAX_ENTRIES:
        raise oci.nonsense(what, url, f"{len(items)} entries, more than {MAX_ENTRIES}")
    return items


def referrers(client: RegistryClient, digest: str) -> list[Referrer]:
    """Every artifact that refers to `digest`, with its documents: the referrers API, else the
    referrers tag; then the `.att` envelopes not already found (cosign's tag)."""
    oci.check_digest(digest)
    listed = client.referrers_api(digest)
    source = "api"
    if listed is None:
        source = "tag"
        index = client.manifest(oci.referrers_tag(digest), accept=oci.OCI_INDEX)
        listed = []
        if index is not None:
            doc = oci.parse_json(index.body, "the referrers tag", client.registry)
            listed = oci.descriptors(doc, "manifests", "the referrers tag", client.registry)
    found = [
        Referrer(d, source, _documents(client, d.digest))
        for d in _capped(listed, f"the referrers of {digest}", client.registry)
        if d.media_type == oci.OCI_MANIFEST
    ]
    seen = {oci.sha256_digest(doc.data) for r in found for doc in r.documents}
    att = client.manifest(oci.attestation_tag(digest), accept=oci.OCI_MANIFEST)
    if att is not None:
        envelopes = tuple(
            d for d in _documents(client, att.digest) if oci.sha256_digest(d.data) not in seen
        )
        if envelopes:
            found.append(Referrer(att.descriptor, "att", envelopes))
    return found


def platform(client: RegistryClient, digest: str) -> tuple[Manifest, dict[str, str]]:
    """The image manifest `digest` names and its platform, read from its config blob."""
    image = subject(client, digest)
    what = f"image {digest}"
    if image.media_type not in oci.IMAGE_MANIFESTS:
        raise RegistryError(
            f"{client.repo}@{digest} is a {image.media_type}, not one platform's image",
            hint="give the digest of each platform's image manifest, not of an index",
            fields={"digest": digest, "kind": "not-an-image"},
        )
    doc = oci.parse_json(image.body, what, client.registry)
    config = oci.descriptor(doc.get("config"), what, client.registry)
    blob = oci.parse_json(client.blob(config.digest), f"the config of {digest}", client.registry)
    return image, oci.platform_of(blob, f"the config of {digest}", client.registry)


def push_index(client: RegistryClient, tag: str, entries: Sequence[oci.Descriptor]) -> str:
    """An OCI image index of `entries` pushed to `tag`; its digest."""
    body = oci.image_index(entries)
    client.put_manifest(tag, oci.OCI_INDEX, body)
    return oci.sha256_digest(body)
