"""A Docker engine that does not answer: one clear message with the next step, exit 4.

Needs no engine: DOCKER_HOST points at a socket that does not exist.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.build.pipeline import ImageJob, build_and_verify
from envbuild.core.errors import EngineError
from envbuild.engine.docker import DockerEngine
from envbuild.engine.protocol import RunResult
from envbuild.smoke.plan import SmokeJudgement


def never(result: RunResult) -> SmokeJudgement:
    raise AssertionError("nothing may run when the engine is down")


def test_dead_socket_is_engine_error_with_next_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"unix://{tmp_path}/docker.sock"
    monkeypatch.setenv("DOCKER_HOST", dead)
    engine = DockerEngine()
    job = ImageJob(
        name="down",
        context={"Dockerfile": b"FROM scratch\n"},
        lock_text="",
        lock_sha256="0" * 64,
        tag="envbuild-it/down:x",
        needs_gpu=False,
        allow_cpu=False,
        timeout_s=5,
        shm_mib=2048,
        locked_base_image="scratch",
        base_image="scratch",
    )
    with pytest.raises(EngineError) as info:
        build_and_verify(engine, job, judge=never, progress=lambda _: None)
    err = info.value
    assert err.exit_code == 4
    assert dead in err.message
    assert "dockerd" in err.hint and "DOCKER_HOST" in err.hint and "docker info" in err.hint
