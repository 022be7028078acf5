"""doctor: one verdict per recorded host, memory-health and CDI variants, the CLI's exact output."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envbuild.cli.main import cli
from envbuild.lock.format import dumps
from envbuild.preflight import doctor
from tests.unit.preflight.test_validate import HOSTS, facts, make_lock


def problems(f: dict[str, Any], **kw: Any) -> list[str]:
    return [x.name for x in doctor.check_host(f, **kw) if x.status == "problem"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("h200-healthy", []),
        ("old-driver", ["driver"]),
        ("mismatch", ["driver-mismatch"]),
        ("no-toolkit", ["gpu-runtime"]),
        ("small-shm", ["shm"]),
    ],
)
def test_verdict_per_recorded_host(name: str, expected: list[str]) -> None:
    assert problems(facts(name)) == expected


def test_every_problem_has_a_next_step() -> None:
    for name in ("old-driver", "mismatch", "no-toolkit", "small-shm"):
        for f in doctor.check_host(facts(name)):
            if f.status == "problem":
                assert f.next_step, (name, f.name)


def test_mismatch_says_reboot_not_rebuild() -> None:
    (f,) = [x for x in doctor.check_host(facts("mismatch")) if x.status == "problem"]
    assert "580.95.05" in f.detail and "570.124.06" in f.detail
    assert f.next_step.startswith("reboot the host") and "do not rebuild" in f.next_step


def _h200() -> dict[str, Any]:
    return copy.deepcopy(facts("h200-healthy"))


@pytest.mark.parametrize(
    ("patch", "check", "status"),
    [
        ({"ecc": {"volatile_uncorrected": 2, "aggregate_uncorrected": 5}}, "gpu0-ecc", "problem"),
        ({"ecc": {"enabled": False}}, "gpu0-ecc", "info"),
        ({"remapped_rows": {"pending": True}}, "gpu0-remap", "problem"),
        ({"remapped_rows": {"failure": True}}, "gpu0-remap", "problem"),
        ({"remapped_rows": {"uncorrectable": 3}}, "gpu0-remap", "info"),
        ({"retired_pages": {"pending": True, "double_bit": 1}}, "gpu0-retired", "problem"),
        ({"retired_pages": {"single_bit": 4, "double_bit": 0}}, "gpu0-retired", "info"),
        ({"persistence_mode": False}, "gpu0-persistence", "info"),
        ({"mig_mode": True}, "gpu0-mig", "info"),
    ],
)
def test_gpu_health(patch: dict[str, Any], check: str, status: str) -> None:
    f = _h200()
    gpu = f["gpus"][0]
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(gpu.get(key), dict):
            gpu[key].update(value)
        else:
            gpu[key] = value
    found = {x.name: x for x in doctor.check_host(f)}
    assert found[check].status == status
    if status == "problem":
        assert found[check].next_step


def test_no_gpus_with_a_working_driver_is_a_problem() -> None:
    f = _h200()
    f["gpus"] = []
    assert problems(f) == ["gpus"]


def _with_docker(f: dict[str, Any], runtimes: list[str]) -> dict[str, Any]:
    f["engine"] = dict(
        f["engine"],
        reachable=True,
        runtimes=runtimes,
        server_version="27.5.1",
        cdi_spec_dirs=["/etc/cdi", "/var/run/cdi"],
    )
    return f


def test_cdi_spec_instead_of_runtime_is_enough() -> None:
    f = _with_docker(_h200(), ["runc"])
    f["cdi"] = [
        {
            "path": "/var/run/cdi/nvidia.yaml",
            "kind": "nvidia.com/gpu",
            "driver_versions": ["580.159.04"],
        }
    ]
    found = {x.name: x for x in doctor.check_host(f)}
    assert found["gpu-runtime"].status == "ok"
    assert "CDI /var/run/cdi/nvidia.yaml" in found["gpu-runtime"].detail
    assert "cdi" not in found


def test_cdi_spec_unread_by_docker_is_a_problem() -> None:
    f = _with_docker(_h200(), ["runc"])
    f["engine"]["cdi_spec_dirs"] = []
    f["cdi"] = [
        {
            "path": "/etc/cdi/nvidia.yaml",
            "kind": "nvidia.com/gpu",
            "driver_versions": ["580.159.04"],
        }
    ]
    (x,) = [x for x in doctor.check_host(f) if x.name == "gpu-runtime"]
    assert x.status == "problem" and '"cdi": true' in x.next_step


def test_stale_cdi_spec() -> None:
    f = _with_docker(_h200(), ["runc"])
    f["cdi"] = [
        {
            "path": "/etc/cdi/nvidia.yaml",
            "kind": "nvidia.com/gpu",
            "driver_versions": ["570.124.06"],
        }
    ]
    (stale,) = [x for x in doctor.check_host(f) if x.name == "cdi"]
    assert stale.status == "problem"
    assert "570.124.06" in stale.detail and "580.159.04" in stale.detail
    assert "nvidia-ctk cdi generate" in stale.next_step


def test_stale_cdi_spec_by_time_when_it_names_no_version() -> None:
    f = _with_docker(_h200(), ["nvidia", "runc"])
    f["driver"]["library_mtime"] = 2_000_000_000
    f["cdi"] = [
        {
            "path": "/etc/cdi/nvidia.json",
            "kind": "nvidia.com/gpu",
            "driver_versions": [],
            "mtime": 1_900_000_000,
        }
    ]
    assert problems(f) == ["cdi"]


def test_engine_socket_without_answer_is_a_problem() -> None:
    f = _h200()
    f["engine"] = dict(f["engine"], socket="/var/run/docker.sock", error="permission denied")
    (x,) = [x for x in doctor.check_host(f) if x.name == "engine"]
    assert x.status == "problem" and "docker group" in x.next_step


def test_locks_in_reach_are_informational() -> None:
    cu13 = make_lock(name="cu13", cuda="13.0.0", toolkit="580.65.06", minor_compat="580")
    locks = [("images/torch-train", make_lock()), ("images/cu13", cu13)]
    on_h200 = {x.name: x for x in doctor.check_host(facts("h200-healthy"), locks=locks)}
    assert on_h200["lock images/torch-train"].status == "ok"
    assert on_h200["lock images/cu13"].status == "ok"
    on_old = {x.name: x for x in doctor.check_host(facts("small-shm"), locks=locks)}
    assert on_old["lock images/torch-train"].status == "ok"
    assert on_old["lock images/cu13"].status == "info"
    assert on_old["lock images/cu13"].detail.startswith("would not run: driver 550.127.05 < 580")


# --- CLI -----------------------------------------------------------------------------------------

H200_TABLE = """\
host vm: driver 580.159.04, CUDA 13.0, 1 GPU

status  check   detail
ok      driver  driver 580.159.04, supports CUDA 13.0
ok      gpu0    NVIDIA H200 cc 9.0, 143771 MiB, 35 C, power limit 700 W
info    engine  no container engine here: images cannot run on this host (`envbuild smoke` still checks the host's own Python stack)
ok      shm     /dev/shm is 131072 MiB

next steps:
  engine: install Docker to build and validate images on this host

verdict: healthy
"""


def test_cli_exact_output_on_recorded_h200(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no locks in reach
    res = CliRunner().invoke(
        cli, ["doctor"], env={"ENVBUILD_HOST_FACTS": str(HOSTS / "h200-healthy.json")}
    )
    assert res.exit_code == 0, res.output
    assert res.output == H200_TABLE


def test_cli_json_is_facts_plus_findings_and_feeds_validate_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(cli, ["doctor", "--json", "--host-facts", str(HOSTS / "small-shm.json")])
    assert res.exit_code == 1
    doc = json.loads(res.output)
    assert doc["ok"] is False
    assert doc["hostname"] == "l4-node" and doc["schema"] == 1
    assert [f["check"] for f in doc["findings"] if f["status"] == "problem"] == ["shm"]
    # The same object is a host for the fleet view.
    Path("hosts.jsonl").write_text(res.output)
    lock_dir = Path("images/torch-train")
    lock_dir.mkdir(parents=True)
    (lock_dir / "envbuild.lock").write_text(dumps(make_lock()))
    fleet = runner.invoke(cli, ["validate", "--hosts", "hosts.jsonl", "--json"])
    assert fleet.exit_code == 0, fleet.output
    assert json.loads(fleet.output)["results"][0]["runs"] is True


def test_cli_lists_locks_in_reach(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for name, lock in (
        ("torch-train", make_lock()),
        (
            "cu13",
            make_lock(name="cu13", cuda="13.0.0", toolkit="580.65.06", minor_compat="580"),
        ),
    ):
        Path(f"images/{name}").mkdir(parents=True)
        Path(f"images/{name}/envbuild.lock").write_text(dumps(lock))
    Path("images/broken").mkdir()
    Path("images/broken/envbuild.lock").write_text("not a lock")
    res = runner.invoke(cli, ["doctor", "--host-facts", str(HOSTS / "no-toolkit.json")])
    assert res.exit_code == 1
    assert re.search(r"^ok +lock images/torch-train +would run here$", res.output, re.M)
    assert "would not run: driver 570.124.06 < 580" in res.output
    assert "lock images/broken" in res.output and "cannot read" in res.output


@pytest.mark.skipif(
    Path("/proc/driver/nvidia/version").exists(), reason="this machine has an NVIDIA driver"
)
def test_cli_without_driver_reports_what_it_can_with_exit_2() -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["doctor"], env={"ENVBUILD_HOST_FACTS": None})
    assert res.exit_code == 2
    assert "no NVIDIA driver" in res.output and "nvidia-smi" in res.output
    assert "shm" in res.output and "engine" in res.output  # the rest is still checked
    res_json = runner.invoke(cli, ["doctor", "--json"], env={"ENVBUILD_HOST_FACTS": None})
    assert res_json.exit_code == 2
    doc = json.loads(res_json.stdout)
    assert doc["ok"] is False
    assert doc["driver"]["nvml_error"] in ("LibraryNotFound", "DriverNotLoaded")


def test_lost_gpu_is_a_problem() -> None:
    f = _h200()
    f["gpus"].append({"index": 1, "error": "GpuIsLost", "error_text": "GPU is lost"})
    (x,) = [x for x in doctor.check_host(f) if x.status == "problem"]
    assert x.name == "gpu1" and "GpuIsLost" in x.detail and "Xid 79" in x.next_step
