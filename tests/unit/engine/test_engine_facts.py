"""Host facts get the engine's own facts from the engine layer (engine/facts.py)."""

from __future__ import annotations

from typing import Any

import pytest

from envbuild.app import inputs
from envbuild.engine import facts as engine_facts
from envbuild.engine import podman
from envbuild.host import probe as hostinfo


def test_the_host_probe_records_the_engine_facts_it_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    given = {**hostinfo.ENGINE_NOT_ASKED, "kind": "docker", "reachable": True, "error": None}
    monkeypatch.setattr(hostinfo, "_probe_gpus", lambda nvml: ({}, []))
    assert hostinfo.probe_facts(engine=given)["engine"] == given
    assert hostinfo.probe_facts()["engine"] == hostinfo.ENGINE_NOT_ASKED


def test_doctor_asks_the_engine_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def probe_engine() -> dict[str, Any]:
        asked.append("engine")
        return {**hostinfo.ENGINE_NOT_ASKED, "kind": "docker"}

    monkeypatch.setattr(engine_facts, "probe_engine", probe_engine)
    monkeypatch.setattr(hostinfo, "_probe_gpus", lambda nvml: ({}, []))
    assert inputs.host_facts(None)["engine"]["kind"] == "docker"
    assert asked == ["engine"]


def test_the_unasked_engine_has_every_field_the_probe_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    monkeypatch.setattr(engine_facts, "_docker_info_cli", _refuse)
    probed = engine_facts.probe_engine()
    assert set(probed) == set(hostinfo.ENGINE_NOT_ASKED)
    assert probed["reachable"] is False and "cli: no" in probed["error"]


def _refuse() -> dict[str, Any]:
    raise OSError("no")


def test_podman_is_told_by_who_answers_and_attaches_through_cdi_only() -> None:
    assert podman.answers_podman({"Components": [{"Name": "Podman Engine"}]})
    assert not podman.answers_podman({"Components": [{"Name": "Engine"}]})
    facts = podman.gpu_engine_facts({"cdi_spec_dirs": None, "runtimes": ["nvidia", "runc"]})
    assert facts == {"cdi_spec_dirs": list(podman.CDI_DIRS), "runtimes": []}
    kwargs = {"device_requests": [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=0"]}]}
    assert podman.cdi_devices(kwargs) == ["nvidia.com/gpu=0"]
