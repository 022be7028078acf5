"""The GPU-attach rule against the real engine: what `doctor` reads over the socket and what
`image`/`validate` read through docker-py give the same way and reason; on an engine that
cannot attach GPUs every way fails with exit 7 and leaves no container."""

from __future__ import annotations

import uuid

import pytest

from envbuild.build.pipeline import LOCK_SHA_LABEL
from envbuild.core.errors import GpuUnavailableError
from envbuild.engine.docker import DockerEngine
from envbuild.engine.facts import probe_engine
from envbuild.engine.protocol import RunSpec
from envbuild.host import probe as hostinfo
from envbuild.host.gpu_attach import choose, from_host_facts
from envbuild.smoke.container import ROLE_LABEL
from tests.integration.engine_cases import BASE

pytestmark = pytest.mark.engine


def _leftovers(engine: DockerEngine, mine: str) -> list[str]:
    return engine.containers(f"{LOCK_SHA_LABEL}={mine}")


def test_doctor_and_the_engine_read_the_same_way(engine: DockerEngine) -> None:
    seen_by_engine = engine.gpu_attach()
    probed = probe_engine()
    facts = {
        "engine": probed,
        "cdi": hostinfo.probe_cdi([*hostinfo.CDI_DIRS, *(probed["cdi_spec_dirs"] or [])]),
        "toolkit": hostinfo.probe_toolkit(),
    }
    seen_by_doctor = choose(from_host_facts(facts))
    assert seen_by_doctor.to_json() == seen_by_engine.to_json()


def test_no_way_here_says_why_and_starts_nothing(engine: DockerEngine) -> None:
    attach = engine.gpu_attach()
    if attach.ok:
        pytest.skip(f"this engine attaches GPUs ({attach.way})")
    assert attach.way == "none"
    assert [c.way for c in attach.checks] == ["cdi", "gpus", "runtime"]
    assert all(c.why for c in attach.checks)
    mine = uuid.uuid4().hex
    spec = RunSpec(
        image=BASE,
        command=("true",),
        labels={ROLE_LABEL: "smoke", LOCK_SHA_LABEL: mine},
    )
    with pytest.raises(GpuUnavailableError) as info:
        engine.run(spec)
    assert info.value.exit_code == 7
    assert info.value.message.startswith("the engine cannot attach NVIDIA GPUs: cdi: ")
    assert info.value.fields["gpu_attach"]["way"] == "none"
    assert _leftovers(engine, mine) == []


@pytest.mark.parametrize("way", ["cdi", "gpus", "runtime"])
def test_a_forced_way_the_engine_refuses_is_exit_7(engine: DockerEngine, way: str) -> None:
    attach = engine.gpu_attach(want=way)
    if next(c for c in attach.checks if c.way == way).ok:
        pytest.skip(f"this engine attaches GPUs through {way}")
    mine = uuid.uuid4().hex
    spec = RunSpec(
        image=BASE,
        command=("true",),
        gpu_attach=attach,
        labels={ROLE_LABEL: "smoke", LOCK_SHA_LABEL: mine},
    )
    with pytest.raises(GpuUnavailableError) as info:
        engine.run(spec)
    assert info.value.exit_code == 7
    assert info.value.fields["gpu_attach"]["way"] == way
    assert info.value.fields["engine_message"]
    assert _leftovers(engine, mine) == []
