"""A rendered context really builds on the classic builder (no BuildKit) and the image keeps
its promises: non-root user, the venv first on PATH, hash-checked pins, PIP_CONSTRAINT refusing
a swap. Needs a Docker engine, PyPI, and a local Debian 12 base image (never pulled here:
ENVBUILD_TEST_DEBIAN_IMAGE, default debian:bookworm-slim). Behind a TLS-intercepting proxy the
CA bundle of SSL_CERT_FILE / REQUESTS_CA_BUNDLE goes in as --ca-cert (the proxy case)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from envbuild.core.models import LockedPackage
from envbuild.lock.format import lock_sha256
from envbuild.matrix import Matrix
from envbuild.render import dockerfile as render
from tests.golden import fixtures

pytestmark = [pytest.mark.engine, pytest.mark.network]

# six 1.17.0's only wheel on PyPI and its published sha256 (pypi.org/simple/six/).
SIX = LockedPackage(
    name="six",
    version="1.17.0",
    hashes=("sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274",),
    source="https://pypi.org/simple",
)


def _docker(*args: str, stdin: bytes | None = None, check: bool = True) -> str:
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}  # the classic builder docker-py drives
    out = subprocess.run(
        ["docker", *args], input=stdin, capture_output=True, env=env, check=False, timeout=600
    )
    if check and out.returncode != 0:
        raise AssertionError(out.stdout.decode()[-3000:] + out.stderr.decode()[-3000:])
    return out.stdout.decode()


@pytest.fixture
def base_image() -> str:
    ref = os.environ.get("ENVBUILD_TEST_DEBIAN_IMAGE", "debian:bookworm-slim")
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI")
    probe = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"base image {ref} not present locally (set ENVBUILD_TEST_DEBIAN_IMAGE)")
    return ref


def _proxy_ca() -> bytes | None:
    for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT"):
        path = os.environ.get(var)
        if path and Path(path).is_file():
            return Path(path).read_bytes()
    return None


def test_cpu_context_builds_on_the_classic_builder(base_image: str, tmp_path: Path) -> None:
    lock = fixtures.cpu_lock()
    framework = dataclasses.replace(lock.stack.framework, index_url=None)
    lock = dataclasses.replace(
        lock, packages=(SIX,), stack=dataclasses.replace(lock.stack, framework=framework)
    )
    options = render.RenderOptions(base_image=base_image, ca_cert=_proxy_ca())
    files = render.build_context(
        lock, "lock text\n", image_dir=tmp_path, options=options, matrix=Matrix()
    )
    tag = f"envbuild-render-test:{uuid.uuid4().hex[:12]}"
    _docker("build", "--quiet", "--force-rm", "--tag", tag, "-", stdin=render.context_tar(files))
    try:
        script = (
            "id -u; command -v python; python -c 'import six; print(six.__version__)'; "
            # The constraint makes a swap a conflict before any download (offline is enough).
            "pip install --no-index --dry-run six==1.16.0 2>&1 | grep -q ResolutionImpossible "
            "&& echo kept || echo swappable; "
            "env | grep -c -E '^(PIP_CERT|SSL_CERT_FILE|REQUESTS_CA_BUNDLE)=' || true"
        )
        out = _docker("run", "--rm", "--network", "none", tag, "bash", "-c", script).split()
        assert out == ["1000", "/opt/venv/bin/python", "1.17.0", "kept", "0"]
        labels = _docker("image", "inspect", "--format", "{{json .Config.Labels}}", tag)
        assert lock_sha256("lock text\n") in labels
    finally:
        _docker("rmi", "--force", tag, check=False)
