"""The payload reads the architectures compiled into an extension (no toolkit in images) and
judges them by the same rule as the frameworks' (tier 1); the host side insists the check ran."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envbuild.payload import fatbin, smoke_ext
from envbuild.payload import smoke_checks as ck
from envbuild.smoke.plan import evaluate

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "fatbin"


def test_a_real_nvcc_library_lists_its_cubins_and_ptx() -> None:
    # nvcc 13.0 output (tests/fixtures/fatbin/kernel.cu says how it was made).
    assert fatbin.library_archs(str(FIXTURE / "multi_arch.so")) == [
        "sm_80",
        "sm_90a",
        "sm_100f",
        "compute_120",
    ]


def test_a_cpu_library_has_no_device_code_and_text_is_not_elf(tmp_path: Path) -> None:
    libc = next(Path("/").glob("usr/lib/*/libc.so.6"), None) or Path("/lib64/libc.so.6")
    assert fatbin.library_archs(str(libc)) == []
    text = tmp_path / "x.so"
    text.write_text("INPUT(-lfoo)\n")  # a linker script named .so
    with pytest.raises(fatbin.NotElf):
        fatbin.library_archs(str(text))


def test_truncated_fatbin_yields_what_was_read() -> None:
    data = (FIXTURE / "multi_arch.so").read_bytes()
    start = data.find((0xBA55ED50).to_bytes(4, "little"))
    assert fatbin.fatbin_archs(data[start : start + 200])[:1] == ["sm_80"]
    assert fatbin.fatbin_archs(b"\0" * 64) == []


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")
def test_what_nvcc_compiles_now_is_what_is_read(tmp_path: Path) -> None:
    out = tmp_path / "k.so"
    subprocess.run(
        ["nvcc", "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", "-o", str(out),
         str(FIXTURE / "kernel.cu"), "-gencode", "arch=compute_89,code=sm_89",
         "-gencode", "arch=compute_90,code=[sm_90,compute_90]"],
        check=True,
    )  # fmt: skip
    assert fatbin.library_archs(str(out)) == ["sm_89", "sm_90", "compute_90"]


def test_ext_archs_fails_for_a_target_the_library_does_not_cover() -> None:
    libs = {"/v/_C.so": ["sm_89", "sm_90"], "/v/_cpu.so": []}
    ok = ck.check_extension_archs("vecadd", libs, target_ccs=["8.9", "9.0"])
    assert ok["status"] == "pass" and "_C.so: sm_89 sm_90" in ok["figure"]
    # An A100 (8.0) visible but not a target: sm_89 does not run on 8.0.
    bad = ck.check_extension_archs("vecadd", libs, target_ccs=["9.0"], visible_ccs=["8.0"])
    assert bad["status"] == "fail" and "_C.so has no code for 8.0" in bad["figure"]
    assert "no kernel image is available" in bad["hint"]
    ptx = ck.check_extension_archs("v", {"/v/_C.so": ["compute_90"]}, target_ccs=["10.0"])
    assert ptx["status"] == "pass"  # PTX JIT reaches newer GPUs, as for frameworks
    cpu_only = ck.check_extension_archs("v", {"/v/_C.so": []}, target_ccs=["9.0"])
    assert cpu_only["status"] == "warn"


def test_the_payload_reads_an_installed_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        smoke_ext,
        "libraries",
        lambda name: {"/x/_C.so": fatbin.library_archs(str(FIXTURE / "multi_arch.so"))},
    )
    checks: list[dict[str, Any]] = []
    report: dict[str, Any] = {"checks": checks, "metrics": {}, "device": "cpu"}
    plan: dict[str, Any] = {
        "extensions": [{"name": "vecadd"}],
        "target_ccs": ["9.0", "12.0"],
        "tier": 2,
    }
    smoke_ext.run(plan, report)
    assert [(c["name"], c["status"]) for c in checks] == [("ext-archs:vecadd", "pass")]
    plan["target_ccs"] = ["7.5"]  # nothing in the library runs on a Turing GPU
    checks.clear()
    smoke_ext.run(plan, report)
    assert checks[0]["status"] == "fail"


def test_a_missing_ext_archs_check_fails_the_verdict() -> None:
    plan = {"framework": "torch", "tier": 1, "allow_cpu": True, "expect": {},
            "extensions": [{"name": "vecadd", "version": "0.1.0"}]}  # fmt: skip
    checks = [ck.check(n, 1, "pass") for n in ("gpu-visible", "cuda-build", "driver-floor", "shm")]
    report = {"framework": "torch", "device": "cpu", "checks": checks}
    verdict = evaluate(report, plan)
    assert not verdict.ok and [f.name for f in verdict.failed] == ["ext-archs:vecadd"]
    checks.append(ck.check("ext-archs:vecadd", 1, "pass"))
    assert evaluate(report, plan).ok
