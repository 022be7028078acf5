"""The smoke payload on a real NVIDIA GPU (marked gpu; `pytest -m gpu tests/gpu`).

Uses ENVBUILD_TEST_TORCH_PYTHON (a Python with CUDA torch), else this interpreter. The H200
runs in benchmarks/results/ were made with tests/gpu/h200_run.sh and h200x2_run.sh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from envbuild.core.resources import payload_dir
from envbuild.matrix import load_matrix
from envbuild.smoke import plan as smoke

pytestmark = pytest.mark.gpu

PYTHON = os.environ.get("ENVBUILD_TEST_TORCH_PYTHON") or sys.executable


def _gpu_count() -> int:
    probe = subprocess.run(
        [PYTHON, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(probe.stdout.strip() or 0) if probe.returncode == 0 else 0


def _run(
    tmp_path: Path, plan: dict[str, Any], env: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan))
    proc = subprocess.run(
        [PYTHON, str(payload_dir()), "--plan", str(f)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **(env or {})},
        check=False,
    )
    return proc.returncode, smoke.parse_report(proc.stdout)


@pytest.fixture(scope="module")
def plan() -> dict[str, Any]:
    if _gpu_count() < 1:
        pytest.skip(f"no CUDA GPU visible to {PYTHON}")
    return cast(dict[str, Any], smoke.plan(None, allow_cpu=False, matrix=load_matrix()))


def test_tier2_passes_on_a_healthy_gpu(tmp_path: Path, plan: dict[str, Any]) -> None:
    rc, report = _run(tmp_path, dict(plan, framework="torch"))
    verdict = smoke.evaluate(report, plan)
    assert rc == 0 and verdict.ok, verdict.summary
    assert report["device"] == "cuda"
    assert report["metrics"]["bf16_tflops"] > 0 and report["metrics"]["mem_bw_tbs"] > 0


def test_hidden_gpus_fail_tier1(tmp_path: Path, plan: dict[str, Any]) -> None:
    rc, report = _run(tmp_path, dict(plan, framework="torch"), env={"CUDA_VISIBLE_DEVICES": ""})
    assert rc == 1
    assert not smoke.evaluate(report, plan).ok
    assert any(c["name"] == "gpu-visible" and c["status"] == "fail" for c in report["checks"])


def test_ddp_over_every_gpu(tmp_path: Path, plan: dict[str, Any]) -> None:
    if _gpu_count() < 2:
        pytest.skip("one GPU: no DDP run")
    rc, report = _run(tmp_path, dict(plan, framework="torch"))
    names = {c["name"]: c["status"] for c in report["checks"]}
    assert names["ddp-allreduce"] == names["ddp-weights"] == "pass"
    assert rc == 0
