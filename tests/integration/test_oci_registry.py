"""Evidence attached to an image digest in a real registry (docker-registry 2.8 on 127.0.0.1,
started here: it has no referrers API, so every read goes through the referrers tag and
cosign's `.att` tag), and a registry answering nonsense (a server of this test's own).

The image is a one-file image (`FROM scratch`) pushed with `docker push`; the documents are
opaque bytes shaped like the smoke attestation (a DSSE envelope) and a CycloneDX SBOM.
"""

from __future__ import annotations

import atexit
import http.server
import json
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import requests

from envbuild.core.errors import RegistryError
from envbuild.engine import oci
from envbuild.engine import oci_registry as ocireg
from envbuild.engine.docker import DockerEngine
from tests.integration.services import Registry, registry_server
from tests.signing import forged, key_pair, smoke_envelope

SMOKE = "https://envbuild.dev/smoke/v1"
REPO = "envbuild-it/evidence"


_KEYS = Path(tempfile.mkdtemp(prefix="it-oci-keys-"))
atexit.register(shutil.rmtree, _KEYS, True)
PRIVATE, PUBLIC = key_pair(_KEYS)


def envelope(digest: str, verdict: str) -> bytes:
    """A smoke attestation about `digest`, signed with this module's key (PUBLIC)."""
    return smoke_envelope(digest, verdict, PRIVATE, name=REPO)


SBOM = json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}).encode()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with registry_server(tmp_path_factory.mktemp("registry")) as served:
        yield served


@pytest.fixture
def pushed(engine: DockerEngine, registry: Registry) -> Iterator[str]:
    """A one-file image pushed with the engine to REPO: its manifest digest."""
    name = uuid.uuid4().hex[:12]
    context = {"Dockerfile": b"FROM scratch\nCOPY hello /hello\n", "hello": name.encode()}
    built = engine.build(context=context, labels={"envbuild.test": "oci"}, progress=lambda _: None)
    ref = f"{registry.host}/{REPO}:{name}"
    engine.tag(built.image_id, ref, labels={})
    try:
        yield engine.push(ref, ref, progress=lambda _: None)
    finally:
        engine.client.images.remove(ref)


def _raw(registry: Registry, reference: str, accept: str) -> dict[str, object]:
    resp = requests.get(
        f"{registry.url}/v2/{REPO}/manifests/{reference}", headers={"Accept": accept}, timeout=10
    )
    resp.raise_for_status()
    doc: dict[str, object] = resp.json()
    return doc


@pytest.mark.engine
def test_two_artifacts_attached_and_read_back_through_both_tags(
    registry: Registry, pushed: str
) -> None:
    client = ocireg.RegistryClient(registry.host, REPO)
    assert client.referrers_api(pushed) is None  # docker-registry 2.8: no referrers API
    passed = ocireg.attestation(envelope(pushed, "passed"), SMOKE)
    first = ocireg.attach(client, pushed, oci.DSSE, [passed])
    assert first.referrers == "tag"
    assert first.attestation_tag == oci.attestation_tag(pushed)
    sbom = ocireg.attach(client, pushed, oci.CYCLONEDX, [oci.Document(oci.CYCLONEDX, SBOM)])
    assert sbom.attestation_tag is None

    # The artifact manifest, as any OCI client reads it.
    artifact = _raw(registry, first.digest, oci.OCI_MANIFEST)
    image = _raw(registry, pushed, oci.DOCKER_MANIFEST)
    assert artifact["artifactType"] == oci.DSSE
    assert artifact["config"] == {
        "mediaType": oci.OCI_EMPTY,
        "digest": oci.sha256_digest(b"{}"),
        "size": 2,
    }
    assert artifact["subject"] == {
        "mediaType": image["mediaType"],
        "digest": pushed,
        "size": len(registry.manifest(REPO, pushed).content),
    }
    # The referrers tag: updated by the second attach, not overwritten.
    index = _raw(registry, oci.referrers_tag(pushed), oci.OCI_INDEX)
    assert index["mediaType"] == oci.OCI_INDEX
    listed = [(m["digest"], m["artifactType"]) for m in index["manifests"]]  # type: ignore[attr-defined]
    assert listed == [(first.digest, oci.DSSE), (sbom.digest, oci.CYCLONEDX)]
    # cosign's tag: one layer per envelope, its predicate type annotated.
    att = _raw(registry, oci.attestation_tag(pushed), oci.OCI_MANIFEST)
    assert att["config"]["mediaType"] == oci.OCI_CONFIG  # type: ignore[index]
    assert [(layer["mediaType"], layer["annotations"]) for layer in att["layers"]] == [  # type: ignore[attr-defined]
        (oci.DSSE, {"predicateType": SMOKE})
    ]

    found = ocireg.referrers(client, pushed)
    assert [(r.source, r.descriptor.artifact_type) for r in found] == [
        ("tag", oci.DSSE),
        ("tag", oci.CYCLONEDX),
    ]
    assert [d.data for r in found for d in r.documents] == [passed.data, SBOM]

    # Attaching the same envelope again changes nothing; a new one is appended to `.att`.
    again = ocireg.attach(client, pushed, oci.DSSE, [passed])
    assert again.digest == first.digest
    assert _raw(registry, oci.referrers_tag(pushed), oci.OCI_INDEX) == index
    failed = ocireg.attestation(envelope(pushed, "failed"), SMOKE)
    ocireg.attach(client, pushed, oci.DSSE, [failed])
    att = _raw(registry, oci.attestation_tag(pushed), oci.OCI_MANIFEST)
    layers = att["layers"]
    assert isinstance(layers, list)
    assert [layer["digest"] for layer in layers] == [
        oci.sha256_digest(passed.data),
        oci.sha256_digest(failed.data),
    ]


def test_attaching_to_a_digest_the_registry_lacks_is_a_registry_error(registry: Registry) -> None:
    client = ocireg.RegistryClient(registry.host, REPO)
    with pytest.raises(RegistryError) as info:
        ocireg.attach(client, "sha256:" + "0" * 64, oci.DSSE, [oci.Document(oci.DSSE, b"{}")])
    assert info.value.exit_code == 8
    assert info.value.fields["kind"] == "missing"


class _Nonsense(http.server.BaseHTTPRequestHandler):
    """A "registry" that answers /v2/ and then, for everything, `body` (class attribute)."""

    body = b"<html>not a registry</html>"
    length: int | None = None

    def log_message(self, *args: object) -> None:
        return None

    def do_GET(self) -> None:
        body = b"{}" if self.path == "/v2/" else self.body
        length = len(body) if self.path == "/v2/" else self.length or len(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.oci.image.index.v1+json")
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def nonsense() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Nonsense)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("body", "length", "says"),
    [
        (b"<html>not a registry</html>", None, "not JSON"),
        (b'{"manifests": [{"digest": 7}]}', None, "malformed descriptor"),
        (b'{"manifests": "all of them"}', None, "is not a list"),
        (b"[]", None, "not a JSON object"),
        (b"{}", 1 << 40, "more than the"),
        (
            json.dumps(
                {
                    "manifests": [
                        {"mediaType": oci.OCI_MANIFEST, "digest": "sha256:" + "4" * 64, "size": 1}
                    ]
                    * 1001
                }
            ).encode(),
            None,
            "1001 entries, more than 1000",
        ),
    ],
)
def test_a_registry_answering_nonsense_is_a_registry_error_not_a_traceback(
    nonsense: http.server.ThreadingHTTPServer,
    monkeypatch: pytest.MonkeyPatch,
    body: bytes,
    length: int | None,
    says: str,
) -> None:
    monkeypatch.setattr(_Nonsense, "body", body)
    monkeypatch.setattr(_Nonsense, "length", length)
    client = ocireg.RegistryClient(f"127.0.0.1:{nonsense.server_port}", REPO)
    with pytest.raises(RegistryError) as info:
        ocireg.referrers(client, "sha256:" + "1" * 64)
    assert info.value.exit_code == 8
    assert info.value.fields["kind"] == "invalid"
    assert says in info.value.message


class _Dribble(http.server.BaseHTTPRequestHandler):
    """A "registry" that sends its answers one byte every 0.2 s (each read is quick, the
    whole is not: only the client's total time ends it)."""

    def log_message(self, *args: object) -> None:
        return None

    def do_GET(self) -> None:
        body = b"{}" if self.path == "/v2/" else b" " * 100 + b"{}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for byte in body if self.path != "/v2/" else [body]:
            try:
                self.wfile.write(bytes([byte]) if isinstance(byte, int) else byte)
                self.wfile.flush()
            except OSError:
                return
            time.sleep(0.2 if isinstance(byte, int) else 0)


def test_a_registry_that_dribbles_ends_at_the_clients_total_time() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dribble)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    limits = ocireg.Limits(request_s=1.0, total_s=1.5)
    client = ocireg.RegistryClient(f"127.0.0.1:{server.server_port}", REPO, limits=limits)
    started = time.monotonic()
    try:
        with pytest.raises(RegistryError) as info:
            ocireg.referrers(client, "sha256:" + "2" * 64)
    finally:
        server.shutdown()
        server.server_close()
    assert info.value.fields["kind"] == "timeout"
    assert time.monotonic() - started < 3.0


def _cli(*args: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from envbuild.cli.main import cli

    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.mark.engine
def test_promote_pushes_a_two_platform_index_only_when_both_passed(
    registry: Registry, pushed: str
) -> None:
    client = ocireg.RegistryClient(registry.host, REPO)
    # The second platform: an image whose config says arm64, pushed from blobs (no aarch64
    # build of a real example here).
    arm = registry.put_image(REPO, f"arm64-{pushed[7:19]}", architecture="arm64")
    target = f"{registry.host}/{REPO}:multi-{pushed[7:19]}"
    ocireg.attach(client, pushed, oci.DSSE, [ocireg.attestation(envelope(pushed, "passed"), SMOKE)])

    code, out = _cli("promote", "--key", str(PUBLIC), target, pushed, arm, "--json")
    assert code == 9, out
    refused = json.loads(out)
    assert refused["error"] == "PromoteRefused"
    assert refused["fields"]["refused"] == [
        {"digest": arm, "why": "no smoke attestation is attached"}
    ]
    assert not registry.has(REPO, target.rsplit(":", 1)[1])

    ocireg.attach(client, arm, oci.DSSE, [ocireg.attestation(envelope(arm, "failed"), SMOKE)])
    code, out = _cli("promote", "--key", str(PUBLIC), target, pushed, arm, "--json")
    assert code == 9
    assert (
        json.loads(out)["fields"]["refused"][0]["why"]
        == "its signed smoke attestations do not say passed"
    )

    ocireg.attach(client, arm, oci.DSSE, [ocireg.attestation(envelope(arm, "passed"), SMOKE)])
    code, out = _cli(
        "promote", "--key", str(PUBLIC), target, pushed, f"{registry.host}/{REPO}@{arm}", "--json"
    )
    assert code == 0, out
    done = json.loads(out)
    index = _raw(registry, target.rsplit(":", 1)[1], oci.OCI_INDEX)
    assert index["mediaType"] == oci.OCI_INDEX
    stored = requests.get(
        f"{registry.url}/v2/{REPO}/manifests/{target.rsplit(':', 1)[1]}",
        headers={"Accept": oci.OCI_INDEX},
        timeout=10,
    )
    assert done["digest"] == oci.sha256_digest(stored.content)
    manifests = index["manifests"]
    assert isinstance(manifests, list)
    assert [(m["digest"], m["platform"]) for m in manifests] == [
        (pushed, {"architecture": "amd64", "os": "linux"}),
        (arm, {"architecture": "arm64", "os": "linux"}),
    ]
    assert [m["mediaType"] for m in manifests] == [oci.DOCKER_MANIFEST, oci.DOCKER_MANIFEST]


def test_promote_refuses_what_cannot_make_one_index(registry: Registry) -> None:
    client = ocireg.RegistryClient(registry.host, REPO)
    one, two = (registry.put_image(REPO, f"amd64-{name}") for name in ("a", "b"))
    for digest in (one, two):
        ocireg.attach(
            client, digest, oci.DSSE, [ocireg.attestation(envelope(digest, "passed"), SMOKE)]
        )
    target = f"{registry.host}/{REPO}:x"
    code, out = _cli("promote", "--key", str(PUBLIC), target, one, two)
    assert code == 2
    assert "two images are linux/amd64" in out
    code, out = _cli("promote", "--key", str(PUBLIC), target, one, f"{registry.host}/other@{two}")
    assert code == 2
    assert "is not in" in out
    code, out = _cli("promote", "--key", str(PUBLIC), target, one, one)
    assert code == 2
    assert "is not a new image digest" in out
    code, out = _cli("promote", "--key", str(PUBLIC), f"{registry.host}/{REPO}", one)
    assert code == 2
    assert "is not a tag to promote to" in out
    assert not registry.has(REPO, "x")


class _Tokened(http.server.BaseHTTPRequestHandler):
    """A registry that wants an anonymous bearer token from its realm and has nothing else:
    every manifest and the referrers API answer 404."""

    scopes: ClassVar[list[str]] = []

    def log_message(self, *args: object) -> None:
        return None

    def _send(self, status: int, body: bytes = b"", **headers: str) -> None:
        self.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(key.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.startswith("/token"):
            self.scopes.append(self.path)
            self._send(200, b'{"token": "anonymous-t"}')
        elif self.headers.get("Authorization") != "Bearer anonymous-t":
            realm = f"http://{self.headers.get('Host')}/token"
            self._send(401, b"{}", WWW_Authenticate=f'Bearer realm="{realm}",service="test"')
        else:
            self._send(200 if self.path == "/v2/" else 404, b"{}")


def test_an_anonymous_token_is_asked_once_for_pull_and_push() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Tokened)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = ocireg.RegistryClient(f"127.0.0.1:{server.server_port}", REPO)
        assert ocireg.referrers(client, "sha256:" + "3" * 64) == []
    finally:
        server.shutdown()
        server.server_close()
    assert len(_Tokened.scopes) == 1
    assert "scope=repository%3Aenvbuild-it%2Fevidence%3Apull%2Cpush" in _Tokened.scopes[0]


def test_a_server_that_is_not_a_registry_is_said_so() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()  # 501 for every GET
    try:
        client = ocireg.RegistryClient(f"127.0.0.1:{server.server_port}", REPO)
        with pytest.raises(RegistryError) as info:
            ocireg.referrers(client, "sha256:" + "5" * 64)
    finally:
        server.shutdown()
        server.server_close()
    assert info.value.fields["kind"] == "invalid"
    assert "not a registry" in info.value.message


def test_an_answer_that_breaks_off_is_a_registry_error(
    nonsense: http.server.ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Nonsense, "body", b'{"manifests": [')
    monkeypatch.setattr(_Nonsense, "length", 4096)  # promised, never sent: the server closes
    client = ocireg.RegistryClient(f"127.0.0.1:{nonsense.server_port}", REPO)
    with pytest.raises(RegistryError) as info:
        ocireg.referrers(client, "sha256:" + "6" * 64)
    assert info.value.exit_code == 8
    assert info.value.fields["kind"] == "unreachable"


@pytest.mark.engine
def test_a_forged_attestation_in_the_registry_is_refused(registry: Registry, pushed: str) -> None:
    """Someone with push rights flips a failed verdict: promote refuses, verify says 22."""
    client = ocireg.RegistryClient(registry.host, REPO)
    flipped = forged(envelope(pushed, "failed"), lambda s: s["predicate"].update(verdict="passed"))
    ocireg.attach(client, pushed, oci.DSSE, [ocireg.attestation(flipped, SMOKE)])
    code, out = _cli("promote", "--key", str(PUBLIC), f"{registry.host}/{REPO}:f", pushed, "--json")
    assert code == 9, out
    assert "changed after it was signed" in json.loads(out)["fields"]["refused"][0]["why"]
    code, out = _cli("verify", f"{registry.host}/{REPO}@{pushed}", "--key", str(PUBLIC))
    assert code == 22, out


@pytest.mark.engine
def test_image_evidence_is_attached_and_verified_from_the_registry(
    registry: Registry, pushed: str
) -> None:
    from envbuild.app import evidence
    from envbuild.lock.format import loads, lock_sha256

    text = (Path(__file__).resolve().parents[2] / "images/torch-slim/envbuild.lock").read_text()
    report = {
        "ok": True,
        "checks": [],
        "host": {"driver": "580.159.04", "gpus": [{"name": "NVIDIA H200", "cc": "9.0"}]},
    }
    docs = evidence.make(
        lock=loads(text),
        lock_sha256=lock_sha256(text),
        report=report,
        subjects=[evidence.Subject(f"{registry.host}/{REPO}", pushed)],
        gpu_attach="cdi",
        engine="docker",
        signer=evidence.load_signer(PRIVATE),
    )
    attached = evidence.attach(docs, f"{registry.host}/{REPO}:x", pushed)
    assert len(attached) == 3
    kinds = sorted(
        d.media_type
        for r in ocireg.referrers(ocireg.RegistryClient(registry.host, REPO), pushed)
        for d in r.documents
    )
    assert kinds.count(oci.CYCLONEDX) == 1 and kinds.count(oci.DSSE) >= 2
    ref = f"{registry.host}/{REPO}@{pushed}"
    code, out = _cli("verify", ref, "--key", str(PUBLIC), "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["attestations"] == 2 and doc["digest"] == pushed
    assert doc["proven_on"] == [{"product": "NVIDIA H200", "cc": "9.0", "driver_branch": "580"}]
    other = "sha256:" + "9" * 64
    code, _out = _cli("verify", f"{registry.host}/{REPO}@{other}", "--key", str(PUBLIC))
    assert code in (8, 20)  # the registry lacks the digest, or lists no referrer of it
