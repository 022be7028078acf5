"""The payload's pure check rules (envbuild/payload/smoke_checks.py), without a GPU or torch."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from envbuild.payload import smoke_checks as ck

CASES = Path(__file__).resolve().parents[2] / "cases" / "smoke"


# --- versions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "seen", "verdict"),
    [
        ("2.11.0", "2.11.0+cu130", True),  # torch's local version label is ignored
        ("13.0.0", "13.0", True),  # a lock's CUDA "13.0.0" vs torch.version.cuda "13.0"
        ("9.10.2.21", "9.10.2", True),  # the wheel's 4-part cuDNN vs the library's 3 parts
        ("2.7.1", "2.11.0+cu130", False),
        ("12.8", "13.0", False),
        ("2.28.9", "2.27.3", False),
        ("2.28.9", None, False),  # expected but not seen: a mismatch, not "unknown"
        (None, "2.11.0", None),  # nothing expected: not checkable
        ("", "2.11.0", None),
    ],
)
def test_version_matches(expected: str | None, seen: str | None, verdict: bool | None) -> None:
    assert ck.version_matches(expected, seen) is verdict


def test_version_numbers_stop_at_pre_release() -> None:
    assert ck.version_numbers("2.6.0rc1") == (2, 6, 0)
    assert ck.version_numbers("0.11.2") == (0, 11, 2)
    assert ck.version_numbers(None) == ()


@pytest.mark.parametrize(
    ("code", "text"),
    [(91900, "9.19.0"), (90701, "9.7.1"), (91002, "9.10.2"), (8902, "8.9.2"), (None, None)],
)
def test_cudnn_version_text(code: int | None, text: str | None) -> None:
    assert ck.cudnn_version_text(code) == text


def test_check_version_statuses() -> None:
    assert ck.check_version("cuda", "13.0", "13.0")["status"] == "pass"
    assert ck.check_version("cuda", None, "13.0")["status"] == "skip"
    bad = ck.check_version("framework", "2.7.1", "2.11.0+cu130")
    assert bad["status"] == "fail"
    assert bad["name"] == "version:framework"
    assert "2.7.1" in bad["figure"] and "2.11.0+cu130" in bad["figure"]
    assert "rebuild" in bad["hint"]


# --- visibility, build, archs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nvml", "cvd", "want"),
    [
        (2, None, 2),
        (2, "", 0),
        (2, "0", 1),
        (2, "1,0", 2),
        (2, "0,7,1", 1),  # CUDA stops at the first invalid index
        (2, "GPU-abc,GPU-def", 2),
        (2, "NoDevFiles", 0),
        (None, "0", None),
    ],
)
def test_expected_visible(nvml: int | None, cvd: str | None, want: int | None) -> None:
    assert ck.expected_visible(nvml, cvd) == want


def test_no_gpu_fails_without_allow_cpu() -> None:
    c = ck.check_gpu_visible(
        nvml_count=1, framework_count=0, cuda_visible_devices="", allow_cpu=False, framework="torch"
    )
    assert c["status"] == "fail"
    assert "CUDA_VISIBLE_DEVICES=''" in c["figure"]
    assert "--gpus all" in c["hint"] and "--allow-cpu" in c["hint"]


def test_no_gpu_warns_with_allow_cpu() -> None:
    c = ck.check_gpu_visible(
        nvml_count=None,
        framework_count=0,
        cuda_visible_devices=None,
        allow_cpu=True,
        framework="torch",
    )
    assert c["status"] == "warn"
    assert "CPU" in c["figure"]


def test_nvml_and_framework_disagree() -> None:
    c = ck.check_gpu_visible(
        nvml_count=8,
        framework_count=4,
        cuda_visible_devices=None,
        allow_cpu=False,
        framework="torch",
    )
    assert c["status"] == "fail"
    assert "disagree" in c["hint"]
    ok = ck.check_gpu_visible(
        nvml_count=8,
        framework_count=4,
        cuda_visible_devices="0,1,2,3",
        allow_cpu=False,
        framework="torch",
    )
    assert ok["status"] == "pass"


def test_cuda_build() -> None:
    assert (
        ck.check_cuda_build(framework="torch", cuda_seen="13.0", allow_cpu=False)["status"]
        == "pass"
    )
    assert (
        ck.check_cuda_build(framework="torch", cuda_seen=None, allow_cpu=True)["status"] == "warn"
    )
    bad = ck.check_cuda_build(framework="torch", cuda_seen=None, allow_cpu=False)
    assert bad["status"] == "fail" and "CPU wheel" in bad["hint"]


def _arch_cases() -> list[dict[str, object]]:
    data = json.loads((CASES / "arch_covers.json").read_text())
    cases: list[dict[str, object]] = data["cases"]
    return cases


@pytest.mark.parametrize("case", _arch_cases(), ids=lambda c: f"{c['cc']}-{'+'.join(c['archs'])}")
def test_arch_covers(case: dict[str, object]) -> None:
    covered, how = ck.arch_covers(str(case["cc"]), case["archs"])  # type: ignore[arg-type]
    assert covered is case["covered"]
    assert str(case["how"]) in how


def test_check_archs_names_the_uncovered_gpu() -> None:
    c = ck.check_archs(["9.0", "12.0"], ["sm_80", "sm_90"], framework="torch")
    assert c["status"] == "fail"
    assert "12.0" in c["hint"] and "no kernel image" in c["hint"]
    assert ck.check_archs(["9.0"], ["sm_90"], framework="torch")["status"] == "pass"
    assert ck.check_archs([], ["sm_90"], framework="torch")["status"] == "skip"


# --- host ----------------------------------------------------------------------------------------


def test_driver_floor() -> None:
    assert ck.check_driver_floor("580.159.04", "580.65.06")["status"] == "pass"
    low = ck.check_driver_floor("570.124.06", "580.65.06")
    assert low["status"] == "fail"
    assert "580.65.06" in low["hint"] and "--driver 570.124.06" in low["hint"]
    assert ck.check_driver_floor("580.159.04", None)["status"] == "skip"
    assert ck.check_driver_floor(None, "580.65.06")["status"] == "warn"
    # numeric, not string, comparison: 1000 > 999
    assert ck.check_driver_floor("1000.1", "999.99")["status"] == "pass"


def test_shm() -> None:
    assert ck.check_shm(131072.0, 1024)["status"] == "pass"
    small = ck.check_shm(64.0, 1024)
    assert small["status"] == "fail"
    assert "--shm-size=1g" in small["hint"] and "--ipc=host" in small["hint"]
    assert ck.check_shm(None, 1024)["status"] == "warn"


def test_free_memory_reports_what_it_saw() -> None:
    low = ck.check_free_memory([500.0, 140000.0], 4096)
    assert low["status"] == "fail"
    assert "500 MiB" in low["figure"] and "4096" in low["figure"]
    assert ck.check_free_memory([142629.0], 4096)["status"] == "pass"
    assert ck.check_free_memory([], 4096)["status"] == "skip"


# --- training ------------------------------------------------------------------------------------


def test_loss_falling() -> None:
    falling = [5.6, 4.0, 3.1, 2.0, 1.0, 0.5, 0.2, 0.1, 0.08]
    assert ck.check_loss_falling(falling)["status"] == "pass"
    flat = [2.0, 2.01, 1.99, 2.0, 1.98, 1.97, 1.96]
    c = ck.check_loss_falling(flat)
    assert c["status"] == "fail" and "0.80x" in c["figure"]
    nan = [2.0, 1.5, math.nan, 1.0, 0.9, 0.8]
    assert "NaN" in ck.check_loss_falling(nan)["figure"]
    assert ck.check_loss_falling([2.0, 1.0])["status"] == "fail"
    inf = [2.0, 1.5, 1.0, math.inf, 0.9, 0.8]
    assert ck.check_loss_falling(inf)["status"] == "fail"


def test_grads_and_placement() -> None:
    assert ck.check_grads(n_params=53, nonfinite=[], zero=[])["status"] == "pass"
    nf = ck.check_grads(n_params=53, nonfinite=["0.weight at step 0"], zero=[])
    assert nf["status"] == "fail" and "0.weight" in nf["figure"]
    z = ck.check_grads(n_params=53, nonfinite=[], zero=["3.bias at step 29"])
    assert z["status"] == "fail" and "all-zero" in z["figure"]
    assert ck.check_grads(n_params=0, nonfinite=[], zero=[])["status"] == "fail"
    off = ck.check_placement(device="cuda", off_device=["batch 0 on cpu"])
    assert off["status"] == "fail" and "fell back" in off["hint"]
    assert ck.check_placement(device="cuda", off_device=[])["status"] == "pass"


def test_bitwise_repeat() -> None:
    assert ck.check_bitwise(0, 3)["status"] == "pass"
    bad = ck.check_bitwise(17, 3)
    assert bad["status"] == "fail" and "17" in bad["figure"] and "dcgmi" in bad["hint"]


# --- performance ---------------------------------------------------------------------------------

BASELINES = [
    {"gpu": "H200", "bf16_tflops": 753.0, "mem_bw_tbs": 4.232, "confidence": "high"},
    {"gpu": "H200 NVL", "bf16_tflops": 600.0, "mem_bw_tbs": 4.0, "confidence": "medium"},
    {"gpu": "H100 80GB HBM3", "bf16_tflops": 794.5, "mem_bw_tbs": 2.98, "confidence": "low"},
]


def test_pick_baseline_longest_match() -> None:
    assert ck.pick_baseline("NVIDIA H200", BASELINES)["gpu"] == "H200"  # type: ignore[index]
    assert ck.pick_baseline("NVIDIA H200 NVL", BASELINES)["gpu"] == "H200 NVL"  # type: ignore[index]
    assert ck.pick_baseline("nvidia h100 80gb hbm3", BASELINES)["gpu"] == "H100 80GB HBM3"  # type: ignore[index]
    assert ck.pick_baseline("NVIDIA L4", BASELINES) is None


@pytest.mark.parametrize(
    ("value", "gpu", "status"),
    [
        (770.7, "NVIDIA H200", "pass"),
        (0.75 * 753.0, "NVIDIA H200", "pass"),  # exactly the floor passes
        (0.74 * 753.0, "NVIDIA H200", "fail"),  # high-confidence baseline: below floor fails
        (300.0, "NVIDIA H100 80GB HBM3", "warn"),  # low-confidence baseline: a miss only warns
        (300.0, "NVIDIA L4", "warn"),  # no baseline at all
        (None, "NVIDIA H200", "skip"),
    ],
)
def test_throughput_floor(value: float | None, gpu: str, status: str) -> None:
    c = ck.check_throughput(
        "bf16-tflops",
        value=value,
        unit="TFLOP/s",
        gpu_name=gpu,
        baseline=ck.pick_baseline(gpu, BASELINES),
        key="bf16_tflops",
    )
    assert c["status"] == status
    if status in ("fail", "warn"):
        assert c["hint"]


def test_throttle_flags_and_telemetry() -> None:
    assert ck.throttle_flags(0) == []
    assert ck.throttle_flags(0x4 | 0x40) == ["hw_thermal_slowdown", "sw_power_cap"]
    busy = {
        "samples": 90,
        "util_pct": 100,
        "mem_used_mib": 2485,
        "power_w": 650.0,
        "temp_c": 55,
        "throttle": ["sw_power_cap"],
    }
    assert ck.check_telemetry(busy)["status"] == "pass"
    hot = dict(busy, throttle=["hw_thermal_slowdown"])
    assert ck.check_telemetry(hot)["status"] == "warn"
    idle = dict(busy, util_pct=0, throttle=[])
    assert ck.check_telemetry(idle)["status"] == "warn"
    assert ck.check_telemetry(None)["status"] == "skip"


# --- multi-GPU -----------------------------------------------------------------------------------


def test_allreduce_and_weights() -> None:
    assert ck.check_allreduce(3.0, 3.0, world=2)["status"] == "pass"
    assert ck.check_allreduce(2.0, 3.0, world=2)["status"] == "fail"
    assert ck.check_allreduce(None, 3.0, world=2)["status"] == "fail"
    assert ck.check_weights_equal(["a", "a"], world=2)["status"] == "pass"
    assert ck.check_weights_equal(["a", "b"], world=2)["status"] == "fail"
    assert ck.check_weights_equal(["a"], world=2)["status"] == "fail"


def test_bus_bandwidth_formula() -> None:
    # nccl-tests: busbw = algbw * 2(n-1)/n; 256 MiB in 1 ms on 2 GPUs = 268.4 GB/s algbw.
    nbytes = 256 * 2**20
    assert ck.bus_bandwidth(nbytes, 1e-3, 2) == pytest.approx(nbytes / 1e-3 / 1e9)
    assert ck.bus_bandwidth(nbytes, 1e-3, 8) == pytest.approx(nbytes / 1e-3 / 1e9 * 14 / 8)
    assert ck.bus_bandwidth(nbytes, 0.0, 2) == 0.0


# --- report --------------------------------------------------------------------------------------


def test_report_line_round_trip_and_table() -> None:
    report = {
        "schema": ck.REPORT_SCHEMA,
        "ok": False,
        "framework": "torch",
        "device": "cpu",
        "checks": [
            ck.check("gpu-visible", 1, "fail", "torch sees 0", "run with --gpus all"),
            ck.check("shm", 1, "pass", "/dev/shm 65536 MiB"),
        ],
        "host": {"gpus": [{"name": "NVIDIA H200"}]},
        "timings": {"total_s": 3.7},
    }
    line = ck.report_line(report)
    assert line.startswith("ENVBUILD-SMOKE-REPORT {")
    assert "\n" not in line
    assert json.loads(line.split(" ", 1)[1]) == report
    table = ck.format_table(report)
    assert "gpu-visible        FAIL" not in table  # columns are sized to the names
    assert "gpu-visible  FAIL    torch sees 0" in table
    assert "  gpu-visible: run with --gpus all" in table
    assert table.splitlines()[-1] == "smoke FAIL: torch on cpu (NVIDIA H200) in 3.7 s"
    assert ck.report_ok(report["checks"]) is False  # type: ignore[arg-type]
    assert ck.report_ok([ck.check("x", 1, "warn"), ck.check("y", 2, "skip")]) is True


def test_check_rejects_unknown_status() -> None:
    with pytest.raises(ValueError, match="unknown status"):
        ck.check("x", 1, "ok")


# --- a whole node: bus bandwidth against NVLink, topology -------------------------------------

H200_ROW = {"gpu": "H200", "nvlink_busbw_gbs": 370.0, "confidence": "high"}


@pytest.mark.parametrize(
    ("busbw", "status"),
    [
        (293.6, "pass"),  # 2 x H200, measured (benchmarks/results/h200x2-smoke-full.json)
        (185.0, "pass"),  # exactly half of the NVLink figure
        (24.0, "warn"),  # PCIe-like: NVLink not used
    ],
)
def test_busbw_against_the_nvlink_figure(busbw: float, status: str) -> None:
    c = ck.check_busbw(busbw, world=2, gpu_name="NVIDIA H200", baseline=H200_ROW, nvls="off")
    assert c["status"] == status
    assert f"{busbw:.1f} GB/s" in c["figure"]
    assert f"{busbw / 370.0:.2f} x the 370 GB/s NVLink figure" in c["figure"]
    assert "NVLS off" in c["figure"]


def test_busbw_without_an_nvlink_figure_passes_and_says_so() -> None:
    c = ck.check_busbw(20.0, world=2, gpu_name="NVIDIA L4", baseline=None, nvls="default")
    assert c["status"] == "pass"
    assert "no NVLink figure for 'NVIDIA L4'" in c["figure"]


def test_ddp_checks_carry_the_busbw_verdict() -> None:
    from envbuild.payload import smoke_ddp

    ranks = [
        {"rank": r, "allreduce": 36.0, "weights": "1/2", "gathered_equal": True, "busbw_gbs": bw}
        for r, bw in enumerate([301.0, 299.0, 300.5, 300.0, 302.0, 298.0, 300.0, 300.0])
    ]
    checks = smoke_ddp.checks_from(
        {"killed": False, "wall_s": 9.0, "ranks": ranks}, 8, gpu_name="H200", baseline=H200_ROW
    )
    assert [c["name"] for c in checks] == ["ddp-allreduce", "ddp-weights", "ddp-busbw"]
    assert all(c["status"] == "pass" for c in checks)
    assert "298.0 GB/s" in checks[-1]["figure"]  # the slowest rank is the node's figure
    assert "(8 GPUs" in checks[-1]["figure"]


def test_topology_from_nvidia_smi_topo_m() -> None:
    # The layout printed in https://github.com/NVIDIA/nccl-tests/issues/178 (8 x A100, NVLink pairs).
    from envbuild.payload import smoke_host

    text = (
        Path(__file__).resolve().parents[2] / "fixtures/topology/a100-pairs-topo-m.txt"
    ).read_text()
    topo = smoke_host.parse_topo_m(text)
    assert topo is not None
    assert topo["source"] == "nvidia-smi"
    assert len(topo["matrix"]) == 8 and all(len(row) == 8 for row in topo["matrix"])
    assert topo["matrix"][0][:3] == ["X", "NV12", "NODE"]
    assert topo["matrix"][7][0] == "SYS" and topo["matrix"][7][4] == "NODE"
    assert [g["nvlinks"] for g in topo["gpus"]] == [12] * 8


def test_topology_without_nvml_or_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuild.payload import smoke_host

    monkeypatch.setattr(smoke_host, "_topology_nvml", lambda count: None)
    monkeypatch.setattr("envbuild.payload.smoke_host.shutil.which", lambda name: None)
    assert smoke_host.topology(2) == {"source": None, "gpus": [], "matrix": []}
