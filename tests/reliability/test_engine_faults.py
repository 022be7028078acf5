"""Engine and smoke faults through the whole `envbuild image` command on the real engine.

Each case builds a tiny image (tests/reliability/helpers.py: the built-in template with a
probe wheel from a local wheelhouse, FROM envbuild-e2e/base:bookworm, no network) and checks
the four promises: its own exit code, one clear message with a next step, no tag, and no
container of ours left (`docker ps -a -q` before and after). The same faults at the engine
API level are in tests/integration/test_engine_docker.py (image engineer); tests/e2e.sh
covers the no-GPU and timeout cases with the real torch-slim image.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.helpers import (
    E2E_BASE,
    assert_clear_error,
    build,
    docker_ok,
    image_exists,
    ours,
    probe_image,
    probe_wheel,
    run,
)


@pytest.fixture
def wheels(tmp_path: Path) -> tuple[Path, str]:
    folder = tmp_path / "wheels"
    _, sha = probe_wheel(folder)
    return folder, sha


@pytest.fixture
def engine() -> Iterator[None]:
    if not docker_ok():
        pytest.skip(f"no Docker engine answers, or {E2E_BASE} is missing (tests/e2e.sh prepare)")
    yield


def lock_sha(image: Path) -> str:
    import hashlib

    return hashlib.sha256((image / "envbuild.lock").read_bytes()).hexdigest()


def assert_no_trace(image: Path, tag: str, new: set[str], marker: str) -> None:
    assert not image_exists(tag), f"{tag} was tagged after a failure"
    assert ours(new, lock_sha(image)) == [], "a smoke container of this lock was left"
    assert ours(new, marker) == [], "a build container of this test was left"


def test_daemon_not_running(tmp_path: Path, wheels: tuple[Path, str]) -> None:
    # Needs no engine: DOCKER_HOST names a socket nobody listens on.
    image = probe_image(tmp_path, sha256=wheels[1])
    dead = f"unix://{tmp_path}/docker.sock"
    out = run(
        "image",
        str(image),
        "--base-image",
        E2E_BASE,
        "--find-links",
        str(wheels[0]),
        env={"DOCKER_HOST": dead},
    )
    assert_clear_error(out, 4, names=dead)
    assert "docker info" in out.err


@pytest.mark.engine
def test_build_step_failing(engine: None, tmp_path: Path, wheels: tuple[Path, str]) -> None:
    marker = f"reliability-{uuid.uuid4().hex}"
    image = probe_image(tmp_path, sha256=wheels[1], system=f"RUN echo {marker} && exit 3")
    tag = f"envbuild-rel/step:{marker[-12:]}"
    out, new = build(image, wheels[0], tag, "--allow-cpu")
    assert_clear_error(out, 5, names="build failed at Step")
    assert marker in out.err  # the failing step is named
    assert_no_trace(image, tag, new, marker)


@pytest.mark.engine
def test_disk_full_during_build(engine: None, tmp_path: Path, wheels: tuple[Path, str]) -> None:
    # Simulated honestly inside the build: a build container's /dev/shm is 64 MB, so writing
    # 100 MB there fails with the kernel's ENOSPC text, as a full Docker data-root does.
    marker = f"reliability-{uuid.uuid4().hex}"
    fill = f"RUN dd if=/dev/zero of=/dev/shm/{marker} bs=1M count=100"
    image = probe_image(tmp_path, sha256=wheels[1], system=fill)
    tag = f"envbuild-rel/full:{marker[-12:]}"
    out, new = build(image, wheels[0], tag, "--allow-cpu")
    assert_clear_error(out, 3, names="ran out of disk space")
    assert "docker system df" in out.err
    assert_no_trace(image, tag, new, marker)


_CRASH = """RUN mkdir -p /opt/envbuild/payload \\
 && printf 'import sys\\nprint("MARK", file=sys.stderr)\\nsys.exit(3)\\n' > /opt/envbuild/payload/__main__.py
COPY plan.json envbuild.lock /opt/envbuild/"""

_HANG = """RUN mkdir -p /opt/envbuild/payload \\
 && printf 'import time\\nprint("MARK", flush=True)\\ntime.sleep(600)\\n' > /opt/envbuild/payload/__main__.py
COPY plan.json envbuild.lock /opt/envbuild/"""


@pytest.mark.engine
def test_smoke_payload_crashing(engine: None, tmp_path: Path, wheels: tuple[Path, str]) -> None:
    marker = f"reliability-{uuid.uuid4().hex}"
    image = probe_image(tmp_path, sha256=wheels[1], payload=_CRASH.replace("MARK", marker))
    tag = f"envbuild-rel/crash:{marker[-12:]}"
    out, new = build(image, wheels[0], tag, "--allow-cpu")
    assert_clear_error(out, 6, names="crashed (exit 3)")
    assert marker in out.err  # the payload's last stderr lines are shown
    assert_no_trace(image, tag, new, marker)


@pytest.mark.engine
def test_smoke_payload_hanging_past_its_limit(
    engine: None, tmp_path: Path, wheels: tuple[Path, str]
) -> None:
    marker = f"reliability-{uuid.uuid4().hex}"
    image = probe_image(tmp_path, sha256=wheels[1], payload=_HANG.replace("MARK", marker))
    tag = f"envbuild-rel/hang:{marker[-12:]}"
    started = time.monotonic()
    out, new = build(image, wheels[0], tag, "--allow-cpu", "--smoke-timeout", "2", "--json")
    assert out.code == 6, out.text
    doc = json.loads(out.out)
    assert doc["ok"] is False and doc["error"] == "SmokeFailed"
    assert doc["fields"]["timed_out"] is True
    assert 2 <= doc["fields"]["duration_s"] < 30
    assert doc["hint"]
    assert time.monotonic() - started < 120
    assert_no_trace(image, tag, new, marker)


@pytest.mark.engine
def test_gpu_missing_without_allow_cpu(
    engine: None, tmp_path: Path, wheels: tuple[Path, str]
) -> None:
    from envbuild.engine.docker import DockerEngine

    if DockerEngine().has_nvidia_runtime():
        pytest.skip("this engine can attach GPUs")
    # A GPU lock (torch-slim: CUDA wheels on plain Debian 12), pins replaced by the probe.
    image = probe_image(tmp_path, sha256=wheels[1], example="torch-slim")
    tag = f"envbuild-rel/nogpu:{uuid.uuid4().hex[:12]}"
    out, new = build(image, wheels[0], tag)
    assert_clear_error(out, 7, names="GPU")
    assert "--allow-cpu" in out.err
    assert not image_exists(tag)
    assert ours(new, lock_sha(image)) == []
    assert "Step " not in out.err  # refused before building anything
