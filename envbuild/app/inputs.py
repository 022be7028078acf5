"""What several use cases read the same way (thin I/O): a fresh lock, the lock of a folder,
the locks in reach, this host's facts, and the container engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild import matrix as matrix_data
from envbuild.core.errors import UserError
from envbuild.core.models import Lock, Request
from envbuild.engine import select
from envbuild.engine.protocol import ContainerEngine
from envbuild.lock.format import check_fresh, loads, lock_path, read_lock_text
from envbuild.request.parse import load_request

if TYPE_CHECKING:
    from envbuild.engine.buildx import BuildxOptions


def load_fresh_text(
    image_dir: Path, *, matrix_overlay: Path | None = None
) -> tuple[Request, Lock, str]:
    """Request, lock and the lock text it checked, refusing a stale, edited or missing lock
    (StaleLockError, exit 1, whose hint is the command to run). The Dockerfile, the build
    context and the `envbuild.lock.sha256` label must come from these bytes, not from a second
    read that a concurrent `envbuild lock` could have replaced in between."""
    request = load_request(image_dir)
    text = read_lock_text(image_dir)
    matrix = matrix_data.load_matrix_from(matrix_overlay)
    lock = check_fresh(
        request,
        text,
        matrix.fingerprints(),
        image_dir=image_dir,
        files=project_files(image_dir, request),
    )
    assert text is not None  # check_fresh refuses a missing lock
    return request, lock, text


def project_files(image_dir: Path, request: Request) -> tuple[tuple[str, str], ...]:
    """(path, sha256) of the project files the lock of `request` reads; () without any (and
    without importing the project readers, which `lock --check` of other images never needs)."""
    installs = request.project is not None and request.project.install
    if not request.dependency_files.files and not installs:
        return ()
    from envbuild.lock import projectdeps

    return projectdeps.input_files(image_dir, request)


def load_fresh(image_dir: Path, *, matrix_overlay: Path | None = None) -> tuple[Request, Lock]:
    """`load_fresh_text` without the text."""
    request, lock, _text = load_fresh_text(image_dir, matrix_overlay=matrix_overlay)
    return request, lock


def read_lock_dir(image_dir: Path) -> tuple[str, Lock]:
    """(label, lock) of an image folder's envbuild.lock; UserError when there is none."""
    text = read_lock_text(image_dir)
    if text is None:
        raise UserError(
            f"{image_dir} has no envbuild.lock",
            hint=f"lock it first: envbuild lock {image_dir}",
        )
    return str(image_dir), loads(text, path=str(lock_path(image_dir)))


def locks_in_reach(root: Path) -> list[tuple[str, Path]]:
    """`./envbuild.lock` and `images/*/envbuild.lock` under `root`, sorted (doctor, fleet)."""
    found = []
    if (root / "envbuild.lock").is_file():
        found.append((".", root))
    for path in sorted((root / "images").glob("*/envbuild.lock")):
        found.append((f"images/{path.parent.name}", path.parent))
    return found


def host_facts(facts_file: Path | None) -> dict[str, Any]:
    """This host's facts: from a recorded file (ENVBUILD_HOST_FACTS, one host) when given,
    else probed through NVML."""
    from envbuild.host import (
        probe as hostinfo,  # NVML, sockets, the engine's API: only for host facts
    )

    if facts_file is None:
        from envbuild.engine.facts import probe_engine

        return hostinfo.probe_facts(engine=probe_engine())
    hosts = hostinfo.load_facts_file(facts_file)
    if len(hosts) != 1:
        raise UserError(
            f"{facts_file} holds {len(hosts)} hosts; this command checks one",
            hint="give a file with one host's facts, or check a fleet with "
            f"`envbuild validate --hosts {facts_file}`",
        )
    return hosts[0]


def make_engine(
    *, buildkit: bool, engine: str = select.DEFAULT_ENGINE, buildx: BuildxOptions | None = None
) -> ContainerEngine:
    """The engine `engine` names in the registry (`envbuild.engine.select`): Docker, BuildKit
    through `docker buildx` when asked, or Podman through its Docker-compatible API (the
    registry imports docker-py only when it makes one)."""
    return select.make_engine(engine, buildkit=buildkit, buildx=buildx)
