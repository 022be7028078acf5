"""No GPU, no driver, no engine: `doctor` and `validate` report what they can, say plainly that
the machine has no NVIDIA GPU, exit with the documented code and always write --junit.

tests/fixtures/hosts/no-driver-doctor.json is a recording (`envbuild doctor --json`) of the
development machine: no NVIDIA driver, Docker 20.10 without an NVIDIA runtime.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from click.testing import CliRunner

from envbuild.app import validate as validate_use_case
from envbuild.cli.main import cli
from envbuild.core.errors import UserError
from envbuild.engine.protocol import ContainerEngine
from envbuild.host import probe as hostinfo
from tests.unit.fakes import FakeEngine

ROOT = Path(__file__).resolve().parents[3]
NO_DRIVER = ROOT / "tests" / "fixtures" / "hosts" / "no-driver-doctor.json"
ENV = {"ENVBUILD_HOST_FACTS": str(NO_DRIVER)}


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Any:
    return CliRunner().invoke(cli, list(args), env=env or ENV)


def test_doctor_reports_engine_runtime_and_shm_then_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no locks in reach
    res = invoke("doctor")
    assert res.exit_code == 2
    lines = res.output.splitlines()
    assert lines[0] == "host vm: no NVIDIA GPU (NVML: LibraryNotFound)"
    assert (
        "problem  gpus         this machine has no NVIDIA GPU (no NVIDIA driver: NVML says "
        "LibraryNotFound)"
    ) in lines
    assert any(line.startswith("ok       engine       docker 20.10.24+dfsg1") for line in lines)
    assert any(line.startswith("problem  gpu-runtime ") for line in lines)
    assert "ok       shm          /dev/shm is 24105 MiB" in lines
    assert lines[-1] == "verdict: no NVIDIA GPU here (2 problems)"


def test_doctor_json_is_the_report_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    res = invoke("doctor", "--json")
    assert res.exit_code == 2
    doc = json.loads(res.stdout)
    assert doc["driver"]["nvml_error"] == "LibraryNotFound" and doc["gpus"] == []
    assert [f["check"] for f in doc["findings"]] == ["gpus", "engine", "gpu-runtime", "shm"]


@pytest.mark.skipif(
    Path("/proc/driver/nvidia/version").exists(), reason="this machine has an NVIDIA driver"
)
def test_doctor_on_this_machine_without_driver() -> None:
    res = invoke("doctor", env={"ENVBUILD_HOST_FACTS": None})
    assert res.exit_code == 2
    assert "this machine has no NVIDIA GPU" in res.output and "shm" in res.output


def test_probe_without_nvml_library_records_it(tmp_path: Path) -> None:
    class NVMLError(Exception):
        value = 12

    def init() -> None:
        raise NVMLError("NVML Shared Library Not Found")

    fake = SimpleNamespace(NVMLError=NVMLError, NVML_ERROR_LIBRARY_NOT_FOUND=12, nvmlInit=init)
    facts = hostinfo.probe_facts(nvml=fake)
    assert facts["driver"]["nvml_error"] == "LibraryNotFound"
    assert facts["gpus"] == []
    assert {"engine", "toolkit", "cdi", "shm"} <= set(facts)


def test_validate_gpu_image_folder_says_no_gpu_reports_the_rest_and_writes_junit(
    tmp_path: Path,
) -> None:
    junit = tmp_path / "ci" / "validate.xml"
    res = invoke("validate", str(ROOT / "images" / "torch-train"), "--junit", str(junit))
    assert res.exit_code == 1  # the documented "the pre-flight says no"
    lines = res.output.splitlines()
    assert (
        "fail    gpus         the machine has no NVIDIA GPU (no NVIDIA driver: NVML says "
        "LibraryNotFound)"
    ) in lines
    assert "pass    shm          host /dev/shm is 24105 MiB (>= 1024 MiB)" in lines
    assert any(line.startswith("pass    engine       docker 20.10.24") for line in lines)
    assert any(line.startswith("skip    gpu-runtime ") for line in lines)
    assert "verdict: does not run: the machine has no NVIDIA GPU" in res.output
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["gpus"].find("failure") is not None
    assert {"shm", "engine", "gpu-runtime", "smoke"} <= set(cases)


def test_validate_cpu_image_folder_runs_without_a_gpu() -> None:
    res = invoke("validate", str(ROOT / "images" / "torch-cpu"), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["verdict"]["outcome"] == "runs"


def test_validate_missing_path_says_it_does_not_exist_and_writes_junit(tmp_path: Path) -> None:
    junit = tmp_path / "validate.xml"
    res = invoke("validate", "/no/such/path", "--junit", str(junit))
    assert res.exit_code == 2
    assert res.output.startswith("error: /no/such/path does not exist\n")
    assert "in the engine" not in res.output
    (case,) = ET.parse(junit).getroot().iter("testcase")
    failure = case.find("failure")
    assert failure is not None and failure.get("message") == "/no/such/path does not exist"


def test_validate_a_file_is_not_an_image(tmp_path: Path) -> None:
    file = tmp_path / "envbuild.toml"
    file.write_text("")
    res = invoke("validate", str(file))
    assert res.exit_code == 2 and "is a file, not an image folder or an image" in res.output


def test_a_missing_folder_under_an_existing_one_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "images").mkdir()

    class NoImages(FakeEngine):
        def image_exists(self, ref: str) -> bool:
            return False

    with pytest.raises(UserError, match=r"^no folder images/torch-trian here, and no image"):
        validate_use_case.validate(
            target="images/torch-trian",
            facts_file=NO_DRIVER,
            engine=cast(ContainerEngine, NoImages(labels={}, read_only=True)),
        )
