"""The payload stands alone: standard library + the framework, runnable as a copied folder."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.core.resources import payload_dir
from envbuild.payload import smoke_checks as ck

ALLOWED = {"torch", "jax", "tensorflow", "pynvml", "numpy"}
SIBLINGS = {p.stem for p in payload_dir().glob("*.py")}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", sorted(payload_dir().glob("*.py")), ids=lambda p: p.name)
def test_payload_imports_only_stdlib_and_frameworks(path: Path) -> None:
    extra = _imports(path) - set(sys.stdlib_module_names) - ALLOWED - SIBLINGS - {"__future__"}
    assert not extra, f"{path.name} imports {sorted(extra)}"
    assert "envbuild" not in _imports(path)


def test_payload_runs_as_a_copied_folder_without_site_packages(tmp_path: Path) -> None:
    # As inside an image at /opt/envbuild/payload, but with no site-packages at all (-I -S):
    # no envbuild, no framework. It must still end with a report and exit 1.
    folder = tmp_path / "payload"
    shutil.copytree(payload_dir(), folder, ignore=shutil.ignore_patterns("__pycache__"))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"framework": "torch", "tier": 1}))
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(folder), "--plan", str(plan)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(ck.REPORT_MARKER + " ")
    report = json.loads(last.split(" ", 1)[1])
    assert report["ok"] is False
    assert [c["name"] for c in report["checks"]] == ["framework"]
    assert "torch is not importable" in report["checks"][0]["figure"]
    assert "smoke FAIL" in proc.stderr


def test_unreadable_plan_is_a_failed_report(tmp_path: Path) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    proc = subprocess.run(
        [sys.executable, str(payload_dir()), "--plan", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    report = json.loads(proc.stdout.strip().splitlines()[-1].split(" ", 1)[1])
    assert report["checks"][0]["name"] == "plan" and report["checks"][0]["status"] == "fail"


def test_oom_check_reports_the_free_memory_seen() -> None:
    from envbuild.payload import smoke_torch

    exc = RuntimeError("CUDA out of memory. Tried to allocate 32.00 MiB.")
    c = smoke_torch._oom_check("train", exc, 500.0)
    assert c["status"] == "fail"
    assert "500 MiB free before the test" in c["figure"]
    assert "Tried to allocate 32.00 MiB" in c["figure"]
    assert "nvidia-smi" in c["hint"]
