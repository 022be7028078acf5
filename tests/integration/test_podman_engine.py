"""The same build -> smoke -> tag path through Podman's Docker-compatible API (`podman system
service`, started here on a socket of its own), with the stand-in cases of the Docker tests;
pushing and saving from Podman; GPUs through CDI, Podman's way.

Podman keeps its own images: the e2e base is copied over from Docker as a docker-archive.
"""

from __future__ import annotations

import json
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker.types import DeviceRequest

from envbuild.build.pipeline import LOCK_SHA_LABEL, REPORT_LABEL, build_and_verify
from envbuild.core.errors import SmokeFailed
from envbuild.engine.docker import DockerEngine
from envbuild.engine.registry import split_tag
from tests.integration.engine_cases import BASE, job, judge
from tests.integration.services import Registry, podman_service, registry_server

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with registry_server(tmp_path_factory.mktemp("registry")) as served:
        yield served


@pytest.fixture(scope="module")
def podman(
    engine: DockerEngine, registry: Registry, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DockerEngine]:
    root = tmp_path_factory.mktemp("podman")
    with podman_service(root / "service", insecure=(registry.host,)) as url:
        eng = DockerEngine(base_url=url)
        eng.ping()
        if not eng.image_exists(BASE):
            archive = root / "base.tar"
            engine.save(BASE, archive)
            with archive.open("rb") as fh:
                eng.client.images.load(fh)
        yield eng


@pytest.fixture
def ptag(podman: DockerEngine) -> Iterator[str]:
    ref = f"localhost/envbuild-it/podman:{uuid.uuid4().hex[:12]}"
    yield ref
    if podman.image_exists(ref):
        podman.client.images.remove(ref, force=True)


def leftovers(eng: DockerEngine, lock_sha256: str) -> list[str]:
    return eng.containers(f"{LOCK_SHA_LABEL}={lock_sha256}")


def test_podman_answers_and_builds_with_buildah(podman: DockerEngine) -> None:
    product, version = podman.server()
    assert (product, version[:1].isdigit()) == ("Podman", True)
    assert podman.builder().startswith(f"Buildah (Podman {version}")


def test_pass_through_podman_tags_with_the_labels(podman: DockerEngine, ptag: str) -> None:
    j = job("pass", ptag)
    out = build_and_verify(podman, j, judge=judge, progress=lambda _: None)
    labels = podman.image_labels(ptag)
    assert labels[LOCK_SHA_LABEL] == j.lock_sha256
    assert json.loads(labels[REPORT_LABEL])["ok"] is True
    assert out.builder.startswith("Buildah (Podman ")
    assert leftovers(podman, j.lock_sha256) == []


def test_failure_through_podman_tags_nothing_and_leaves_nothing(
    podman: DockerEngine, ptag: str
) -> None:
    j = job("crash", ptag)
    with pytest.raises(SmokeFailed):
        build_and_verify(podman, j, judge=judge, progress=lambda _: None)
    assert not podman.image_exists(ptag)
    assert leftovers(podman, j.lock_sha256) == []


def test_push_and_save_from_podman(
    podman: DockerEngine, registry: Registry, ptag: str, tmp_path: Path
) -> None:
    # A one-file image: the push takes a second (the smoke path is tested above).
    context = {"Dockerfile": b"FROM scratch\nCOPY hello /hello\n", "hello": ptag.encode()}
    built = podman.build(context=context, labels={}, progress=lambda _: None)
    podman.tag(built.image_id, ptag, labels={"envbuild.test": "tiny"})
    ref = f"{registry.host}/envbuild-it/podman:{ptag.rsplit(':', 1)[1]}"
    digest = podman.push(ptag, ref, progress=lambda _: None)
    repo, tag = split_tag(ref)
    assert digest == registry.digest_of(repo.split("/", 1)[1], tag)
    podman.client.images.remove(ref)
    size = podman.save(ptag, tmp_path / "podman.tar")
    assert size > 0
    with tarfile.open(tmp_path / "podman.tar") as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
    assert manifest[0]["RepoTags"] == [ptag]


def test_cdi_devices_reach_the_container_through_podmans_own_api(
    podman: DockerEngine, ptag: str
) -> None:
    # Podman 4.3's compatible API drops a CDI DeviceRequest silently; envbuild creates such
    # containers through libpod's API. A spec of a kind no GPU code reads stands in for
    # nvidia.com/gpu: its only edit is an environment variable the container must see.
    spec_dir = Path("/var/run/cdi")
    if not spec_dir.parent.is_dir():
        pytest.skip("/var/run is missing")
    made = not spec_dir.exists()
    spec_dir.mkdir(exist_ok=True)
    spec = spec_dir / f"envbuild-it-{uuid.uuid4().hex[:8]}.json"
    kind = "envbuild-it.example/gpu"
    spec.write_text(
        json.dumps(
            {
                "cdiVersion": "0.5.0",
                "kind": kind,
                "devices": [{"name": "all", "containerEdits": {"env": ["ENVBUILD_IT_CDI=on"]}}],
            }
        )
    )
    container = None
    try:
        build_and_verify(podman, job("pass", ptag), judge=judge, progress=lambda _: None)
        container = podman._create(
            {
                "image": ptag,
                "command": ["sh", "-c", "echo cdi=$ENVBUILD_IT_CDI"],
                "name": f"envbuild-it-cdi-{uuid.uuid4().hex[:8]}",
                "shm_size": "64m",
                "labels": {"envbuild.role": "test"},
                "device_requests": [DeviceRequest(driver="cdi", device_ids=[f"{kind}=all"])],
            }
        )
        container.start()
        assert container.wait(timeout=60)["StatusCode"] == 0
        assert container.logs().strip() == b"cdi=on"
    finally:
        spec.unlink()
        if made:
            spec_dir.rmdir()
        if container is not None:
            container.remove(force=True)
