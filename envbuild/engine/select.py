"""The engine registry: every container engine envbuild can drive, by the name a user types
(`--engine`, ENVBUILD_ENGINE), with where it is reached and how it is made.

The one list of engine names: the CLI's choices, the use cases' check and the smoke-pass
store's address all read `ENGINES`. Nothing here imports docker-py at module level (the CLI
reads the names to build its options); `make_engine` imports the engine module it needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envbuild.core.errors import UserError

if TYPE_CHECKING:
    from envbuild.engine.buildx import BuildxOptions
    from envbuild.engine.protocol import ContainerEngine

from envbuild.engine.address import DOCKER_SOCKET, docker_address, podman_address

__all__ = ["DOCKER_SOCKET", "ENGINES", "docker_address", "podman_address"]


def _make_docker(*, buildkit: bool, buildx: BuildxOptions | None) -> ContainerEngine:
    if buildkit:
        from envbuild.engine.buildx import BuildxEngine

        return BuildxEngine(options=buildx)
    from envbuild.engine.docker import DockerEngine

    return DockerEngine()


def _make_podman(*, buildkit: bool, buildx: BuildxOptions | None) -> ContainerEngine:
    if buildkit:
        raise UserError(
            "--buildkit is Docker's buildx; Podman builds with Buildah",
            hint="drop --buildkit with --engine podman",
        )
    from envbuild.engine.docker import DockerEngine

    # Podman answers Docker's API; what differs (CDI devices, its GPU facts) is decided by
    # who answers on the socket (`DockerEngine.is_podman`, engine/podman.py), not by this name.
    return DockerEngine(base_url=podman_address())


@dataclass(frozen=True)
class EngineKind:
    """One engine a user can name."""

    name: str
    summary: str
    """What `--engine NAME` means, for the CLI's help."""
    address: Callable[[], str]
    """Where its API is reached (a smoke pass is recorded per engine and address)."""
    make: Callable[..., ContainerEngine]
    """(buildkit=, buildx=) -> the engine; UserError when it cannot honour them."""


ENGINES: dict[str, EngineKind] = {
    kind.name: kind
    for kind in (
        EngineKind("docker", "docker (DOCKER_HOST)", docker_address, _make_docker),
        EngineKind(
            "podman", "podman (its API socket; CONTAINER_HOST)", podman_address, _make_podman
        ),
    )
}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)
DEFAULT_ENGINE = "docker"


def kind_of(name: str) -> EngineKind:
    """The registered engine called `name`; UserError (exit 2) for any other name."""
    kind = ENGINES.get(name)
    if kind is None:
        raise UserError(f"unknown engine {name!r}", hint=f"pick one of {', '.join(ENGINES)}")
    return kind


def make_engine(
    name: str = DEFAULT_ENGINE, *, buildkit: bool = False, buildx: BuildxOptions | None = None
) -> ContainerEngine:
    """The engine `name` names: Docker (docker-py over DOCKER_HOST, or BuildKit through
    `docker buildx` when asked) or Podman through its Docker-compatible API."""
    engine: ContainerEngine = kind_of(name).make(buildkit=buildkit, buildx=buildx)
    return engine
