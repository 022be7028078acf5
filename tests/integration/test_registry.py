"""Base-image digests from a real registry (docker-registry on 127.0.0.1, started here), and
what `lock` does with a registry that lies about a manifest's digest. No engine needed: the
image is pushed over the registry's HTTP API."""

from __future__ import annotations

import hashlib
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.core.errors import RegistryError
from envbuild.engine.registry import is_loopback, registry_digest
from tests.integration.services import Registry, free_port, registry_server


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with registry_server(tmp_path_factory.mktemp("registry")) as served:
        yield served


def test_digest_of_a_local_registry_is_the_sha256_of_its_manifest(registry: Registry) -> None:
    pushed = registry.put_image("envbuild-it/base", "bookworm")
    # Plain HTTP on 127.0.0.1, as the engines allow it there without configuration.
    assert is_loopback(registry.host)
    assert registry_digest(f"{registry.host}/envbuild-it/base:bookworm") == pushed
    assert registry.digest_of("envbuild-it/base", "bookworm") == pushed


def test_unknown_tag_and_no_registry_are_unpinned_at_once(registry: Registry) -> None:
    assert registry_digest(f"{registry.host}/envbuild-it/base:missing") is None
    started = time.monotonic()
    assert registry_digest(f"127.0.0.1:{free_port()}/nobody/here:1") is None
    assert time.monotonic() - started < 2.0  # a refused connection is not retried


class _Lying(http.server.BaseHTTPRequestHandler):
    """A registry whose Docker-Content-Digest is not the hash of the bytes it sends."""

    body = b'{"schemaVersion": 2, "tampered": true}'

    def log_message(self, *args: object) -> None:
        return None

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
        self.send_header("Docker-Content-Digest", "sha256:" + "0" * 64)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


def test_a_manifest_that_does_not_hash_to_its_digest_is_refused(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Lying)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(RegistryError) as info:
            registry_digest(f"127.0.0.1:{server.server_port}/x/y:1")
    finally:
        server.shutdown()
        server.server_close()
    err = info.value
    assert err.exit_code == 8
    assert err.fields["computed"] == "sha256:" + hashlib.sha256(_Lying.body).hexdigest()
    assert err.fields["claimed"] == "sha256:" + "0" * 64
