"""envbuild.smoke.plan: the plan from a lock, the report parser, and the verdict (pure)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from envbuild.core.errors import SmokeFailed
from envbuild.core.models import (
    BaseImage,
    Floors,
    FrameworkPick,
    Indexes,
    Lock,
    LockedPackage,
    SmokeSettings,
    Stack,
    Targets,
)
from envbuild.matrix import GpuBaseline, Matrix
from envbuild.payload import smoke_checks as ck
from envbuild.smoke import plan as smoke

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "benchmarks" / "results"

MATRIX = Matrix(
    baselines=(
        GpuBaseline(gpu="H200", bf16_tflops=753.0, mem_bw_tbs=4.232, source="test row"),
        GpuBaseline(
            gpu="H100 80GB HBM3", bf16_tflops=794.5, mem_bw_tbs=2.98, source="t", confidence="low"
        ),
    )
)


def _lock(*, cuda: str | None = "12.8.0", packages: tuple[LockedPackage, ...] = ()) -> Lock:
    gpu = cuda is not None
    stack = Stack(
        framework=FrameworkPick(
            name="torch",
            version="2.7.1",
            variant="cu128" if gpu else "cpu",
            requirement="torch==2.7.1",
        ),
        cuda=cuda,
        cudnn="9.7.1" if gpu else None,
        nccl="2.26.2" if gpu else None,
        python="3.12",
        os="ubuntu24.04",
        flavour="base" if gpu else "cpu",
        base_image=BaseImage(ref="nvidia/cuda:12.8.1-base-ubuntu24.04", flavour="base", os="x"),
        archs=("sm_80", "sm_90", "compute_90") if gpu else (),
        target_archs=("sm_90",) if gpu else (),
        floors=Floors(toolkit="570.26", minor_compat="525.60.13", relied_on="minor_compat")
        if gpu
        else None,
    )
    return Lock(
        name="torch-train",
        input_hash="sha256:abc",
        stack=stack,
        targets=Targets(gpus=("H100",), driver="535.104.05"),
        platform="x86_64",
        indexes=Indexes(),
        smoke=SmokeSettings(tier=2, timeout_s=300, steps=20, min_shm_mib=2048),
        base_digest=None,
        packages=packages,
    )


# --- plan ----------------------------------------------------------------------------------------


def test_plan_from_a_gpu_lock() -> None:
    pkgs = (
        LockedPackage("nvidia-cudnn-cu12", "9.7.1.26", ("sha256:1",), "https://pypi.org/simple"),
        LockedPackage("nvidia-nccl-cu12", "2.26.5", ("sha256:2",), "https://pypi.org/simple"),
    )
    p = smoke.plan(_lock(packages=pkgs), allow_cpu=False, matrix=MATRIX)
    assert p["framework"] == "torch"
    # The locked wheels are what the framework loads: they win over the stack's row.
    assert p["expect"] == {
        "framework": "2.7.1",
        "cuda": "12.8.0",
        "cudnn": "9.7.1.26",
        "nccl": "2.26.5",
    }
    assert p["driver_floor"] == "525.60.13"  # the floor the lock relies on (MVC)
    assert p["allow_cpu"] is False
    assert (p["tier"], p["steps"], p["timeout_s"], p["min_shm_mib"]) == (2, 20, 300, 2048)
    assert p["min_free_mib"] == smoke.MIN_FREE_MIB[2]
    assert p["floor_ratio"] == 0.75
    assert [b["gpu"] for b in p["baselines"]] == ["H100 80GB HBM3", "H200"]
    assert p["locked_archs"] == ["sm_80", "sm_90", "compute_90"]
    json.dumps(p)  # JSON-able: it is written into the build context


def test_plan_stack_versions_without_wheels_and_tier_override() -> None:
    p = smoke.plan(_lock(), allow_cpu=False, matrix=MATRIX, tier=1)
    assert p["expect"]["cudnn"] == "9.7.1" and p["expect"]["nccl"] == "2.26.2"
    assert p["tier"] == 1 and p["min_free_mib"] == smoke.MIN_FREE_MIB[1]
    with pytest.raises(ValueError, match="tier"):
        smoke.plan(_lock(), allow_cpu=False, matrix=MATRIX, tier=3)


def test_plan_cpu_lock_allows_cpu_and_expects_no_cuda() -> None:
    p = smoke.plan(_lock(cuda=None), allow_cpu=False, matrix=MATRIX)
    assert p["allow_cpu"] is True
    assert p["expect"] == {"framework": "2.7.1"}
    assert p["driver_floor"] is None


def test_plan_without_lock_is_bare_and_deterministic() -> None:
    a = smoke.plan(None, allow_cpu=True, matrix=MATRIX)
    b = smoke.plan(None, allow_cpu=True, matrix=MATRIX)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert a["framework"] == "auto" and a["expect"] == {} and a["allow_cpu"] is True
    assert a["tier"] == SmokeSettings().tier


# --- parse_report --------------------------------------------------------------------------------


def _report(**over: Any) -> dict[str, Any]:
    checks = [
        ck.check("gpu-visible", 1, "pass", "torch sees 1, NVML 1"),
        ck.check("cuda-build", 1, "pass", "torch built with CUDA 12.8"),
        ck.check("version:framework", 1, "pass", "2.7.1+cu128 (plan 2.7.1)"),
        ck.check("driver-floor", 1, "pass", "driver 580.159.04 >= 525.60.13"),
        ck.check("shm", 1, "pass", "/dev/shm 65536 MiB"),
        ck.check("grads", 2, "pass", "53 params finite and non-zero"),
        ck.check("loss-falling", 2, "pass", "3.6 -> 0.08"),
    ]
    r: dict[str, Any] = {
        "schema": ck.REPORT_SCHEMA,
        "ok": True,
        "framework": "torch",
        "device": "cuda",
        "checks": checks,
        "versions": {
            "framework": {"expected": "2.7.1", "seen": "2.7.1+cu128"},
            "cuda": {"expected": "12.8.0", "seen": "12.8"},
            "cudnn": {"expected": "9.7.1", "seen": "9.7.1"},
            "nccl": {"expected": "2.26.2", "seen": "2.26.2"},
        },
        "host": {"gpus": [{"name": "NVIDIA H200"}, {"name": "NVIDIA H200"}]},
        "metrics": {"framework_gpus": [{"name": "NVIDIA H200"}]},
        "timings": {"total_s": 10.4},
    }
    r.update(over)
    return r


def test_parse_report_takes_the_last_marker_line() -> None:
    r = _report()
    stdout = "noise\n" + ck.report_line(dict(r, ok=False)) + "\nmore noise\n" + ck.report_line(r)
    assert smoke.parse_report(stdout) == r


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("Segmentation fault\n", "printed no report"),
        ("ENVBUILD-SMOKE-REPORT {not json", "not JSON"),
        ("ENVBUILD-SMOKE-REPORT []", "not a JSON object"),
        ('ENVBUILD-SMOKE-REPORT {"schema": 99, "ok": true, "checks": []}', "schema 99"),
        ('ENVBUILD-SMOKE-REPORT {"schema": 1, "ok": "yes", "checks": []}', "'ok'"),
        (
            'ENVBUILD-SMOKE-REPORT {"schema": 1, "ok": true, "checks": [{"name": "x", "status": "ok"}]}',
            "status 'ok'",
        ),
    ],
)
def test_parse_report_rejects(stdout: str, message: str) -> None:
    with pytest.raises(SmokeFailed, match=message) as info:
        smoke.parse_report(stdout)
    assert info.value.exit_code == 6
    assert info.value.hint


# --- evaluate ------------------------------------------------------------------------------------

PLAN = smoke.plan(_lock(), allow_cpu=False, matrix=MATRIX)


def test_evaluate_pass() -> None:
    v = smoke.evaluate(_report(), PLAN)
    assert v.ok and not v.failed
    assert v.device == "cuda"
    # The visible GPU (CUDA_VISIBLE_DEVICES applied), not every GPU NVML lists.
    assert v.summary == "smoke PASS: torch on cuda (NVIDIA H200), 7 checks in 10.4 s"
    # `envbuild image` reports one smoke time of its own (smoke_s): its verdict line has none.
    untimed = smoke.evaluate(_report(), PLAN, timed=False)
    assert untimed.summary == "smoke PASS: torch on cuda (NVIDIA H200), 7 checks"
    from envbuild.app.image import make_judge
    from envbuild.engine.protocol import RunResult

    stdout = ck.REPORT_MARKER + " " + json.dumps(_report()) + "\n"
    assert make_judge(PLAN)(RunResult(0, stdout, "")).summary == untimed.summary


def test_evaluate_fails_on_a_failed_check_with_its_hint() -> None:
    r = _report()
    r["checks"][0] = ck.check("gpu-visible", 1, "fail", "torch sees 0", "run with --gpus all")
    v = smoke.evaluate(r, PLAN)
    assert not v.ok
    assert [(f.name, f.hint) for f in v.failed] == [("gpu-visible", "run with --gpus all")]
    assert "1 of 7 checks failed (gpu-visible)" in v.summary


def test_evaluate_does_not_trust_ok_on_a_cpu_run() -> None:
    v = smoke.evaluate(_report(device="cpu"), PLAN)
    assert not v.ok
    assert v.failed[0].name == "gpu-visible" and "CPU" in v.failed[0].figure
    allowed = dict(PLAN, allow_cpu=True)
    assert smoke.evaluate(_report(device="cpu"), allowed).ok


def test_evaluate_rechecks_versions_against_the_plan() -> None:
    r = _report()
    r["versions"]["cuda"] = {"expected": None, "seen": "13.0"}  # a payload that expected nothing
    v = smoke.evaluate(r, PLAN)
    assert [f.name for f in v.failed] == ["version:cuda"]
    assert "13.0" in v.failed[0].figure and "12.8.0" in v.failed[0].figure


def test_evaluate_requires_the_training_checks_on_tier_2() -> None:
    r = _report()
    r["checks"] = [c for c in r["checks"] if c["name"] != "loss-falling"]
    v = smoke.evaluate(r, PLAN)
    assert [f.name for f in v.failed] == ["loss-falling"]
    assert smoke.evaluate(r, dict(PLAN, tier=1)).ok


def test_evaluate_other_framework_fails() -> None:
    v = smoke.evaluate(_report(framework="jax"), PLAN)
    assert "framework" in [f.name for f in v.failed]


def test_evaluate_keeps_a_payload_failure_to_itself() -> None:
    r = _report(
        device="cpu",
        framework=None,
        versions={},
        checks=[ck.check("framework", 1, "fail", "torch is not importable", "install torch")],
    )
    v = smoke.evaluate(r, dict(PLAN, framework="auto"))
    assert [f.name for f in v.failed] == ["framework"]  # no noise about missing checks


def test_format_report_lists_failures_with_next_steps() -> None:
    r = _report()
    r["checks"][4] = ck.check("shm", 1, "fail", "/dev/shm 64 MiB (need 1024)", "--shm-size=1g")
    v = smoke.evaluate(r, PLAN)
    from envbuild.cli.commands.smoke import render

    text = render(r, v)
    lines = text.splitlines()
    assert lines[0].split() == ["TIER", "CHECK", "STATUS", "FIGURE"]
    assert any(ln.split()[:3] == ["1", "shm", "FAIL"] for ln in lines)
    assert "  shm: --shm-size=1g" in lines
    assert lines[-1] == v.summary
    out = smoke.verdict_json(r, v)
    assert out["ok"] is False and out["verdict"]["failed"][0]["name"] == "shm"


# --- the committed H200 reports ------------------------------------------------------------------

H200_REPORTS = sorted(RESULTS.glob("h200*-smoke-*.json"))


@pytest.mark.parametrize("path", H200_REPORTS, ids=lambda p: p.name)
def test_committed_h200_reports_parse_and_pass(path: Path) -> None:
    data = json.loads(path.read_text())
    report = {k: v for k, v in data.items() if k != "verdict"}
    again = smoke.parse_report(ck.report_line(report))
    cpu_run = "allow-cpu" in path.name  # CUDA_VISIBLE_DEVICES="" with --allow-cpu
    plan = copy.deepcopy(PLAN)
    plan.update(
        {
            "framework": report["framework"],
            "expect": {},
            "tier": report["tier"],
            "allow_cpu": cpu_run,
        }
    )
    verdict = smoke.evaluate(again, plan)
    assert verdict.ok, verdict.summary
    assert report["device"] == ("cpu" if cpu_run else "cuda")
    if cpu_run:  # the same report under a GPU plan must not pass
        assert not smoke.evaluate(again, dict(plan, allow_cpu=False)).ok
    assert report["host"]["driver"] == "580.159.04"


def test_committed_fault_reports_fail_for_the_right_reason() -> None:
    faults = json.loads((RESULTS / "h200-faults.json").read_text())
    reasons = {
        "novis": "gpu-visible",
        "version": "version:framework",
        "lowmem": "free-memory",
        "oom": "train",
    }
    for name, check_name in reasons.items():
        report = faults[name]
        plan = dict(PLAN, framework="torch", expect={})
        v = smoke.evaluate(report, plan)
        assert not v.ok
        assert check_name in [f.name for f in v.failed], (name, v.summary)
    assert "500 MiB free" in next(
        c["figure"] for c in faults["oom"]["checks"] if c["name"] == "train"
    )


def test_smoke_containers_inherit_only_ncclish_settings() -> None:
    from envbuild.smoke.container import passthrough_environment

    environ = {
        "NCCL_NVLS_ENABLE": "0",
        "NCCL_SOCKET_IFNAME": "eth0",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "nope",
        "NCCL_DEBUG": "INFO\nfake",
    }
    assert passthrough_environment(environ) == {
        "NCCL_NVLS_ENABLE": "0",
        "NCCL_SOCKET_IFNAME": "eth0",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    }
