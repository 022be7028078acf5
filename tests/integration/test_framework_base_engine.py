"""A framework base against the real engine: a base image that holds the CPU torch wheel
(2.13.0, from this machine's wheel folder or PyPI) stands in for an NGC container. `lock`
probes it in a container, `image` builds on it and smoke-tests the image, and what the base
holds is never installed again.

Slow (the base is built once per engine, ~3 minutes): marked e2e. The extras test reads PyPI.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.app.image import ImageRequest, build_image
from envbuild.app.lock import lock_image
from envbuild.core.errors import UnsatisfiableError
from envbuild.engine.docker import DockerEngine
from envbuild.lock.format import loads
from envbuild.render.dockerfile import BuildInputs
from tests.integration.engine_cases import BASE

pytestmark = [pytest.mark.engine, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
WHEELS = REPO / ".cache" / "framework-base-wheels"
TORCH_BASE = "envbuild-it/cpu-torch-base:2.13.0"
CA = Path("/etc/ssl/certs/ca-certificates.crt")
DOCKERFILE = f"""\
FROM {BASE}
COPY wheels/ /tmp/wheels/
RUN python3 -m venv /opt/fw \\
 && /opt/fw/bin/pip install --no-index --no-deps --no-cache-dir /tmp/wheels/*.whl \\
 && rm -rf /tmp/wheels
ENV PATH=/opt/fw/bin:$PATH
"""


def _wheels() -> list[Path]:
    if not list(WHEELS.glob("torch-2.13.0*.whl")):
        WHEELS.mkdir(parents=True, exist_ok=True)
        for args in (["torch==2.13.0"], ["--no-deps", "six==1.16.0"]):
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "-d", str(WHEELS), *args],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                pytest.skip(f"cannot fetch {args[-1]}: {done.stderr.strip()[-300:]}")
    return sorted(WHEELS.glob("*.whl"))


@pytest.fixture(scope="module")
def torch_base(engine: DockerEngine) -> str:
    if not engine.image_exists(TORCH_BASE):
        context = {"Dockerfile": DOCKERFILE.encode()}
        context.update({f"wheels/{w.name}": w.read_bytes() for w in _wheels()})
        built = engine.build(context=context, labels={}, progress=lambda _: None)
        engine.tag(built.image_id, TORCH_BASE, labels={})
    return TORCH_BASE


@pytest.fixture
def image_dir(tmp_path: Path, torch_base: str) -> Iterator[Path]:
    folder = tmp_path / "fw-base"
    folder.mkdir()
    (folder / "envbuild.toml").write_text(
        f'[image]\nbase = "{torch_base}"\ndevice = "cpu"\n\n'
        '[framework]\nrequirement = "torch>=2.12"\n\n[smoke]\ntier = 1\n'
    )
    yield folder


def test_lock_probes_the_base_in_a_container(engine: DockerEngine, image_dir: Path) -> None:
    outcome = lock_image(image_dir, engine=engine)
    facts = outcome.lock.base_facts
    assert facts is not None and facts.source == "probe"
    assert (facts.framework_version, facts.python, facts.os) == ("2.13.0+cpu", "3.11", "debian12")
    assert facts.python_path == "/opt/fw/bin/python3"
    assert facts.image_id == engine.image_ids(TORCH_BASE)[0]
    assert dict(facts.packages)["six"] == "1.16.0"
    assert outcome.lock.packages == ()
    assert "has no registry digest" in outcome.warnings[0]
    assert loads(outcome.text).base_facts == facts
    assert engine.containers("envbuild.role=base-probe") == []


def test_a_gpu_request_on_a_cpu_base_says_why(engine: DockerEngine, image_dir: Path) -> None:
    text = (image_dir / "envbuild.toml").read_text().replace('device = "cpu"\n', "")
    (image_dir / "envbuild.toml").write_text(text)
    with pytest.raises(UnsatisfiableError) as info:
        lock_image(image_dir, engine=engine)
    assert info.value.exit_code == 1
    assert "holds a CPU build of torch (2.13.0+cpu)" in info.value.message


@pytest.mark.network
def test_extras_keep_the_base_versions_and_the_image_passes(
    engine: DockerEngine, image_dir: Path
) -> None:
    toml = image_dir / "envbuild.toml"
    toml.write_text(toml.read_text() + '\n[packages]\nrequirements = ["typing-inspect"]\n')
    locked = lock_image(image_dir, engine=engine).lock
    names = sorted(p.name for p in locked.packages)
    # typing-inspect needs typing-extensions, which the base holds: it is not locked again.
    assert names == ["mypy-extensions", "typing-inspect"]
    tag = f"envbuild-it/fw-base:{uuid.uuid4().hex[:12]}"
    try:
        outcome = build_image(
            image_dir=image_dir,
            request=ImageRequest(tag=tag),
            build_inputs=BuildInputs(ca_cert=CA if CA.exists() else None),
            engine=engine,
        )
        assert outcome.report["device"] == "cpu" and outcome.to_json()["gpu_attach"] is None
        versions = outcome.report["versions"]
        assert versions["framework"] == {"expected": "2.13.0+cpu", "seen": "2.13.0+cpu"}
    finally:
        if engine.image_exists(tag):
            engine.remove_image(tag)
