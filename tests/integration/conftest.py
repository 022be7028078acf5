"""Fixtures of the engine tests: a live engine (or a skip) and a throwaway tag."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from envbuild.core.errors import EngineError
from envbuild.engine.docker import DockerEngine
from tests.integration.engine_cases import BASE


@pytest.fixture(scope="module")
def engine() -> DockerEngine:
    eng = DockerEngine()
    try:
        eng.ping()
    except EngineError as err:
        pytest.skip(f"no Docker engine answers: {err.message}")
    if not eng.image_exists(BASE):
        pytest.skip(f"{BASE} is missing: `make e2e` (tests/e2e.sh) builds it")
    return eng


@pytest.fixture
def tag(engine: DockerEngine) -> Iterator[str]:
    ref = f"envbuild-it/case:{uuid.uuid4().hex[:12]}"
    yield ref
    if engine.image_exists(ref):
        engine.remove_image(ref)
