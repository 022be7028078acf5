"""The container engine behind one interface (glossary: engine). Implementations:
`docker_engine.DockerEngine` (docker-py, classic builder; the only module importing `docker`)
and `buildx_engine.BuildxEngine` (BuildKit through the `docker buildx` CLI, when present).
Tests of orchestration use a fake that implements this protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from envbuild.host.gpu_attach import Attachment

ProgressFn = Callable[[str], None]
"""Receives one line of build output at a time."""


@dataclass(frozen=True)
class BuildResult:
    image_id: str
    """ "sha256:..." of the candidate image (untagged)."""
    log_tail: tuple[str, ...] = ()
    builder: str = ""
    """Which builder ran, in words ("BuildKit (docker buildx 0.13.1)", "classic (Docker
    20.10.24)", "Buildah (Podman 4.3.1)"): `envbuild image` prints it."""


@dataclass(frozen=True)
class RunResult:
    exit_code: int | None
    """None when the container was killed at the time limit."""
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0
    left_behind: str = ""
    """The container's name when the engine would not remove it after the run ("" = removed):
    the caller says so and how to remove it, instead of leaving it unnoticed."""


def kept_container_note(name: str) -> str:
    """How to remove a smoke container the engine kept (`RunResult.left_behind`)."""
    return (
        f"the engine kept smoke container {name}: remove it with docker rm -f {name} "
        f"(podman rm -f {name}) and read the engine's log for why"
    )


@dataclass(frozen=True)
class RunSpec:
    image: str
    command: tuple[str, ...]
    gpus: bool = True
    """Attach NVIDIA GPUs, the way `gpu_attach` says (all of them unless `gpu_attach` names
    devices)."""
    gpu_attach: Attachment | None = None
    """The way and devices chosen (`ContainerEngine.gpu_attach`); None: the engine chooses
    by the same rule (auto, all devices)."""
    shm_size: str = "2g"
    timeout_s: int = 600
    environment: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    """Every smoke container carries `envbuild.role=smoke`, so leftovers are easy to find."""
    platform: str | None = None
    """The image's platform as the engine names it ("linux/arm64": `ENGINE_PLATFORMS`); the
    engine refuses an image of another one instead of running it. None: the engine's own."""


def gpu_missing_message() -> tuple[str, str]:
    """What is missing when a GPU cannot be attached, and how to check each part."""
    message = (
        "the engine cannot attach NVIDIA GPUs: it needs the NVIDIA driver on the host, the "
        "NVIDIA Container Toolkit (the `nvidia` runtime or its hook) and/or a CDI spec for "
        "the GPUs (/etc/cdi or /var/run/cdi)"
    )
    hint = (
        "check the driver with `nvidia-smi`, the toolkit with `nvidia-ctk --version`, the engine "
        "with `docker info | grep -i runtime` (then `sudo nvidia-ctk runtime configure "
        "--runtime=docker` and restart docker, or `sudo nvidia-ctk cdi generate --output="
        "/etc/cdi/nvidia.yaml`); or, on a machine without a GPU, pass --allow-cpu to run the "
        "smoke test's CPU path"
    )
    return message, hint


class ContainerEngine(Protocol):
    name: str

    def ping(self) -> None:
        """Raise EngineError (with what to do) when the engine is not reachable."""

    def build(
        self,
        *,
        context: Mapping[str, bytes],
        labels: Mapping[str, str],
        progress: ProgressFn,
        pull: bool = False,
        platform: str | None = None,
        build_args: Mapping[str, str] | None = None,
    ) -> BuildResult:
        """Build the context (file path -> bytes, "Dockerfile" at its root); untagged.
        `platform` ("linux/arm64") is the image's CPU architecture, another than the
        engine's own under emulation (binfmt_misc + qemu-user); None: the engine's own.
        `build_args`: values for ARGs the Dockerfile declares (`docker build --build-arg`)."""

    def run(self, spec: RunSpec) -> RunResult:
        """Run to completion or the time limit; the container is always removed afterwards."""

    def tag(self, image_id: str, ref: str, *, labels: Mapping[str, str]) -> str:
        """Tag the image as `ref` with extra labels added; returns the new image id."""

    def remove_image(self, image_id: str) -> None:
        """Remove an image (its tag, or the untagged image itself) and only it: its parent
        layers stay, as the build cache of the next build (`docker image prune` clears them).
        An image already gone, or one another image depends on, is not an error."""

    def image_labels(self, ref: str) -> dict[str, str]:
        """The labels of an image; EngineError when it does not exist."""

    def image_exists(self, ref: str) -> bool: ...

    def image_ids(self, ref: str, *, pull: bool = True) -> tuple[str, str | None]:
        """(image id, registry digest or None) of `ref`, pulled first when missing."""

    def containers(self, label: str) -> list[str]:
        """Ids of containers (running or not) carrying `label` ("key" or "key=value")."""

    def push(self, image: str, ref: str, *, progress: ProgressFn) -> str:
        """Tag `image` as `ref` and push it; the manifest digest ("sha256:...") the registry
        stored. RegistryError (with what to do) when the registry refuses."""

    def save(self, ref: str, dest: Path) -> int:
        """Write `ref` as a docker-archive (`docker save`) to `dest`, atomically; its size."""

    def gpu_attach(self, *, want: str = "auto", devices: tuple[str, ...] = ("all",)) -> Attachment:
        """How this engine attaches `devices` (`gpu_attach.choose` over its facts); way
        "none" with the reason when it cannot."""
