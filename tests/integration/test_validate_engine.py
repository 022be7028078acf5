"""`envbuild validate IMAGE` on the real Docker engine: the lock comes from the image's label,
the smoke payload runs in a container that is removed afterwards, one verdict.

A tiny CPU image FROM envbuild-e2e/base:bookworm (made by tests/e2e.sh; the `engine` fixture is tests/integration/conftest.py's) with a stand-in
payload (tests/cases/validate/image). Marked `engine`; skipped when no engine answers or the
base image is missing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.app import validate as validate_use_case
from envbuild.build.pipeline import LOCK_LABEL
from envbuild.engine.docker import DockerEngine
from envbuild.lock.format import dumps
from envbuild.smoke.container import ROLE_LABEL
from tests.unit.preflight.test_validate import HOSTS, make_lock

pytestmark = pytest.mark.engine

CASE = Path(__file__).resolve().parents[1] / "cases" / "validate" / "image"


def _build(engine: DockerEngine, outcome: str) -> Iterator[str]:
    context = {
        "Dockerfile": (CASE / "Dockerfile")
        .read_bytes()
        .replace(b"ARG OUTCOME=pass", f"ARG OUTCOME={outcome}".encode()),
        "payload/__main__.py": (CASE / "payload" / "__main__.py").read_bytes(),
    }
    lock_text = dumps(make_lock(name="validate-it", cuda=None))
    built = engine.build(context=context, labels={LOCK_LABEL: lock_text}, progress=lambda _: None)
    ref = f"envbuild-validate-it/{outcome}:{uuid.uuid4().hex[:12]}"
    engine.tag(built.image_id, ref, labels={})
    yield ref
    engine.remove_image(ref)


@pytest.fixture
def passing(engine: DockerEngine) -> Iterator[str]:
    yield from _build(engine, "pass")


@pytest.fixture
def failing(engine: DockerEngine) -> Iterator[str]:
    yield from _build(engine, "fail")


def _smoke_containers(engine: DockerEngine, ref: str) -> list[str]:
    ids = engine.containers(f"{ROLE_LABEL}=smoke")
    client = engine.client
    return [i for i in ids if client.containers.get(i).attrs["Config"]["Image"] == ref]


def test_passing_image(engine: DockerEngine, passing: str) -> None:
    result = validate_use_case.validate(
        target=passing,
        facts_file=HOSTS / "h200-healthy.json",
        engine=engine,
    )
    assert result.kind == "image" and result.target == passing
    assert result.exit_code == 0, [c.to_json() for c in result.checks]
    assert [c.name for c in result.checks][:1] == ["cpu-image"]
    assert result.checks[-1].name == "smoke" and result.checks[-1].status == "pass"
    assert _smoke_containers(engine, passing) == []


def test_failing_image_exit_6(engine: DockerEngine, failing: str) -> None:
    result = validate_use_case.validate(
        target=failing,
        facts_file=HOSTS / "h200-healthy.json",
        engine=engine,
    )
    assert result.exit_code == 6
    bad = [c for c in result.checks if c.status == "fail"]
    assert [c.name for c in bad] == ["smoke:loss-falling", "smoke"]
    assert bad[0].next_step == "stand-in hint"
    assert _smoke_containers(engine, failing) == []
