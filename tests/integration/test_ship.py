"""Shipping a passing image for real: push to a registry started here (docker-registry on
127.0.0.1), the registry's refusals explained (auth, plain HTTP where TLS is expected, quota,
nobody there), the docker-archive for HPC, and BuildKit through `docker buildx`.

Pushes use a tiny image (`FROM scratch` + one file) so they take a second; the whole
build -> smoke -> push path with a real example is `make e2e`'s (tests/e2e.sh).
"""

from __future__ import annotations

import http.server
import json
import tarfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.app.evidence import archive_digest
from envbuild.build.pipeline import LOCK_SHA_LABEL, REPORT_LABEL, build_and_verify
from envbuild.core.errors import RegistryError, SmokeFailed
from envbuild.engine.buildx import BuildxEngine, BuildxOptions, buildx_available
from envbuild.engine.docker import DockerEngine
from envbuild.engine.registry import split_tag
from tests.integration.engine_cases import context_of, job, judge
from tests.integration.services import Registry, free_port, outward_ip, registry_server

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with registry_server(tmp_path_factory.mktemp("registry")) as served:
        yield served


@pytest.fixture
def tiny(engine: DockerEngine) -> Iterator[str]:
    """A one-file image (no base), tagged; removed afterwards with every ref pushed from it."""
    ref = f"envbuild-it/tiny:{uuid.uuid4().hex[:12]}"
    context = {"Dockerfile": b"FROM scratch\nCOPY hello /hello\n", "hello": ref.encode()}
    built = engine.build(context=context, labels={"envbuild.test": "tiny"}, progress=lambda _: None)
    engine.tag(built.image_id, ref, labels={})
    yield ref
    for other in engine.client.images.get(ref).tags:
        engine.client.images.remove(other)


def test_push_reports_the_digest_the_registry_stored(
    engine: DockerEngine, registry: Registry, tiny: str
) -> None:
    ref = f"{registry.host}/envbuild-it/tiny:{tiny.rsplit(':', 1)[1]}"
    seen: list[str] = []
    digest = engine.push(tiny, ref, progress=seen.append)
    repo, tag = split_tag(ref)
    assert digest == registry.digest_of(repo.split("/", 1)[1], tag)
    assert any("Pushed" in line for line in seen)


def _refusal(engine: DockerEngine, image: str, ref: str) -> RegistryError:
    with pytest.raises(RegistryError) as info:
        engine.push(image, ref, progress=lambda _: None)
    assert info.value.exit_code == 8
    assert engine.image_exists(image)  # a refused push leaves the local image alone
    return info.value


def test_push_without_login_is_an_auth_error_with_the_login_command(
    engine: DockerEngine, tmp_path: Path, tiny: str
) -> None:
    with registry_server(tmp_path / "auth", auth=True) as locked:
        err = _refusal(engine, tiny, f"{locked.host}/envbuild-it/tiny:1")
    assert err.fields["kind"] == "auth"
    assert f"docker login {locked.host}" in err.hint


def test_plain_http_registry_off_this_machine_is_a_tls_error(
    engine: DockerEngine, tmp_path: Path, tiny: str
) -> None:
    ip = outward_ip()
    if ip is None:
        pytest.skip("this machine has no address besides loopback")
    with registry_server(tmp_path / "plain", host=ip) as plain:
        err = _refusal(engine, tiny, f"{plain.host}/envbuild-it/tiny:1")
    assert err.fields["kind"] == "tls"
    assert "insecure-registries" in err.hint
    assert "server gave HTTP response to HTTPS client" in err.message


class _OverQuota(http.server.BaseHTTPRequestHandler):
    """Answers the version check, then 429 TOOMANYREQUESTS to every upload (a quota)."""

    def log_message(self, *args: object) -> None:
        return None

    def _answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(200 if self.path == "/v2/" else 404, b"{}")

    def do_HEAD(self) -> None:
        self._answer(404, b"")

    def do_POST(self) -> None:
        error = {"code": "TOOMANYREQUESTS", "message": "storage quota exceeded"}
        self._answer(429, json.dumps({"errors": [error]}).encode())


def test_quota_refusal_is_not_retried_and_says_so(engine: DockerEngine, tiny: str) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OverQuota)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        err = _refusal(engine, tiny, f"127.0.0.1:{server.server_port}/envbuild-it/tiny:1")
    finally:
        server.shutdown()
        server.server_close()
    assert err.fields["kind"] == "quota"
    assert "toomanyrequests" in err.message


def test_no_registry_there_is_unreachable(engine: DockerEngine, tiny: str) -> None:
    err = _refusal(engine, tiny, f"127.0.0.1:{free_port()}/envbuild-it/tiny:1")
    assert err.fields["kind"] == "unreachable"


def test_save_writes_a_docker_archive_of_the_tag(
    engine: DockerEngine, tiny: str, tmp_path: Path
) -> None:
    dest = tmp_path / "out" / "tiny.tar"
    size = engine.save(tiny, dest)
    assert size == dest.stat().st_size > 0
    with tarfile.open(dest) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(tar.extractfile(manifest[0]["Config"]))  # type: ignore[arg-type]
    assert manifest[0]["RepoTags"] == [tiny]
    assert config["config"]["Labels"]["envbuild.test"] == "tiny"
    assert [p.name for p in dest.parent.iterdir()] == ["tiny.tar"]  # no temporary file left
    # What `envbuild verify ARCHIVE` compares an attestation's subject with: the image id,
    # which the archive keeps and `docker load` gives back.
    assert archive_digest(dest) == engine.client.images.get(tiny).id


@pytest.fixture(scope="module")
def buildkit(engine: DockerEngine) -> BuildxEngine:
    if not buildx_available():
        pytest.skip("the docker buildx plugin is not installed (tools/install-buildx)")
    options = BuildxOptions(cache_to=("type=inline",), secrets={"envbuild-ca": "certs/ca.crt"})
    buildx = BuildxEngine(docker_engine=engine, options=options)
    buildx.ping()
    return buildx


def test_buildkit_builds_with_cache_and_secret_mounts_and_says_so(
    buildkit: BuildxEngine, engine: DockerEngine, tag: str
) -> None:
    context = context_of("pass")
    # A cache mount and a secret mount: the classic builder rejects both.
    context["Dockerfile"] += (
        b"USER root\n"
        b"RUN --mount=type=cache,target=/root/.cache/envbuild-it "
        b"touch /root/.cache/envbuild-it/kept && ls /root/.cache/envbuild-it\n"
        b"RUN --mount=type=secret,id=envbuild-ca,target=/run/secrets/ca.crt,required=true "
        b'test "$(cat /run/secrets/ca.crt)" = PEM-FOR-THE-BUILD-ONLY\n'
        b"USER envbuild\n"
    )
    context["certs/ca.crt"] = b"PEM-FOR-THE-BUILD-ONLY"
    seen: list[str] = []
    out = build_and_verify(
        buildkit, job("pass", tag, context=context), judge=judge, progress=seen.append
    )
    assert out.builder.startswith("BuildKit (docker buildx ")
    assert any(line.startswith("candidate ") and "by BuildKit" in line for line in seen)
    labels = engine.image_labels(tag)
    assert json.loads(labels[REPORT_LABEL])["ok"] is True and LOCK_SHA_LABEL in labels
    # The secret reached the RUN step only, never a layer.
    shown = engine.client.containers.run(tag, ["ls", "/run/secrets"], remove=True, user="root")
    assert b"ca.crt" not in shown


def test_failed_smoke_is_never_pushed(engine: DockerEngine, registry: Registry, tag: str) -> None:
    # The use case pushes only what build_and_verify returned; a failure returns nothing.
    from envbuild.app.image import deliver

    with pytest.raises(SmokeFailed):
        out = build_and_verify(engine, job("crash", tag), judge=judge, progress=lambda _: None)
        deliver(engine, out, push=f"{registry.host}/envbuild-it/crash:1", save=None, progress=print)
    assert not registry.has("envbuild-it/crash", "1")
    assert not engine.image_exists(tag)
