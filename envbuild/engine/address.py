"""Where each engine's API is reached: the addresses the registry (engine/select.py) and the
engine modules share. Its own module so that select.py may import the engine modules and they
may read the addresses without a circle."""

from __future__ import annotations

import os

DOCKER_SOCKET = "/var/run/docker.sock"


def docker_address() -> str:
    """Docker's API: $DOCKER_HOST, else its usual local socket."""
    return os.environ.get("DOCKER_HOST") or f"unix://{DOCKER_SOCKET}"


def podman_address() -> str:
    """Podman's API socket: $CONTAINER_HOST, else the rootful or rootless default
    (docs.podman.io/en/latest/markdown/podman-system-service.1.html)."""
    if os.environ.get("CONTAINER_HOST"):
        return os.environ["CONTAINER_HOST"]
    if os.geteuid() == 0:
        return "unix:///run/podman/podman.sock"
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return f"unix://{runtime}/podman/podman.sock"
