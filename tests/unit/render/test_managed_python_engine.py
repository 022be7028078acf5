"""The rendered managed-Python step really builds (classic builder): the OS's Python installs the
lock's uv hash-checked from PyPI, uv installs the locked archive through
UV_PYTHON_INSTALL_MIRROR and checks its sha256, and the venv is made from that interpreter; a
wrong sha256 fails the build. python-build-standalone's own archives come from GitHub, which
does not answer where these tests run, so the archive is the base image's own CPython in PBS's
install_only layout (`python/bin`, `python/lib`), served from 127.0.0.1: the step's text is what
is tested, not PBS's bytes. Needs a Docker engine, PyPI, and a local Debian 12 base image with
python3 (ENVBUILD_TEST_DEBIAN_IMAGE, default debian:bookworm-slim; never pulled here)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import http.server
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.core.models import Lock, LockedPackage, ManagedPython
from envbuild.matrix import Matrix
from envbuild.render import dockerfile as render
from tests.golden import fixtures
from tests.unit.render.test_render_engine import SIX, _docker, _proxy_ca, base_image

pytestmark = [pytest.mark.engine, pytest.mark.network]
__all__ = ["base_image"]  # the fixture, imported for this module's tests

# uv 0.13.9's manylinux x86_64 wheel on PyPI and its published sha256 (pypi.org/simple/uv/),
# as images/*/envbuild.lock pin it.
UV = LockedPackage(
    name="uv",
    version="0.13.9",
    hashes=("sha256:d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19",),
    source="https://pypi.org/simple",
)
RELEASE = "20990101"
"""No python-build-standalone release has this tag: the archive is not one of theirs."""


@pytest.fixture
def mirror(base_image: str, tmp_path: Path) -> Iterator[tuple[str, str, bytes]]:
    """(mirror URL, CPython version, archive bytes): the base's CPython packed like PBS's
    install_only archives (links followed: uv refuses an archive with an absolute link, as
    Debian's sitecustomize.py is), served over HTTP on 127.0.0.1."""
    code = "import sys; print('%d.%d.%d' % sys.version_info[:3])"
    version = _docker("run", "--rm", "--network", "none", base_image, "python3", "-c", code)
    version = version.strip()
    minor = version.rsplit(".", 1)[0]
    pack = (
        f"mkdir -p /t/python/bin /t/python/lib && cp /usr/bin/python{minor} /t/python/bin/ "
        f"&& cp -rL /usr/lib/python{minor} /t/python/lib/ && tar -C /t -czf - python"
    )
    archive = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", base_image, "bash", "-c", pack],
        capture_output=True,
        check=True,
        timeout=300,
    ).stdout
    folder = tmp_path / "mirror" / RELEASE
    folder.mkdir(parents=True)
    (folder / _file_name(version)).write_bytes(archive)
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "mirror")
    )
    server = _QuietServer((_host_ip(), 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{_host_ip()}:{server.server_address[1]}", version, archive
    finally:
        server.shutdown()


def _host_ip() -> str:
    """The bridge network's gateway: the address of this machine that a build container on
    the default network reaches (`envbuild image` builds there; --network host is 127.0.0.1)."""
    gateway = _docker(
        "network", "inspect", "bridge", "--format", "{{(index .IPAM.Config 0).Gateway}}"
    )
    return gateway.strip() or "127.0.0.1"


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """uv closes the connection when a hash does not match: expected, not printed."""


def _file_name(version: str) -> str:
    return f"cpython-{version}+{RELEASE}-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz"


def _lock(version: str, sha256: str) -> Lock:
    lock = fixtures.cpu_lock()
    minor = version.rsplit(".", 1)[0]
    managed = ManagedPython(
        version=version,
        uv_key=f"cpython-{version}-linux-x86_64-gnu",
        release=RELEASE,
        url="https://github.com/astral-sh/python-build-standalone/releases/download/"
        f"{RELEASE}/{_file_name(version).replace('+', '%2B')}",
        sha256=sha256,
        bootstrap_python=minor,
    )
    framework = dataclasses.replace(lock.stack.framework, index_url=None)
    stack = dataclasses.replace(
        lock.stack, framework=framework, python=minor, os="debian12", managed_python=managed
    )
    return dataclasses.replace(lock, packages=(SIX,), installer=(UV,), stack=stack)


def _build(lock: Lock, base: str, mirror_url: str, tmp_path: Path, tag: str) -> str:
    options = render.RenderOptions(base_image=base, ca_cert=_proxy_ca())
    files = render.build_context(
        lock, "lock text\n", image_dir=tmp_path, options=options, matrix=Matrix()
    )
    mirror_arg = f"UV_PYTHON_INSTALL_MIRROR={mirror_url}"
    argv = ["build", "--force-rm", "--network", "host", "--tag", tag, "--build-arg", mirror_arg]
    return _docker(*argv, "-", stdin=render.context_tar(files), check=False)


def test_the_managed_python_step_builds_and_the_venv_runs_it(
    base_image: str, mirror: tuple[str, str, bytes], tmp_path: Path
) -> None:
    url, version, archive = mirror
    lock = _lock(version, hashlib.sha256(archive).hexdigest())
    tag = f"envbuild-managed-python-test:{uuid.uuid4().hex[:12]}"
    log = _build(lock, base_image, url, tmp_path, tag)
    try:
        assert f"Successfully tagged {tag}" in log, log[-3000:]
        script = "python -c 'import sys, six; print(sys.base_prefix, six.__version__)'"
        out = _docker("run", "--rm", "--network", "none", tag, "bash", "-c", script).split()
        assert out == [f"/opt/python/cpython-{version}-linux-x86_64-gnu", "1.17.0"]
    finally:
        _docker("rmi", "--force", tag, check=False)


def test_envbuild_image_passes_the_mirror_from_its_environment(
    base_image: str, mirror: tuple[str, str, bytes], tmp_path: Path
) -> None:
    """The engine `envbuild image` builds with, given the build arguments `app.image` takes
    from UV_PYTHON_INSTALL_MIRROR where it runs: uv fetches the archive from the mirror."""
    from envbuild.app.image import build_args
    from envbuild.engine.docker import DockerEngine

    url, version, archive = mirror
    lock = _lock(version, hashlib.sha256(archive).hexdigest())
    args = build_args(lock, {"UV_PYTHON_INSTALL_MIRROR": url, "PATH": "/bin"})
    assert args == {"UV_PYTHON_INSTALL_MIRROR": url}
    options = render.RenderOptions(base_image=base_image, ca_cert=_proxy_ca())
    files = render.build_context(
        lock, "lock text\n", image_dir=tmp_path, options=options, matrix=Matrix()
    )
    engine, lines = DockerEngine(), list[str]()
    built = engine.build(context=files, labels={}, progress=lines.append, build_args=args)
    try:
        script = "import sys; print(sys.base_prefix)"
        out = _docker("run", "--rm", "--network", "none", built.image_id, "python", "-c", script)
        assert out.strip() == f"/opt/python/cpython-{version}-linux-x86_64-gnu"
        assert any("Installed Python" in line or "cpython-" in line for line in lines), lines
    finally:
        _docker("rmi", "--force", built.image_id, check=False)


def test_a_wrong_sha256_fails_the_build(
    base_image: str, mirror: tuple[str, str, bytes], tmp_path: Path
) -> None:
    url, version, _ = mirror
    tag = f"envbuild-managed-python-test:{uuid.uuid4().hex[:12]}"
    log = _build(_lock(version, "0" * 64), base_image, url, tmp_path, tag)
    _docker("rmi", "--force", tag, check=False)
    assert "Hash mismatch" in log and "Successfully tagged" not in log, log[-3000:]
