"""Real services the registry, BuildKit and Podman tests start for themselves: Debian's
`docker-registry` (the distribution registry) on a free port of 127.0.0.1, and Podman's
Docker-compatible API (`podman system service`) on a socket of their own.

Each is skipped with the reason and the command that installs it where it is missing
(`.ci/run` installs both). Nothing here is shared with other users of the machine: every
process is stopped by its own id, every file is under pytest's tmp folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

REGISTRY_BIN = "docker-registry"
# A bcrypt line for a user nobody logs in as: the registry then answers 401 to every push.
HTPASSWD = "envbuild:$2b$04$abcdefghijklmnopqrstuu5Gi0GZmtr2HBGpSk7ft0G5nt76Jrp5e\n"
START_TIMEOUT_S = 20.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def outward_ip() -> str | None:
    """An address of this machine that is not loopback (engines refuse plain HTTP there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent for UDP connect
            ip = str(sock.getsockname()[0])
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


@dataclass(frozen=True)
class Registry:
    host: str
    """ "127.0.0.1:PORT": what image references start with."""
    root: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def manifest(self, repo: str, reference: str) -> requests.Response:
        return requests.get(
            f"{self.url}/v2/{repo}/manifests/{reference}",
            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
            timeout=10,
        )

    def digest_of(self, repo: str, reference: str) -> str:
        """The manifest's digest, recomputed from its bytes (and checked against the header)."""
        resp = self.manifest(repo, reference)
        resp.raise_for_status()
        digest = "sha256:" + hashlib.sha256(resp.content).hexdigest()
        assert resp.headers["Docker-Content-Digest"] == digest
        return digest

    def has(self, repo: str, reference: str) -> bool:
        return self.manifest(repo, reference).status_code == 200

    def put_image(self, repo: str, tag: str, architecture: str = "amd64") -> str:
        """Push a tiny image by HTTP alone (one layer, a config naming `architecture`): its
        manifest digest."""
        layer = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00"
        config = {"architecture": architecture, "os": "linux", "rootfs": {}}
        config["config"] = {"Labels": {"envbuild.test.tag": tag}}  # one digest per tag
        descs = [self._blob(repo, data) for data in (json.dumps(config).encode(), layer)]
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {
                    **descs[0],
                    "mediaType": "application/vnd.docker.container.image.v1+json",
                },
                "layers": [
                    {**descs[1], "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip"}
                ],
            }
        ).encode()
        resp = requests.put(
            f"{self.url}/v2/{repo}/manifests/{tag}",
            data=manifest,
            headers={"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"},
            timeout=10,
        )
        resp.raise_for_status()
        return "sha256:" + hashlib.sha256(manifest).hexdigest()

    def _blob(self, repo: str, data: bytes) -> dict[str, object]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        start = requests.post(f"{self.url}/v2/{repo}/blobs/uploads/", timeout=10)
        start.raise_for_status()
        location = start.headers["Location"]
        if location.startswith("/"):
            location = self.url + location
        sep = "&" if "?" in location else "?"
        done = requests.put(f"{location}{sep}digest={digest}", data=data, timeout=10)
        done.raise_for_status()
        return {"digest": digest, "size": len(data)}


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited at start: {log.read_text()[-2000:]}")
        try:
            requests.get(url, timeout=1)
            return
        except requests.RequestException:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {START_TIMEOUT_S} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def need(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} is not installed (apt-get install {package}; .ci/run installs it)")
    return path


@contextmanager
def registry_server(
    root: Path, *, auth: bool = False, host: str = "127.0.0.1"
) -> Iterator[Registry]:
    """docker-registry serving from `root`; with `auth`, every request needs a login nobody has."""
    binary = need(REGISTRY_BIN, "docker-registry")
    root.mkdir(parents=True, exist_ok=True)
    address = f"{host}:{free_port(host)}"
    config = [
        "version: 0.1",
        "log:",
        "  level: warn",
        "storage:",
        "  filesystem:",
        f"    rootdirectory: {root / 'data'}",
        "  delete:",
        "    enabled: true",
        "http:",
        f"  addr: {address}",
    ]
    if auth:
        (root / "htpasswd").write_text(HTPASSWD)
        config += [
            "auth:",
            "  htpasswd:",
            "    realm: envbuild-test",
            f"    path: {root / 'htpasswd'}",
        ]
    (root / "config.yml").write_text("\n".join(config) + "\n")
    log = root / "registry.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([binary, "serve", str(root / "config.yml")], stdout=out, stderr=out)
    try:
        _wait_http(f"http://{address}/v2/", proc, log)
        yield Registry(host=address, root=root)
    finally:
        _stop(proc)


def _podman_limits() -> str:
    """containers.conf default_ulimits a container may actually get. Podman (rootful) gives
    containers nofile/nproc of 1048576, which only a process with CAP_SYS_RESOURCE may set;
    in CI sandboxes without it runc fails with "error setting rlimit type 7" (measured,
    Podman 4.3.1). Podman's own process keeps at most 32768 processes (measured)."""
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1048576)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
    return (
        f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
    )


@contextmanager
def podman_service(root: Path, *, insecure: tuple[str, ...] = ()) -> Iterator[str]:
    """`podman system service` on a socket under `root`; yields its unix:// URL. `insecure`:
    registries it may reach over plain HTTP (registries.conf)."""
    binary = need("podman", "podman")
    root.mkdir(parents=True, exist_ok=True)
    (root / "containers.conf").write_text(_podman_limits())
    (root / "registries.conf").write_text(
        "".join(f'[[registry]]\nlocation = "{host}"\ninsecure = true\n' for host in insecure)
    )
    sock = root / "podman.sock"
    env = {
        **os.environ,
        "CONTAINERS_CONF": str(root / "containers.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(root / "registries.conf"),
    }
    log = root / "podman.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, "system", "service", "--time=0", f"unix://{sock}"],
            stdout=out,
            stderr=out,
            env=env,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"podman system service did not start: {log.read_text()[-2000:]}"
                )
            time.sleep(0.1)
        yield f"unix://{sock}"
    finally:
        _stop(proc)
