"""validate: NVIDIA_REQUIRE_CUDA semantics, arch coverage, pre-flight, fleet, Job YAML, JUnit."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from envbuild.core.models import (
    BaseImage,
    Floors,
    FrameworkPick,
    Host,
    HostGpu,
    Indexes,
    Lock,
    SmokeSettings,
    Stack,
    Targets,
)
from envbuild.host.probe import host_from_facts
from envbuild.preflight import reports
from envbuild.preflight import validate as v
from envbuild.preflight.fleet import fleet_view, unique_host_names

HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"

# NVIDIA_REQUIRE_CUDA as nvidia/cuda images publish it: a CUDA floor OR forward-compatibility
# clauses per brand and driver branch (tests/cases/validate/require_cuda.json says where from).
REQUIRE = json.loads(
    (Path(__file__).resolve().parents[2] / "cases" / "validate" / "require_cuda.json").read_text()
)["images"]
NV_12_8 = REQUIRE["nvidia/cuda:12.8.1-base-ubuntu24.04"]
NV_13_0 = REQUIRE["nvidia/cuda:13.0.0-base-ubuntu24.04"]


def facts(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HOSTS / f"{name}.json").read_text())
    return data


def host(name: str) -> Host:
    return host_from_facts(facts(name))


def make_lock(
    *,
    name: str = "torch-train",
    cuda: str | None = "12.8.0",
    toolkit: str = "570.26",
    minor_compat: str | None = "525.60.13",
    relied_on: str = "minor_compat",
    archs: tuple[str, ...] = (
        "sm_75",
        "sm_80",
        "sm_86",
        "sm_90",
        "sm_100",
        "sm_120",
        "compute_120",
    ),
    require_cuda: str = "cuda>=12.0",
    timeout_s: int = 600,
) -> Lock:
    """A lock as the lock engineer's loads() returns it (fields that validate reads)."""
    floors = (
        Floors(toolkit=toolkit, minor_compat=minor_compat, relied_on=relied_on)  # type: ignore[arg-type]
        if cuda
        else None
    )
    base = BaseImage(
        ref="nvidia/cuda:12.8.1-base-ubuntu24.04" if cuda else "debian:bookworm-slim",
        flavour="base" if cuda else "cpu",
        os="ubuntu24.04",
        require_cuda=require_cuda if cuda else "",
    )
    stack = Stack(
        framework=FrameworkPick("torch", "2.7.1", "cu128" if cuda else "cpu", "torch==2.7.1"),
        cuda=cuda,
        cudnn="9.7.1" if cuda else None,
        nccl="2.26.2" if cuda else None,
        python="3.12",
        os="ubuntu24.04",
        flavour=base.flavour,
        base_image=base,
        archs=archs if cuda else (),
        target_archs=(),
        floors=floors,
    )
    return Lock(
        name=name,
        input_hash="sha256:" + "0" * 64,
        stack=stack,
        targets=Targets(),
        platform="x86_64",
        indexes=Indexes(),
        smoke=SmokeSettings(timeout_s=timeout_s),
        base_digest=None,
        packages=(),
    )


# --- NVIDIA_REQUIRE_CUDA -------------------------------------------------------------------------


def props(
    cuda: str | None, driver: str | None, cc: str | None = "9.0", brand: str | None = None
) -> dict[str, str | None]:
    return {"cuda": cuda, "driver": driver, "arch": cc, "brand": brand}


def test_require_cuda_floor_holds_on_newer_driver_cuda() -> None:
    assert v.evaluate_require(NV_12_8, props("13.0", "580.159.04", brand="nvidia")).ok


def test_require_cuda_fails_on_older_cuda_and_names_each_term() -> None:
    # A GeForce board has no forward-compatibility clause: only cuda>=12.8 could hold.
    res = v.evaluate_require(NV_12_8, props("12.4", "550.127.05", brand="geforce"))
    assert not res.ok
    assert res.unsatisfied[0] == "cuda>=12.8 (fails on cuda>=12.8: host has cuda=12.4)"
    assert len(res.unsatisfied) == len(NV_12_8.split())


def test_forward_compat_clause_is_an_or_term() -> None:
    # A datacenter board (brand nvidia) on the 550 branch passes through
    # `brand=nvidia,driver>=550,driver<551`, though its driver supports only CUDA 12.4.
    assert v.evaluate_require(NV_12_8, props("12.4", "550.127.05", brand="nvidia")).ok
    # The same board one branch later has no clause (driver<551 fails: AND within a term).
    assert not v.evaluate_require(NV_12_8, props("12.5", "555.42.02", brand="nvidia")).ok
    assert v.evaluate_require(NV_13_0, props("12.8", "570.124.06", brand="nvidia")).ok
    assert not v.evaluate_require(NV_13_0, props("12.8", "570.124.06", brand="geforce")).ok


def test_unknown_properties_are_skipped_and_empty_is_true() -> None:
    assert v.evaluate_require("", props(None, None)).ok
    assert v.evaluate_require("foo>=1", props(None, None)).ok
    assert v.evaluate_require("foo>=1,cuda>=12.0", props("12.2", "535.1")).ok
    assert not v.evaluate_require("foo>=1,cuda>=12.0", props("11.8", "520.1")).ok


def test_unknown_host_value_fails_a_lower_bound() -> None:
    res = v.evaluate_require("cuda>=12.0", props(None, None))
    assert not res.ok and "unknown" in res.unsatisfied[0]


@pytest.mark.parametrize(
    ("expr", "ok"),
    [
        ("arch>=9.0", True),
        ("arch>9.0", False),
        ("arch<=9.0", True),
        ("arch!=9.0", False),
        ("arch=9.0", True),
        ("driver<581", True),
        ("driver>=580.159.4", True),  # versions compare numerically: 04 == 4
        ("cuda>=13.0,driver>=581", False),
        ("cuda>=13.1 driver>=580", True),
    ],
)
def test_operators(expr: str, ok: bool) -> None:
    assert v.evaluate_require(expr, props("13.0", "580.159.04")).ok is ok


# --- compute capability --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("archs", "cc", "expected"),
    [
        (("sm_80",), "8.6", ("cubin", "sm_80")),  # same major, lower minor
        (("sm_86",), "8.0", ("none", "")),  # a newer minor does not run on an older device
        (("sm_80", "sm_90"), "8.9", ("cubin", "sm_80")),
        (("sm_90",), "10.0", ("none", "")),  # no cubin across majors
        (("sm_90", "compute_90"), "10.0", ("ptx", "compute_90")),
        (("sm_90a",), "9.0", ("cubin", "sm_90a")),
        (("sm_90a", "compute_90a"), "10.0", ("none", "")),  # arch-specific: exact cc only
        (("sm_120",), "12.1", ("cubin", "sm_120")),
        (("compute_120",), "12.0", ("ptx", "compute_120")),
    ],
)
def test_arch_coverage(archs: tuple[str, ...], cc: str, expected: tuple[str, str]) -> None:
    assert v.arch_coverage(archs, cc) == expected


# --- pre-flight ----------------------------------------------------------------------------------


def statuses(pf: v.Preflight) -> dict[str, str]:
    return {c.name: c.status for c in pf.checks}


def test_cu128_lock_runs_on_recorded_h200() -> None:
    pf = v.preflight(make_lock(), host("h200-healthy"), facts=facts("h200-healthy"))
    assert pf.ok
    assert statuses(pf) == {
        "driver-floor": "pass",
        "gpu0-arch": "pass",
        "require-cuda": "pass",
        "shm": "pass",
        "memory": "pass",
    }
    assert "full feature set" in pf.checks[0].detail
    assert pf.verdict is not None and pf.verdict.outcome == "runs"


def test_old_driver_fails_the_floor_with_a_next_step() -> None:
    pf = v.preflight(make_lock(), host("old-driver"), facts=facts("old-driver"))
    assert not pf.ok
    floor = next(c for c in pf.checks if c.name == "driver-floor")
    assert floor.status == "fail"
    assert "470.82.01 < 525.60.13" in floor.detail
    assert floor.next_step == "upgrade the host driver to >= 525.60.13"
    assert statuses(pf)["require-cuda"] == "fail"
    # The one fix: 525.60.13 alone would leave NVIDIA_REQUIRE_CUDA unproven (no matrix here to
    # tell the CUDA version of that driver), so the toolkit's own floor.
    assert pf.verdict is not None and pf.verdict.fix == "upgrade the host driver to >= 570.26"


def test_minor_version_compat_passes_with_limited_features() -> None:
    # L4 on 550: below the 12.8 toolkit floor (570.26), above the 12.x MVC floor.
    pf = v.preflight(make_lock(), host("small-shm"), facts=facts("small-shm"))
    assert pf.ok
    assert "minor-version-compatibility" in pf.checks[0].detail


def test_strict_lock_needs_the_toolkit_floor() -> None:
    lock = replace(make_lock(), compat="strict")
    pf = v.preflight(lock, host("small-shm"))
    assert statuses(pf)["driver-floor"] == "fail"
    # A lock that relies on its toolkit floor but allows minor-version compatibility does not.
    assert v.preflight(make_lock(relied_on="toolkit"), host("small-shm")).ok


def test_ptx_only_needs_the_toolkit_floor() -> None:
    lock = make_lock(archs=("sm_80", "compute_80"))  # H200 (9.0) only by PTX JIT
    on_h200 = v.preflight(lock, host("h200-healthy"))
    assert statuses(on_h200)["gpu0-arch"] == "pass"
    assert "PTX compute_80" in on_h200.checks[1].detail
    old = Host(driver="550.127.05", cuda_driver="12.4", gpus=(HostGpu("NVIDIA H100", "9.0"),))
    on_550 = v.preflight(lock, old)
    arch = next(c for c in on_550.checks if c.name == "gpu0-arch")
    assert arch.status == "fail" and "needs JIT" in arch.detail and "570.26" in arch.detail


def test_uncovered_gpu_fails() -> None:
    lock = make_lock(archs=("sm_90",))
    pf = v.preflight(lock, host("old-driver"))
    arch = [c for c in pf.checks if c.name.endswith("-arch")]
    assert [c.status for c in arch] == ["fail", "fail"]
    assert "targets.gpus" in arch[0].next_step


def test_mismatch_host_fails_with_reboot_not_rebuild() -> None:
    pf = v.preflight(make_lock(), host("mismatch"), facts=facts("mismatch"))
    nvml = pf.checks[0]
    assert (nvml.name, nvml.status) == ("nvml", "fail")
    assert "reboot" in nvml.next_step and "do not rebuild" in nvml.next_step
    # Nothing about the lock is worth saying until NVML works; the host's /dev/shm still is.
    assert statuses(pf) == {"nvml": "fail", "shm": "pass"}


def test_cpu_lock_runs_anywhere() -> None:
    lock = make_lock(cuda=None)
    for name in ("old-driver", "mismatch", "h200-healthy"):
        assert v.preflight(lock, host(name), facts=facts(name)).ok


def test_cuda13_lock_needs_580() -> None:
    lock = make_lock(
        cuda="13.0.0",
        toolkit="580.65.06",
        minor_compat="580",
        archs=("sm_90", "sm_100", "sm_120"),
        require_cuda="cuda>=13.0",
    )
    assert v.preflight(lock, host("h200-healthy")).ok
    pf = v.preflight(lock, host("no-toolkit"))  # 570.124.06
    assert statuses(pf)["driver-floor"] == "fail"
    assert statuses(pf)["require-cuda"] == "fail"


# --- fleet ---------------------------------------------------------------------------------------

FLEET = ("h200-healthy", "old-driver", "mismatch", "no-toolkit", "small-shm")


def test_fleet_view_matrix() -> None:
    hosts = [(host(n), facts(n)) for n in FLEET]
    cu13 = make_lock(name="cu13", cuda="13.0.0", toolkit="580.65.06", minor_compat="580")
    view = fleet_view([("cu128", make_lock()), ("cu13", cu13)], hosts)
    runs = {(r.lock, r.host): r.ok for r in view.results}
    assert runs == {
        ("cu128", "vm"): True,
        ("cu128", "a100-old"): False,
        ("cu128", "h100-upgraded"): False,
        ("cu128", "h100-fresh"): True,  # the runtime is doctor's problem, not the lock's
        ("cu128", "l4-node"): True,
        ("cu13", "vm"): True,
        ("cu13", "a100-old"): False,
        ("cu13", "h100-upgraded"): False,
        ("cu13", "h100-fresh"): False,
        ("cu13", "l4-node"): False,
    }
    assert not view.ok
    doc = view.to_json()
    assert doc["hosts"] == ["vm", "a100-old", "h100-upgraded", "h100-fresh", "l4-node"]
    assert json.loads(json.dumps(doc)) == doc


def test_duplicate_host_names_are_made_unique() -> None:
    assert unique_host_names(["a", "b", "a", ""]) == ["a", "b", "a#2", "host4"]


# --- Kubernetes Job ------------------------------------------------------------------------------


def test_yaml_emitter_keeps_tricky_strings_strings() -> None:
    data = {"a": ["yes", "no", "0755", "1.0", ": x", "#c", "null", "", "é"], "b": {}, "c": []}
    assert yaml.safe_load(reports.to_yaml(data)) == data


def test_k8s_name_is_a_dns_label() -> None:
    name = reports.k8s_name("Torch_Train/" + "x" * 80)
    assert len(name) <= 63 and name == name.lower() and not name.endswith("-")
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")


# --- JUnit ---------------------------------------------------------------------------------------


def test_junit_one_testcase_per_check() -> None:
    pf = v.preflight(make_lock(), host("old-driver"), facts=facts("old-driver"))
    smoke = (v.Check("smoke", "skip", "not run: the pre-flight failed"),)
    text = reports.junit_xml([("envbuild.validate.torch-train", pf.checks + smoke)])
    root = ET.fromstring(text.split("\n", 1)[1])
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [c.name for c in pf.checks] + ["smoke"]
    assert suite.get("tests") == str(len(cases))
    assert suite.get("failures") == str(len(pf.failed)) == root.get("failures")
    assert suite.get("skipped") == "1"
    failure = cases[0].find("failure")
    assert failure is not None and failure.get("message") == pf.checks[0].detail
    assert "next:" in (failure.text or "")
    # deterministic: the same checks give the same bytes
    assert reports.junit_xml([("s", pf.checks)]) == reports.junit_xml([("s", pf.checks)])


def test_smoke_checks_from_a_report() -> None:
    report = {
        "checks": [
            {"name": "cuda-init", "status": "pass", "figure": "1 GPU"},
            {"name": "bf16-matmul", "status": "fail", "figure": "120 TFLOP/s"},
            {"name": "nccl", "status": "skip"},
        ]
    }
    failed = [{"name": "bf16-matmul", "figure": "120 TFLOP/s", "hint": "check clocks"}]
    checks = v.smoke_checks(report, False, failed, "1 of 3 checks failed")
    assert [(c.name, c.status) for c in checks] == [
        ("smoke:cuda-init", "pass"),
        ("smoke:bf16-matmul", "fail"),
        ("smoke:nccl", "skip"),
        ("smoke", "fail"),
    ]
    assert checks[1].next_step == "check clocks"


def test_a_lost_gpu_blocks_the_host() -> None:
    f = facts("h200-healthy")
    f["gpus"].append({"index": 1, "error": "GpuIsLost"})
    pf = v.preflight(make_lock(), host_from_facts(f), facts=f)
    assert [(c.name, c.status) for c in pf.checks] == [("gpu1", "fail"), ("shm", "pass")]
