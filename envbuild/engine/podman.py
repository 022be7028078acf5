"""What is Podman's own behind its Docker-compatible API (`podman system service`).

`DockerEngine` drives both engines through docker-py; where Podman differs it asks this
module: who answers on the socket (`answers_podman`), what the builder is called, creating a
container with CDI devices through Podman's own API, and the GPU facts it has. Which engine
a user named, and where it is reached, is the registry's (`engine/select.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import docker
import docker.errors

CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
"""Where Podman reads CDI specs (github.com/cncf-tags/container-device-interface, spec dirs)."""

HINT = (
    "start Podman's API service (`sudo systemctl start podman.socket`; rootless: `systemctl "
    "--user start podman.socket`; or `podman system service --time=0 {host} &`), or point "
    "CONTAINER_HOST at it"
)
"""What to do when the socket at `{host}` does not answer."""


def answers_podman(version: Mapping[str, Any]) -> bool:
    """Is it Podman that answered `GET /version`? Its Docker-compatible API names itself
    among the Components."""
    names = [str(c.get("Name", "")) for c in version.get("Components") or ()]
    return any("podman" in n.lower() for n in names)


def builder(version: str) -> str:
    """The builder behind Podman's build API, in words (`envbuild image` prints it)."""
    return f"Buildah (Podman {version}, Docker-compatible API)"


def cdi_devices(kwargs: Mapping[str, Any]) -> list[str]:
    """The CDI device names of docker-py `containers.create` arguments."""
    requests_: Iterable[Mapping[str, Any]] = kwargs.get("device_requests") or []
    return [d for r in requests_ if r.get("Driver") == "cdi" for d in r.get("DeviceIDs") or ()]


def create_with_cdi(client: Any, kwargs: Mapping[str, Any], cdi: list[str]) -> Any:
    """`containers.create` through Podman's own API: its Docker-compatible API drops a CDI
    DeviceRequest without an error and refuses CDI names in `Devices` (measured, Podman
    4.3.1); libpod's create takes them (docs.podman.io/en/latest/_static/api.html,
    ContainerCreateLibpod). docker-py errors are left to the caller to turn into ours."""
    spec = {
        "name": kwargs["name"],
        "image": kwargs["image"],
        "command": list(kwargs["command"]),
        "env": dict(kwargs.get("environment") or {}),
        "labels": dict(kwargs.get("labels") or {}),
        "shm_size": docker.utils.parse_bytes(kwargs["shm_size"]),
        "devices": [{"path": d} for d in cdi],
    }
    api = client.api
    resp = api.post(f"{api.base_url}/v4.0.0/libpod/containers/create", json=spec)
    if resp.status_code >= 400:
        raise docker.errors.APIError(resp.text, response=resp, explanation=resp.text)
    return client.containers.get(resp.json()["Id"])


def gpu_engine_facts(engine: dict[str, Any]) -> dict[str, Any]:
    """Podman attaches GPUs through CDI only (its `--gpus` and runtimes are not the nvidia
    ones) and reads the specs in CDI's default folders, which its /info omits."""
    return {**engine, "cdi_spec_dirs": engine["cdi_spec_dirs"] or list(CDI_DIRS), "runtimes": []}
