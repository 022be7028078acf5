"""The torch payload run for real on the CPU, with a Python that has torch.

torch is not a dependency of envbuild, so these tests need ENVBUILD_TEST_TORCH_PYTHON: the
path of a Python with (CPU) torch, e.g. `python3 -m venv /tmp/tvenv && /tmp/tvenv/bin/pip
install torch` then `ENVBUILD_TEST_TORCH_PYTHON=/tmp/tvenv/bin/python make test`. Without it
they skip with that reason. Each run takes a few seconds (import torch + 30 CPU steps).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envbuild.app import smoke as smoke_use_case
from envbuild.core.resources import payload_dir
from envbuild.matrix import Matrix
from envbuild.payload import smoke_checks as ck
from envbuild.smoke import plan as smoke

TORCH_PYTHON = os.environ.get("ENVBUILD_TEST_TORCH_PYTHON", "")


def _has_torch(python: str) -> bool:
    if not python or not Path(python).exists():
        return False
    probe = subprocess.run([python, "-c", "import torch"], capture_output=True, check=False)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(
    not _has_torch(TORCH_PYTHON),
    reason="set ENVBUILD_TEST_TORCH_PYTHON to a Python with torch (CPU is enough)",
)


def _run(
    tmp_path: Path, plan: dict[str, Any], *args: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], str]:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    proc = subprocess.run(
        [TORCH_PYTHON, str(payload_dir()), "--plan", str(plan_file), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(ck.REPORT_MARKER + " ")  # the LAST stdout line is the report
    return proc.returncode, smoke.parse_report(proc.stdout), proc.stderr


def _status(report: dict[str, Any], name: str) -> str:
    return next(str(c["status"]) for c in report["checks"] if c["name"] == name)


BARE = smoke.plan(None, allow_cpu=False, matrix=Matrix())


def test_no_gpu_fails_tier1_instead_of_training_on_the_cpu(tmp_path: Path) -> None:
    rc, report, stderr = _run(tmp_path, dict(BARE, tier=2), env={"CUDA_VISIBLE_DEVICES": ""})
    assert rc == 1
    assert report["ok"] is False and report["device"] == "cpu"
    assert _status(report, "gpu-visible") == "fail"
    assert _status(report, "tier2") == "skip"  # nothing trained
    assert "loss-falling" not in {c["name"] for c in report["checks"]}
    assert "gpu-visible" in stderr and "smoke FAIL" in stderr


def test_allow_cpu_runs_the_cpu_path_and_trains(tmp_path: Path) -> None:
    rc, report, stderr = _run(tmp_path, dict(BARE, tier=2), "--allow-cpu")
    assert rc == 0, stderr
    assert report["ok"] is True and report["device"] == "cpu"
    for name in ("on-device", "grads", "loss-falling", "train", "conv", "sdpa", "matmul-repeat"):
        assert _status(report, name) == "pass", name
    assert report["metrics"]["loss_last"] < report["metrics"]["loss_first"]
    assert report["metrics"]["steps"] == BARE["steps"]
    assert smoke.evaluate(report, dict(BARE, allow_cpu=True)).ok
    # torch._dynamo (the optimizer's first import) was loaded beside the checks before training,
    # and was ready before the training ended.
    t = report["timings"]
    assert 0 < t["dynamo_ready_s"] <= t["import_s"] + t["tier1_s"] + t["tier2_s"]


def test_a_version_other_than_the_plan_fails(tmp_path: Path) -> None:
    plan = dict(BARE, tier=1, framework="torch", expect={"framework": "1.13.1"})
    rc, report, _ = _run(tmp_path, plan, "--allow-cpu")
    assert rc == 1
    assert _status(report, "version:framework") == "fail"
    seen = report["versions"]["framework"]["seen"]
    assert "1.13.1" in next(
        c["figure"] for c in report["checks"] if c["name"] == "version:framework"
    )
    assert not seen.startswith("1.13.1")


def test_watchdog_reports_a_timeout(tmp_path: Path) -> None:
    plan = dict(BARE, tier=2, timeout_s=1)  # import torch alone takes longer than 1 s
    rc, report, _ = _run(tmp_path, plan, "--allow-cpu")
    assert rc == 1
    assert _status(report, "timeout") == "fail"


def test_api_smoke_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(dict(BARE, tier=1, framework="torch")))
    outcome = smoke_use_case.run(allow_cpu=True, plan_file=plan_file, python=TORCH_PYTHON)
    assert outcome.verdict.ok, outcome.verdict.summary
    assert outcome.report["framework"] == "torch" and outcome.verdict.device == "cpu"
    assert outcome.plan["allow_cpu"] is True
