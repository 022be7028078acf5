"""`envbuild validate`: a folder, an image (through a fake engine), the fleet view, JUnit, Job."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from envbuild.app import validate as validate_use_case
from envbuild.cli.main import cli
from envbuild.core.errors import UserError
from envbuild.core.models import Lock
from envbuild.lock.format import dumps
from tests.unit.fakes import read_only_engine
from tests.unit.preflight.test_validate import HOSTS, make_lock

FLEET = ("h200-healthy", "old-driver", "mismatch", "no-toolkit", "small-shm")


def write_lock(root: Path, name: str, lock: Lock) -> Path:
    folder = root / "images" / name
    folder.mkdir(parents=True)
    (folder / "envbuild.lock").write_text(dumps(lock))
    return folder


def report_line(*, failing: str | None = None) -> str:
    """A payload report for make_lock()'s plan, as the payload prints it (stdout last line)."""
    names = ("gpu-visible", "cuda-build", "driver-floor", "shm", "loss-falling", "grads")
    checks = [
        {"name": n, "status": "fail" if n == failing else "pass", "tier": 1, "figure": f"{n} ok"}
        for n in names
    ]
    report = {
        "schema": 1,
        "ok": failing is None,
        "framework": "torch",
        "device": "cuda",
        "checks": checks,
        "versions": {
            "framework": {"seen": "2.7.1"},
            "cuda": {"seen": "12.8"},
            "cudnn": {"seen": "9.7.1"},
            "nccl": {"seen": "2.26.2"},
        },
        "host": {"gpus": [{"name": "NVIDIA H200"}]},
    }
    return "ENVBUILD-SMOKE-REPORT " + json.dumps(report)


# --- a folder ------------------------------------------------------------------------------------

DIR_H200 = """\
validate images/torch-train on vm

status  check         detail
pass    driver-floor  driver 580.159.04 >= 570.26, the CUDA 12.8.0 toolkit's own floor (full feature set)
pass    gpu0-arch     GPU 0 NVIDIA H200 (cc 9.0): cubin sm_90
pass    require-cuda  NVIDIA_REQUIRE_CUDA='cuda>=12.0' holds
pass    shm           host /dev/shm is 131072 MiB (>= 1024 MiB)
pass    memory        every GPU has >= 4096 MiB (free memory not recorded)
skip    engine        no container engine here: images cannot run on this host (`envbuild smoke` still checks the host's own Python stack)
skip    smoke         a folder: pre-flight only

verdict: runs: driver 580.159.04 reaches CUDA 12.8.0's own floor 570.26 and the build has code for every GPU
"""


def test_dir_exact_output_on_recorded_h200(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_lock(tmp_path, "torch-train", make_lock())
    res = CliRunner().invoke(
        cli,
        ["validate", "images/torch-train"],
        env={"ENVBUILD_HOST_FACTS": str(HOSTS / "h200-healthy.json")},
    )
    assert res.exit_code == 0, res.output
    assert res.output == DIR_H200


def test_dir_on_old_driver_exit_1_json_and_junit(tmp_path: Path) -> None:
    folder = write_lock(tmp_path, "torch-train", make_lock())
    junit = tmp_path / "out" / "validate.xml"
    res = CliRunner().invoke(
        cli,
        ["validate", str(folder), "--json", "--junit", str(junit)],
        env={"ENVBUILD_HOST_FACTS": str(HOSTS / "old-driver.json")},
    )
    assert res.exit_code == 1
    doc = json.loads(res.output)
    assert doc["ok"] is False and doc["kind"] == "dir" and doc["host"] == "a100-old"
    failed = [c["check"] for c in doc["checks"] if c["status"] == "fail"]
    assert failed == ["driver-floor", "require-cuda"]
    root = ET.parse(junit).getroot()
    cases = root.findall("testsuite/testcase")
    assert [c.get("name") for c in cases] == [c["check"] for c in doc["checks"]]
    assert root.get("failures") == "2"


def test_dir_without_lock_is_a_user_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli,
        ["validate", str(tmp_path)],
        env={"ENVBUILD_HOST_FACTS": str(HOSTS / "h200-healthy.json")},
    )
    assert res.exit_code == 2
    assert "has no envbuild.lock" in res.output and f"envbuild lock {tmp_path}" in res.output


# --- an image, through the engine ----------------------------------------------------------------


def test_image_runs_smoke_after_a_passing_preflight() -> None:
    engine = read_only_engine(labels={"envbuild.lock": dumps(make_lock())}, stdout=report_line())
    result = validate_use_case.validate(
        target="envbuild/torch-train:abc", facts_file=HOSTS / "h200-healthy.json", engine=engine
    )
    (spec,) = engine.runs
    assert spec.gpus is True
    assert spec.command == ("python", "/opt/envbuild/payload", "--plan", "/opt/envbuild/plan.json")
    assert spec.image == "envbuild/torch-train:abc"
    assert result.ok and result.exit_code == 0
    assert result.checks[-1].name == "smoke" and result.checks[-1].status == "pass"
    assert "smoke:grads" in [c.name for c in result.checks]


def test_image_smoke_failure_exit_6_with_hint() -> None:
    engine = read_only_engine(
        labels={"envbuild.lock": dumps(make_lock())},
        stdout=report_line(failing="loss-falling"),
        exit_code=1,
    )
    result = validate_use_case.validate(
        target="img", facts_file=HOSTS / "h200-healthy.json", engine=engine
    )
    assert result.exit_code == 6
    assert [c.name for c in result.checks if c.status == "fail"] == ["smoke:loss-falling", "smoke"]


def test_image_without_report_is_a_failed_smoke() -> None:
    engine = read_only_engine(
        labels={"envbuild.lock": dumps(make_lock())}, stdout="Segmentation fault"
    )
    result = validate_use_case.validate(
        target="img", facts_file=HOSTS / "h200-healthy.json", engine=engine
    )
    assert result.exit_code == 6
    assert "printed no report" in result.checks[-1].detail


def test_image_preflight_failure_starts_nothing() -> None:
    engine = read_only_engine(labels={"envbuild.lock": dumps(make_lock())}, stdout=report_line())
    result = validate_use_case.validate(
        target="img", facts_file=HOSTS / "old-driver.json", engine=engine
    )
    assert engine.runs == []
    assert result.exit_code == 1
    assert result.checks[-1].status == "skip"


def test_image_engine_without_gpu_runtime_fails_before_running() -> None:
    engine = read_only_engine(labels={"envbuild.lock": dumps(make_lock())}, nvidia=False)
    result = validate_use_case.validate(
        target="img", facts_file=HOSTS / "h200-healthy.json", engine=engine
    )
    assert engine.runs == []
    assert result.checks[-1].name == "engine-gpu" and result.checks[-1].status == "fail"


def test_image_not_built_by_envbuild() -> None:
    with pytest.raises(UserError, match=r"carries no envbuild\.lock label"):
        validate_use_case.validate(
            target="busybox", facts_file=HOSTS / "h200-healthy.json", engine=read_only_engine({})
        )


# --- fleet ---------------------------------------------------------------------------------------


def hosts_file(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.jsonl"
    lines = [json.dumps(json.loads((HOSTS / f"{n}.json").read_text())) for n in FLEET]
    path.write_text("\n".join(lines) + "\n")
    return path


FLEET_TABLE_HEAD = """\
lock                vm   a100-old          h100-upgraded  h100-fresh        l4-node
images/cu13         yes  no: driver-floor  no: nvml       no: driver-floor  no: driver-floor
images/torch-train  yes  no: driver-floor  no: nvml       yes               yes (minor compat)

images/cu13 on a100-old:
  does not run: driver 470.82.01 < 580, the minor-version-compatibility floor of CUDA 13.0.0 (it supports CUDA 11.4)
    fix: upgrade the host driver to >= 580.65.06 (CUDA 13.0)
"""


def test_fleet_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_lock(tmp_path, "torch-train", make_lock())
    cu13 = make_lock(name="cu13", cuda="13.0.0", toolkit="580.65.06", minor_compat="580")
    write_lock(tmp_path, "cu13", cu13)
    res = CliRunner().invoke(cli, ["validate", "--hosts", str(hosts_file(tmp_path))])
    assert res.exit_code == 1
    assert res.output.startswith(FLEET_TABLE_HEAD)
    assert (
        "images/cu13 on l4-node:\n  does not run: driver 550.127.05 < 580, the minor-version-"
        "compatibility floor of CUDA 13.0.0"
    ) in res.output


def test_fleet_k8s_job(tmp_path: Path) -> None:
    folder = write_lock(tmp_path, "torch-train", make_lock(timeout_s=900))
    out = tmp_path / "job.yaml"
    junit = tmp_path / "fleet.xml"
    res = CliRunner().invoke(
        cli,
        [
            "validate",
            "--hosts",
            str(hosts_file(tmp_path)),
            "--lock",
            str(folder),
            "--image",
            "registry.example.com/ml/torch:1",
            "--k8s-job",
            str(out),
            "--junit",
            str(junit),
            "--json",
        ],
    )
    assert res.exit_code == 1  # a100-old and h100-upgraded cannot run it
    assert json.loads(res.output)["k8s_job"] == str(out)
    jobs = list(yaml.safe_load_all(out.read_text()))
    # vm, h100-fresh and l4-node pass the pre-flight: one Job each, pinned to that node.
    assert [j["metadata"]["annotations"]["envbuild.node"] for j in jobs] == [
        "vm",
        "h100-fresh",
        "l4-node",
    ]
    for job in jobs:
        spec = job["spec"]
        assert spec["activeDeadlineSeconds"] == 900 + 600
        container = spec["template"]["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert container["image"] == "registry.example.com/ml/torch:1"
    suites = ET.parse(junit).getroot().findall("testsuite")
    assert len(suites) == len(FLEET)


def test_fleet_k8s_job_needs_image_and_one_lock(tmp_path: Path) -> None:
    folder = write_lock(tmp_path, "torch-train", make_lock())
    res = CliRunner().invoke(
        cli,
        [
            "validate",
            "--hosts",
            str(hosts_file(tmp_path)),
            "--lock",
            str(folder),
            "--k8s-job",
            "j.yaml",
        ],
    )
    assert res.exit_code == 2 and "--image REF" in res.output


def test_target_and_hosts_together_is_a_user_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["validate", "x", "--hosts", str(hosts_file(tmp_path))])
    assert res.exit_code == 2


def test_k8s_job_from_a_recorded_doctor_report(tmp_path: Path) -> None:
    # The 2 x H200 report (doctor --json: facts + findings) as the fleet: one Job, 2 GPUs.
    folder = write_lock(tmp_path, "torch-train", make_lock())
    out = tmp_path / "job.yaml"
    res = CliRunner().invoke(
        cli,
        [
            "validate",
            "--hosts",
            str(HOSTS / "h200x2-doctor.json"),
            "--lock",
            str(folder),
            "--image",
            "ml/torch:1",
            "--k8s-job",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    (job,) = yaml.safe_load_all(out.read_text())
    spec = job["spec"]
    limits = spec["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": 2}
