"""Shared by the engine tests: the stand-in cases (cases/*/), a job for one, a minimal judge."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from envbuild.build.pipeline import ImageJob
from envbuild.engine.protocol import RunResult
from envbuild.smoke.plan import SmokeJudgement

CASES = Path(__file__).parent / "cases"
BASE = "envbuild-e2e/base:bookworm"
MARKER = "ENVBUILD-SMOKE-REPORT "


def context_of(case: str) -> dict[str, bytes]:
    root = CASES / case
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def judge(result: RunResult) -> SmokeJudgement:
    """A minimal reader of the marker line, so these tests exercise only the engine path."""
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith(MARKER)]
    if not lines:
        raise ValueError("no ENVBUILD-SMOKE-REPORT line in the payload's output")
    report = json.loads(lines[-1][len(MARKER) :])
    return SmokeJudgement(ok=bool(report.get("ok")), report=report)


def job(case: str, tag: str, **over: object) -> ImageJob:
    fields: dict[str, object] = {
        "name": f"it-{case}",
        "context": context_of(case),
        "lock_text": f"# stand-in lock for {case}\n",
        "lock_sha256": uuid.uuid4().hex * 2,
        "tag": tag,
        "needs_gpu": True,
        "allow_cpu": True,
        "timeout_s": 60,
        "shm_mib": 2048,
        "locked_base_image": "nvidia/cuda:12.8.1-base-ubuntu24.04",
        "base_image": BASE,
    }
    fields.update(over)
    return ImageJob(**fields)  # type: ignore[arg-type]
