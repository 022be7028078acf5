"""The build context of `envbuild image` (envbuild.app.image): wheelhouse files are read only
when the engine sends them, and the context key changes with anything the build reads."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from envbuild.app.image import BuildContext, context_key
from tests.unit.build.test_build import make_job
from tests.unit.fakes import FakeEngine


def Engine(ids: dict[str, str]) -> FakeEngine:
    """The shared fake engine holding an image id per reference (and nothing else)."""
    return FakeEngine(tags=dict(ids), images={image_id: {} for image_id in ids.values()})


DOCKERFILE = b"FROM --platform=linux/amd64 base:1 AS builder\nRUN true\nFROM base:1\nCOPY --from=builder /a /a\n"


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    path = tmp_path / "torch-1-py3-none-any.whl"
    path.write_bytes(b"wheel bytes")
    return path


def _context(wheel: Path, dockerfile: bytes = DOCKERFILE) -> BuildContext:
    return BuildContext({"Dockerfile": dockerfile}, {"wheels/" + wheel.name: wheel})


def test_wheels_are_read_when_sent(wheel: Path) -> None:
    context = _context(wheel)
    assert list(context) == ["Dockerfile", "wheels/torch-1-py3-none-any.whl"]
    assert len(context) == 2
    wheel.write_bytes(b"changed")
    assert context["wheels/torch-1-py3-none-any.whl"] == b"changed"  # read now, not before


def test_the_key_follows_the_context_the_base_and_the_builder(wheel: Path) -> None:
    job = replace(make_job(), context=_context(wheel))
    engine = Engine({"base:1": "sha256:1"})
    key = context_key(engine, job)
    assert len(key) == 64 and key == context_key(engine, job)
    os.utime(wheel, ns=(1, 1))  # a wheel with another mtime
    assert context_key(engine, job) != key
    key = context_key(engine, job)
    other = replace(job, context=_context(wheel, DOCKERFILE + b"RUN false\n"))
    assert context_key(engine, other) != key
    assert context_key(Engine({"base:1": "sha256:2"}), job) != key
    assert context_key(Engine({}), job) == ""  # the build pulls it
    assert context_key(engine, replace(job, context={"Dockerfile": DOCKERFILE})) == ""
