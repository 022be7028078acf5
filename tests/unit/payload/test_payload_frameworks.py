"""The JAX and TensorFlow payloads run for real on the CPU, with Pythons that have them.

Neither framework is a dependency of envbuild, so these tests need interpreters named by
ENVBUILD_TEST_JAX_PYTHON and ENVBUILD_TEST_TF_PYTHON, e.g.
`python3 -m venv /tmp/jaxvenv && /tmp/jaxvenv/bin/pip install jax` and
`python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu`, then
`ENVBUILD_TEST_JAX_PYTHON=/tmp/jaxvenv/bin/python ENVBUILD_TEST_TF_PYTHON=/tmp/tfvenv/bin/python
make test`. A framework whose variable is unset (or whose Python cannot import it) skips with
that reason. Each run takes a few seconds (the import, a jitted matmul, 30 CPU steps).
"""

from __future__ import annotations

import json
import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from envbuild.app import smoke as smoke_use_case
from envbuild.core.resources import payload_dir
from envbuild.matrix import Matrix
from envbuild.payload import smoke_checks as ck
from envbuild.smoke import plan as smoke

# framework -> (environment variable naming its Python, the module to import)
FRAMEWORKS = {
    "jax": ("ENVBUILD_TEST_JAX_PYTHON", "jax"),
    "tensorflow": ("ENVBUILD_TEST_TF_PYTHON", "tensorflow"),
}
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}


@cache
def _version(framework: str) -> str | None:
    """The framework's version as its Python reports it; None when it is not usable."""
    var, module = FRAMEWORKS[framework]
    python = os.environ.get(var, "")
    if not python or not Path(python).exists():
        return None
    probe = subprocess.run(
        [python, "-c", f"import {module}; print({module}.__version__)"],
        capture_output=True,
        text=True,
        env={**os.environ, **QUIET},
        check=False,
    )
    lines = probe.stdout.strip().splitlines()
    return lines[-1] if probe.returncode == 0 and lines else None


def _python(framework: str) -> str:
    var, module = FRAMEWORKS[framework]
    if _version(framework) is None:
        pytest.skip(f"set {var} to a Python with {module} (CPU is enough)")
    return os.environ[var]


def _plan(framework: str, **changes: Any) -> dict[str, Any]:
    base = smoke.plan(None, allow_cpu=False, matrix=Matrix())
    return {**base, "framework": framework, **changes}


def _run(
    framework: str,
    tmp_path: Path,
    plan: dict[str, Any],
    *args: str,
    env: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any], str]:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    proc = subprocess.run(
        [_python(framework), str(payload_dir()), "--plan", str(plan_file), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **QUIET, **(env or {})},
        check=False,
    )
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(ck.REPORT_MARKER + " ")  # the LAST stdout line is the report
    return proc.returncode, smoke.parse_report(proc.stdout), proc.stderr


def _status(report: dict[str, Any], name: str) -> str:
    return next(str(c["status"]) for c in report["checks"] if c["name"] == name)


FRAMEWORK_PARAMS = pytest.mark.parametrize("framework", sorted(FRAMEWORKS))


@FRAMEWORK_PARAMS
def test_allow_cpu_runs_a_jitted_matmul_and_trains_on_the_cpu(
    framework: str, tmp_path: Path
) -> None:
    version = _version(framework) or ""
    plan = _plan(framework, tier=2, expect={"framework": version})
    rc, report, stderr = _run(framework, tmp_path, plan, "--allow-cpu")
    assert rc == 0, stderr
    assert report["ok"] is True and report["device"] == "cpu"
    assert report["framework"] == framework and report["schema"] == ck.REPORT_SCHEMA
    assert _status(report, "gpu-visible") == "warn"  # the CPU run is said, not hidden
    assert _status(report, "version:framework") == "pass"
    for name in ("jit-matmul", "on-device", "grads", "loss-falling"):
        assert _status(report, name) == "pass", name
    assert "cpu" in next(c["figure"] for c in report["checks"] if c["name"] == "jit-matmul").lower()
    metrics = report["metrics"]
    assert metrics["loss_last"] < metrics["loss_first"]
    assert metrics["steps"] == plan["steps"] and metrics["precision"] == "fp32"
    assert report["versions"]["framework"] == {"expected": version, "seen": version}
    verdict = smoke.evaluate(report, dict(plan, allow_cpu=True))
    assert verdict.ok, verdict.summary
    assert f"smoke PASS: {framework} on cpu" in stderr


@FRAMEWORK_PARAMS
def test_no_gpu_without_allow_cpu_fails_tier1_and_trains_nothing(
    framework: str, tmp_path: Path
) -> None:
    plan = _plan(framework, tier=2)
    rc, report, stderr = _run(framework, tmp_path, plan, env={"CUDA_VISIBLE_DEVICES": ""})
    assert rc == 1
    assert report["ok"] is False and report["device"] == "cpu"
    assert _status(report, "gpu-visible") == "fail"
    assert _status(report, "tier2") == "skip"
    names = {c["name"] for c in report["checks"]}
    assert not names & {"jit-matmul", "grads", "loss-falling"}
    assert "loss_first" not in report["metrics"]
    hint = next(c["hint"] for c in report["checks"] if c["name"] == "gpu-visible")
    assert "--allow-cpu" in hint
    assert "smoke FAIL" in stderr
    assert not smoke.evaluate(report, plan).ok


@FRAMEWORK_PARAMS
def test_a_framework_version_other_than_the_plan_fails(framework: str, tmp_path: Path) -> None:
    plan = _plan(framework, tier=2, expect={"framework": "0.0.1"})
    rc, report, _ = _run(framework, tmp_path, plan, "--allow-cpu")
    assert rc == 1
    assert _status(report, "version:framework") == "fail"
    assert _status(report, "tier2") == "skip"
    assert report["versions"]["framework"]["seen"] == _version(framework)
    assert any(f.name == "version:framework" for f in smoke.evaluate(report, plan).failed)


@FRAMEWORK_PARAMS
def test_tier1_only_trains_nothing(framework: str, tmp_path: Path) -> None:
    rc, report, stderr = _run(framework, tmp_path, _plan(framework, tier=1), "--allow-cpu")
    assert rc == 0, stderr
    assert report["ok"] is True and report["tier"] == 1
    assert {c["tier"] for c in report["checks"]} == {1}


def test_tensorflow_bf16_path_trains_with_the_plans_steps(tmp_path: Path) -> None:
    # On a GPU with bf16 (cc >= 8.0) the TF payload casts its matmuls to bf16; a plan can force
    # it, which is how that path runs here on the CPU.
    plan = _plan("tensorflow", tier=2, precision="bf16", steps=12)
    rc, report, stderr = _run("tensorflow", tmp_path, plan, "--allow-cpu")
    assert rc == 0, stderr
    assert report["metrics"]["precision"] == "bf16"
    assert report["metrics"]["steps"] == 12
    assert _status(report, "loss-falling") == "pass"
    assert report["metrics"]["loss_last"] < report["metrics"]["loss_first"]


@FRAMEWORK_PARAMS
def test_api_smoke_end_to_end_on_the_cpu(framework: str, tmp_path: Path) -> None:
    python = _python(framework)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(_plan(framework, tier=1)))
    outcome = smoke_use_case.run(allow_cpu=True, plan_file=plan_file, python=python)
    assert outcome.verdict.ok, outcome.verdict.summary
    assert outcome.report["framework"] == framework and outcome.verdict.device == "cpu"


# --- the TF payload's pure helpers (no TensorFlow needed: it is imported inside run()) --------


@pytest.mark.parametrize(
    ("plan", "cc", "want"),
    [
        ({}, "9.0", "bf16"),  # H100/H200: bf16 tensor cores
        ({}, "8.0", "bf16"),  # A100, the first with bf16
        ({}, "7.5", "fp32"),  # T4: no bf16
        ({}, None, "fp32"),  # the CPU
        ({"precision": "bf16"}, None, "bf16"),
        ({"precision": "fp32"}, "9.0", "fp32"),
        ({"precision": "fp16"}, "7.0", "fp32"),  # not a TF payload precision: the default rule
    ],
)
def test_tf_precision_rule(plan: dict[str, Any], cc: str | None, want: str) -> None:
    from envbuild.payload import smoke_tf

    assert smoke_tf._precision(plan, cc) == want


def test_tf_wheel_version_reads_the_first_installed_distribution() -> None:
    import importlib.metadata

    from envbuild.payload import smoke_tf

    click = importlib.metadata.version("click")  # a dependency of envbuild, always installed
    assert smoke_tf._wheel_version(("envbuild-no-such-wheel", "click")) == click
    assert smoke_tf._wheel_version(("envbuild-no-such-wheel",)) is None
