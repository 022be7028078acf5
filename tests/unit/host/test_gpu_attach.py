"""The GPU-attach rule over engine answers (tests/fixtures/engines/README.md says which are
recorded), CDI specs as nvidia-ctk and the H200 script write them, and forced ways."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envbuild.core.errors import UserError
from envbuild.engine.facts import parse_docker_info
from envbuild.host.gpu_attach import (
    Attachment,
    EngineGpuFacts,
    choose,
    engine_facts,
    from_host_facts,
    parse_cdi_devices,
    parse_devices,
    unavailable_message,
)
from envbuild.host.probe import parse_cdi_spec

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ENGINES = sorted((FIXTURES / "engines").glob("*.json"))


def facts_of(case: dict[str, Any], *, local: bool = True) -> EngineGpuFacts:
    """What DockerEngine.gpu_facts builds, from a recorded answer instead of the socket."""
    engine = {**parse_docker_info(case["info"]), "local": local}
    specs = [
        {**parse_cdi_spec(text), "devices": list(parse_cdi_devices(text)[1]), "path": path}
        for path, text in case["specs"].items()
    ]
    return engine_facts(engine, cdi_specs=specs, runtime_hook=case["runtime_hook"])


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "engines" / name).read_text())
    return data


@pytest.mark.parametrize("path", ENGINES, ids=[p.stem for p in ENGINES])
def test_each_engine_answer_gets_its_way(path: Path) -> None:
    case = json.loads(path.read_text())
    assert choose(facts_of(case)).way == case["expect"]


def test_docker_20_here_says_none_with_each_reason() -> None:
    got = choose(facts_of(load("docker-20.10-here.json")))
    assert got.way == "none" and not got.ok
    assert got.reason == (
        "cdi: Docker 20.10.24+dfsg1 does not read CDI specs (CDI needs Docker >= 25 with "
        '"features": {"cdi": true} in daemon.json; on by default from Docker 28); '
        "gpus: no nvidia-container-runtime-hook on this machine, so docker has no `nvidia` "
        "device driver for --gpus; "
        "runtime: the engine has no `nvidia` runtime (runtimes: io.containerd.runc.v2, "
        "io.containerd.runtime.v1.linux, runc)"
    )
    message, hint = unavailable_message(got)
    assert message.startswith("the engine cannot attach NVIDIA GPUs: cdi: Docker 20.10")
    assert "nvidia-ctk --version" in hint and "--allow-cpu" in hint


def test_cdi_only_engine_takes_cdi_and_knows_gpus_would_fail() -> None:
    got = choose(facts_of(load("docker-26.1-cdi-only.json")))
    assert got.way == "cdi"
    assert got.cdi_device_ids() == ["nvidia.com/gpu=all"]
    assert got.reason == (
        "Docker 26.1.5+dfsg1 reads CDI /etc/cdi/nvidia.yaml (3 nvidia.com/gpu devices)"
    )
    checks = {c.way: c.ok for c in got.checks}
    assert checks == {"cdi": True, "gpus": False, "runtime": False}


def test_cdi_devices_by_index_and_uuid() -> None:
    facts = facts_of(load("docker-26.1-cdi-only.json"))
    uuid = "GPU-5abee598-9afc-d29b-f652-2b5153953e0b"
    assert choose(facts, devices=("0", uuid)).cdi_device_ids() == [
        "nvidia.com/gpu=0",
        f"nvidia.com/gpu={uuid}",
    ]
    missing = choose(facts, devices=("1",))
    assert missing.way == "none"
    assert "name no nvidia.com/gpu device 1 (they name 0, GPU-5abe" in missing.reason


def test_cdi_off_is_not_cdi_even_with_a_spec() -> None:
    got = choose(facts_of(load("docker-27-cdi-off.json")))
    assert got.way == "none"
    assert got.checks[0].why.startswith("Docker 27.5.1 has CDI off")


def test_toolkit_prefers_gpus_then_runtime() -> None:
    case = load("docker-toolkit-runtime.json")
    assert choose(facts_of(case)).way == "gpus"
    no_hook = choose(facts_of({**case, "runtime_hook": None}))
    assert (no_hook.way, no_hook.runtime) == ("runtime", "nvidia")


def test_discovered_devices_come_from_the_engine_even_when_remote() -> None:
    facts = facts_of(load("docker-28.3-discovered.json"), local=False)
    assert facts.cdi_devices_from == "engine"
    assert facts.cdi_devices == (
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=1",
        "nvidia.com/gpu=GPU-6f1f7a39-0d4e-8c6b-3e2a-1b5c9d0e7f21",
        "nvidia.com/gpu=all",
    )
    assert choose(facts, devices=("0", "1")).way == "cdi"


def test_a_remote_engine_without_discovered_devices_is_not_guessed() -> None:
    case = load("docker-26.1-cdi-only.json")
    got = choose(facts_of(case, local=False))
    assert got.way == "none"
    assert "cannot be seen from here (a remote engine)" in got.reason
    assert "whether it has nvidia-container-runtime-hook is unknown" in got.reason


def test_specs_outside_the_engines_folders_do_not_count() -> None:
    case = load("docker-26.1-cdi-only.json")
    moved = {**case, "specs": {"/var/run/cdi/nvidia.yaml": case["specs"]["/etc/cdi/nvidia.yaml"]}}
    assert choose(facts_of(moved)).way == "none"


def test_forcing_uses_the_way_and_keeps_the_facts_opinion() -> None:
    facts = facts_of(load("docker-20.10-here.json"))
    got = choose(facts, want="gpus", devices=("0",))
    assert (got.way, got.requested, got.devices) == ("gpus", "gpus", ("0",))
    assert got.reason.startswith("forced with --gpu-attach gpus (no nvidia-container-runtime")
    forced_runtime = choose(facts, want="runtime")
    assert forced_runtime.runtime == "nvidia"
    with pytest.raises(UserError, match="is not one of auto, cdi, gpus, runtime"):
        choose(facts, want="podman")


def test_attachment_json_is_what_reports_record() -> None:
    got = choose(facts_of(load("docker-26.1-cdi-only.json")))
    doc = got.to_json()
    assert doc["way"] == "cdi" and doc["requested"] == "auto" and doc["devices"] == ["all"]
    assert doc["checks"]["gpus"] == {
        "ok": False,
        "why": "no nvidia-container-runtime-hook on this machine, so docker has no `nvidia` "
        "device driver for --gpus",
    }
    assert isinstance(got, Attachment) and json.loads(json.dumps(doc)) == doc


def test_nvidia_ctk_spec_shape_with_sorted_keys() -> None:
    text = (FIXTURES / "cdi" / "nvidia-ctk-sorted.yaml").read_text()
    assert parse_cdi_devices(text) == (
        "nvidia.com/gpu",
        ("0", "1", "GPU-6f1f7a39-0d4e-8c6b-3e2a-1b5c9d0e7f21", "all"),
    )


def test_json_spec_and_other_vendors() -> None:
    text = (FIXTURES / "cdi" / "other-vendor.json").read_text()
    assert parse_cdi_devices(text) == ("vendor.example/fpga", ("0", "all"))
    assert parse_cdi_devices("{not json") == (None, ())
    assert parse_cdi_devices("cdiVersion: 0.5.0\n") == (None, ())


def test_indented_list_and_comments() -> None:
    text = (
        "# written by hand\n"
        'cdiVersion: "0.6.0"\n'
        "kind: 'nvidia.com/gpu'  # the vendor and class\n"
        "devices:\n"
        "  - name: '0'\n"
        "    containerEdits:\n"
        "      deviceNodes:\n"
        "        - path: /dev/nvidia0\n"
        "      env:\n"
        "        - name=not-a-device\n"
        "  - name: all # every GPU\n"
        "    containerEdits: {}\n"
    )
    assert parse_cdi_devices(text) == ("nvidia.com/gpu", ("0", "all"))


def test_recorded_host_facts() -> None:
    recorded = json.loads((FIXTURES / "hosts" / "no-toolkit.json").read_text())
    facts = from_host_facts(recorded.get("facts", recorded))
    assert facts.cdi_spec_dirs == ("/etc/cdi", "/var/run/cdi")
    assert facts.cdi_devices == ()
    assert choose(facts).way == "none"
    # A spec recorded before its devices were read names `all`, as every nvidia-ctk spec does.
    old = {"path": "/etc/cdi/nvidia.yaml", "kind": "nvidia.com/gpu", "driver_versions": []}
    with_spec = from_host_facts({**recorded, "cdi": [old]})
    assert with_spec.cdi_devices == ("nvidia.com/gpu=all",)
    assert choose(with_spec, devices=("0",)).way == "none"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (None, ("all",)),
        ("ALL", ("all",)),
        ("0, 1,1", ("0", "1")),
        ("GPU-6f1f7a39-0d4e,MIG-1a2b", ("GPU-6f1f7a39-0d4e", "MIG-1a2b")),
    ],
)
def test_gpu_devices_option(text: str | None, want: tuple[str, ...]) -> None:
    assert parse_devices(text) == want


def test_gpu_devices_option_rejects_names() -> None:
    with pytest.raises(UserError) as info:
        parse_devices("0,H100")
    assert info.value.message == "--gpu-devices '0,H100': H100 is not a GPU index or UUID"
    assert info.value.exit_code == 2
