"""hostinfo: the pure parsers, the NVML error mapping (fake pynvml module), reading facts back."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from envbuild.core.errors import NoGpuError, UserError
from envbuild.engine.facts import parse_docker_info
from envbuild.host import probe as hostinfo

HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"

# The first line of /proc/driver/nvidia/version as recorded on the H200 (open kernel module)
# and the shape of the proprietary module's line.
OPEN_MODULE = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    "(nixbld@)  \nGCC version:  gcc version 15.3.0 (GCC) \n"
)
PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Thu Feb 20 2025\n"


def test_kernel_module_version_open_and_proprietary() -> None:
    assert hostinfo.parse_proc_version(OPEN_MODULE) == "580.159.04"
    assert hostinfo.parse_proc_version(PROPRIETARY) == "570.124.06"
    assert hostinfo.parse_proc_version("GCC version: 13\n") is None


def test_nvml_library_version_from_maps() -> None:
    maps = (
        "7f00-7f10 r--p 00000000 08:01 1 /usr/lib/libc.so.6\n"
        "7f20-7f30 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.575.57.08\n"
    )
    path, version = hostinfo.parse_nvml_library_from_maps(maps)
    assert path == "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.575.57.08"
    assert version == "575.57.08"
    assert hostinfo.parse_nvml_library_from_maps("7f00 r--p 0 0 1 /usr/lib/libc.so.6\n") == (
        None,
        None,
    )


@pytest.mark.parametrize(
    ("value", "text"), [(13000, "13.0"), (12080, "12.8"), (11040, "11.4"), (12090, "12.9")]
)
def test_cuda_version_from_nvml_int(value: int, text: str) -> None:
    assert hostinfo.cuda_version_from_int(value) == text


def test_nvml_version_drops_cuda_major() -> None:
    assert hostinfo.nvml_version_to_driver("13.580.159.04") == "580.159.04"


def test_cdi_spec_kind_and_driver() -> None:
    spec = """cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: all
containerEdits:
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06
  - hostPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.124.06
"""
    assert hostinfo.parse_cdi_spec(spec) == {
        "kind": "nvidia.com/gpu",
        "driver_versions": ["570.124.06"],
    }
    as_json = json.dumps({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": []})
    assert hostinfo.parse_cdi_spec(as_json)["kind"] == "nvidia.com/gpu"


def test_probe_cdi_reads_spec_files(tmp_path: Path) -> None:
    (tmp_path / "nvidia.yaml").write_text("kind: nvidia.com/gpu\n# libcuda.so.580.95.05\n")
    (tmp_path / "notes.txt").write_text("ignored")
    specs = hostinfo.probe_cdi([str(tmp_path)])
    assert [s["path"] for s in specs] == [str(tmp_path / "nvidia.yaml")]
    assert specs[0]["driver_versions"] == ["580.95.05"]
    assert specs[0]["devices"] == []
    assert isinstance(specs[0]["mtime"], int)


def test_probe_shm_reads_statvfs(tmp_path: Path) -> None:
    shm = hostinfo.probe_shm(str(tmp_path))
    assert isinstance(shm["size_mib"], int) and shm["size_mib"] > 0
    assert hostinfo.probe_shm(str(tmp_path / "missing"))["size_mib"] is None


def test_docker_info_fields() -> None:
    info = {
        "ServerVersion": "27.5.1",
        "Runtimes": {"runc": {}, "nvidia": {"path": "nvidia-container-runtime"}},
        "DefaultRuntime": "runc",
        "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"],
    }
    assert parse_docker_info(info) == {
        "server_version": "27.5.1",
        "runtimes": ["nvidia", "runc"],
        "default_runtime": "runc",
        "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"],
        "discovered_devices": None,
    }
    # Docker >= 28.3 lists the CDI devices it found; only CDI ones matter here.
    found = [{"Source": "cdi", "ID": "nvidia.com/gpu=all"}, {"Source": "other", "ID": "x"}]
    parsed = parse_docker_info({**info, "DiscoveredDevices": found})
    assert parsed["discovered_devices"] == ["nvidia.com/gpu=all"]


# --- NVML error mapping through a stand-in for the pynvml module ----------------------------------


class _NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _fake_nvml(init_error: int | None = None, **overrides: Any) -> SimpleNamespace:
    """The slice of pynvml's API that probe_driver uses, answering like one healthy GPU."""

    def init() -> None:
        if init_error is not None:
            raise _NVMLError(init_error)

    def not_supported(*_a: Any) -> Any:
        raise _NVMLError(3)

    ns = SimpleNamespace(
        NVMLError=_NVMLError,
        NVML_ERROR_NOT_SUPPORTED=3,
        NVML_ERROR_NO_PERMISSION=4,
        NVML_ERROR_DRIVER_NOT_LOADED=9,
        NVML_ERROR_LIBRARY_NOT_FOUND=12,
        NVML_ERROR_LIB_RM_VERSION_MISMATCH=18,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        NVML_AGGREGATE_ECC=1,
        NVML_TEMPERATURE_GPU=0,
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0,
        NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "580.159.04",
        nvmlSystemGetNVMLVersion=lambda: b"13.580.159.04",
        nvmlSystemGetCudaDriverVersion_v2=lambda: 13000,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlDeviceGetUUID=lambda h: "GPU-1",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=143771 * 1024 * 1024),
        nvmlDeviceGetBrand=lambda h: 14,
        nvmlDeviceGetPowerManagementLimit=lambda h: 700000,
        nvmlDeviceGetPersistenceMode=lambda h: 1,
        nvmlDeviceGetMigMode=lambda h: [0, 0],
        nvmlDeviceGetEccMode=lambda h: [1, 1],
        nvmlDeviceGetTotalEccErrors=lambda h, t, c: 0,
        nvmlDeviceGetTemperature=lambda h, s: 35,
        nvmlDeviceGetRetiredPages=not_supported,
        nvmlDeviceGetRetiredPagesPendingStatus=not_supported,
        nvmlDeviceGetRemappedRows=lambda h: (0, 0, 0, 0),
    )
    for k, v in overrides.items():
        setattr(ns, k, v)
    return ns


def test_no_library_is_no_gpu_error_with_first_checklist_step(tmp_path: Path) -> None:
    with pytest.raises(NoGpuError) as exc:
        hostinfo.probe_driver(_fake_nvml(init_error=12), proc_version=tmp_path / "none")
    assert exc.value.exit_code == 2
    assert "nvidia-smi" in exc.value.hint
    assert exc.value.fields["nvml_error"] == "LibraryNotFound"


def test_driver_not_loaded_is_no_gpu_error(tmp_path: Path) -> None:
    with pytest.raises(NoGpuError):
        hostinfo.probe_driver(_fake_nvml(init_error=9), proc_version=tmp_path / "none")


def test_library_module_mismatch_is_recorded_not_raised(tmp_path: Path) -> None:
    proc = tmp_path / "version"
    proc.write_text(PROPRIETARY)
    driver, gpus = hostinfo.probe_driver(_fake_nvml(init_error=18), proc_version=proc)
    assert driver["nvml_error"] == "LibRmVersionMismatch"
    assert driver["kernel_module_version"] == "570.124.06"
    assert driver["version"] is None
    assert gpus == []


def test_healthy_gpu_facts_with_unsupported_queries_as_null(tmp_path: Path) -> None:
    proc = tmp_path / "version"
    proc.write_text(OPEN_MODULE)
    driver, gpus = hostinfo.probe_driver(_fake_nvml(), proc_version=proc)
    assert driver["version"] == "580.159.04"
    assert driver["cuda"] == "13.0"
    assert driver["nvml_version"] == "13.580.159.04"
    assert driver["kernel_module_version"] == "580.159.04"
    (gpu,) = gpus
    assert gpu["cc"] == "9.0"
    assert gpu["brand"] == "nvidia"
    assert gpu["memory_mib"] == 143771
    assert gpu["power_limit_w"] == 700
    assert gpu["retired_pages"] is None  # NotSupported on Hopper
    assert gpu["remapped_rows"] == {
        "correctable": 0,
        "uncorrectable": 0,
        "pending": False,
        "failure": False,
    }


def test_probe_facts_on_this_machine_without_driver_says_so() -> None:
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver")
    # The facts say so and still carry what can be probed (engine, toolkit, CDI, /dev/shm).
    facts = hostinfo.probe_facts()
    assert facts["driver"]["nvml_error"] in hostinfo.NO_DRIVER_ERRORS
    assert facts["gpus"] == []
    assert {"engine", "toolkit", "cdi", "shm"} <= set(facts)
    err = hostinfo.no_gpu_error(facts)
    assert err is not None and err.exit_code == 2
    with pytest.raises(NoGpuError):
        hostinfo.probe_host()


# --- reading facts back --------------------------------------------------------------------------


def test_host_from_recorded_h200() -> None:
    facts = json.loads((HOSTS / "h200-healthy.json").read_text())
    host = hostinfo.host_from_facts(facts)
    assert host.driver == "580.159.04"
    assert host.cuda_driver == "13.0"
    assert [(g.name, g.cc, g.brand) for g in host.gpus] == [("NVIDIA H200", "9.0", "nvidia")]
    assert host.gpus[0].memory_mib == 143771


def test_host_from_mismatch_uses_kernel_module_version() -> None:
    facts = json.loads((HOSTS / "mismatch.json").read_text())
    host = hostinfo.host_from_facts(facts)
    assert host.driver == "570.124.06"
    assert host.gpus == ()


def test_hand_written_facts() -> None:
    host = hostinfo.host_from_facts(
        {"name": "a", "driver": "535.104.05", "gpus": [{"name": "L4", "cc": "8.9"}]}
    )
    assert (host.name, host.driver, host.gpus[0].cc) == ("a", "535.104.05", "8.9")


@pytest.mark.parametrize(
    "facts",
    [
        {"driver": 535, "gpus": []},
        {"driver": "535.1", "gpus": {}},
        {"driver": "535.1", "gpus": [{"name": "L4"}]},
        {"driver": "535.1", "gpus": [{"name": "L4", "cc": "sm_89"}]},
        {"schema": 99, "driver": "535.1"},
        ["not", "an", "object"],
    ],
)
def test_bad_facts_are_user_errors(facts: Any) -> None:
    with pytest.raises(UserError) as exc:
        hostinfo.host_from_facts(facts)
    assert exc.value.exit_code == 2
    assert exc.value.hint


def test_load_facts_file_forms(tmp_path: Path) -> None:
    objs = [json.loads((HOSTS / n).read_text()) for n in ("h200-healthy.json", "small-shm.json")]
    as_list = tmp_path / "list.json"
    as_list.write_text(json.dumps(objs))
    as_lines = tmp_path / "hosts.jsonl"
    as_lines.write_text("\n".join(json.dumps(o) for o in objs) + "\n")
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"facts": objs[0]}))
    for path, n in ((as_list, 2), (as_lines, 2), (one, 1)):
        loaded = hostinfo.load_facts_file(path)
        assert [f["hostname"] for f in loaded] == [o["hostname"] for o in objs][:n]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"driver": "1"}\nnot json\n')
    with pytest.raises(UserError, match="line 2"):
        hostinfo.load_facts_file(bad)


def test_hostinfo_imports_no_heavy_module() -> None:
    import subprocess
    import sys

    code = (
        "import sys, envbuild.host.probe; "
        "bad = [m for m in ('pynvml', 'docker', 'jinja2', 'tomlkit', 'requests') "
        "if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_lost_gpu_is_recorded_and_the_others_kept(tmp_path: Path) -> None:
    def handle(i: int) -> str:
        if i == 1:
            raise _NVMLError(15)
        return f"h{i}"

    nvml = _fake_nvml(nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=handle)
    nvml.NVML_ERROR_GPU_IS_LOST = 15
    _driver, gpus = hostinfo.probe_driver(nvml, proc_version=tmp_path / "none")
    assert gpus[0]["name"] == "NVIDIA H200"
    assert gpus[1] == {"index": 1, "error": "GpuIsLost", "error_text": "NVML error 15"}
    facts = {"driver": _driver, "gpus": gpus}
    assert [g.index for g in hostinfo.host_from_facts(facts).gpus] == [0]
