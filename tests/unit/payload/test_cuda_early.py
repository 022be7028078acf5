"""The payload's early CUDA start (smoke_host.EarlyDriver) against a stand-in driver library
compiled here: it calls cuInit, cuDeviceGet and cuDevicePrimaryCtxRetain as the driver API
declares them (cuda.h) and records what they returned, never raising."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from envbuild.payload import smoke_host

STAND_IN = """
typedef int CUresult; typedef int CUdevice; typedef void *CUcontext;
static int calls = 0;
CUresult cuInit(unsigned int flags) { calls++; return flags == 0 ? INIT_RC : 1; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { *d = ordinal; return 0; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    static int ctx; *c = &ctx; return d == 0 && calls == 1 ? 0 : 201; }
"""


def stand_in(tmp_path: Path, init_rc: int) -> str:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the stand-in driver library")
    source = tmp_path / "cuda.c"
    source.write_text(STAND_IN)
    lib = tmp_path / f"libcuda-{init_rc}.so"
    cmd = ["gcc", "-shared", "-fPIC", f"-DINIT_RC={init_rc}", "-o", str(lib), str(source)]
    subprocess.run(cmd, check=True)
    return str(lib)


def test_a_driver_that_starts_gives_rc_0_and_its_seconds(tmp_path: Path) -> None:
    got = smoke_host.EarlyDriver(stand_in(tmp_path, 0)).outcome(wait_s=10)
    assert got is not None and got["rc"] == 0 and got["seconds"] >= 0


def test_a_driver_that_refuses_is_recorded_not_raised(tmp_path: Path) -> None:
    # 100 is CUDA_ERROR_NO_DEVICE (cuda.h): later calls are not made.
    got = smoke_host.EarlyDriver(stand_in(tmp_path, 100)).outcome(wait_s=10)
    assert got is not None and got["rc"] == 100 and set(got) == {"rc", "seconds"}


def test_no_driver_library_is_an_error_entry(tmp_path: Path) -> None:
    got = smoke_host.EarlyDriver(str(tmp_path / "absent.so")).outcome(wait_s=10)
    assert got is not None and "absent.so" in got["error"]
