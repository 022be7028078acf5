"""The node's verdict the payload writes for a fleet read-back (`smoke_checks.verdict_of`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from envbuild.payload import smoke_checks as ck


def report(*failing: str, figure: str = "x") -> dict[str, Any]:
    checks = [ck.check(n, 1, "fail", figure, "the fix for " + n) for n in failing]
    checks.append(ck.check("shm", 1, "pass", "2048 MiB"))
    return {
        "ok": not failing,
        "framework": "torch",
        "device": "cuda",
        "tier": 2,
        "host": {"driver": "570.124.06", "gpus": [{"name": "NVIDIA H200", "cc": "9.0"}]},
        "checks": checks,
        "timings": {"total_s": 12.5},
    }


def test_a_passing_verdict_names_the_node_gpus_and_driver() -> None:
    v = ck.verdict_of(report(), "gpu-07")
    assert v["ok"] is True and v["node"] == "gpu-07" and v["failed"] == []
    assert v["gpus"] == [{"name": "NVIDIA H200", "cc": "9.0"}]
    assert (v["driver"], v["checks"], v["schema"]) == ("570.124.06", 1, ck.VERDICT_SCHEMA)


def test_failed_checks_keep_their_figure_and_hint() -> None:
    v = ck.verdict_of(report("driver-floor"), "n1")
    assert v["ok"] is False
    assert v["failed"] == [
        {"name": "driver-floor", "figure": "x", "hint": "the fix for driver-floor"}
    ]


def test_a_verdict_fits_a_termination_message_however_many_checks_fail() -> None:
    many = report(*(f"check-{i}" for i in range(200)), figure="y" * 5000)
    v = ck.verdict_of(many, "n" * 400)
    assert len(ck.verdict_text(v).encode()) <= ck.VERDICT_MAX_BYTES
    assert v["failed"] and v["more_failed"] == 200 - len(v["failed"])
    assert all(len(f["figure"]) <= 240 for f in v["failed"])


def test_the_payload_prints_the_verdict_line_and_writes_the_file(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"framework": "nosuch", "tier": 1}))
    out = tmp_path / "verdict.json"
    payload = Path(ck.__file__).parent
    for where in ("-", str(out)):
        done = subprocess.run(
            [sys.executable, str(payload), "--plan", str(plan), "--verdict", where],
            capture_output=True,
            text=True,
            env={"ENVBUILD_NODE": "node-3", "PATH": "/usr/bin:/bin"},
            check=False,
        )
        assert done.returncode == 1
        text = (
            out.read_text()
            if where != "-"
            else next(
                line.split(" ", 1)[1]
                for line in done.stdout.splitlines()
                if line.startswith(ck.VERDICT_MARKER + " ")
            )
        )
        verdict = json.loads(text)
        assert verdict["node"] == "node-3" and verdict["ok"] is False
        assert verdict["failed"][0]["name"] == "framework"
    # The report stays the last stdout line (parse_report reads it from the end).
    assert done.stdout.splitlines()[-1].startswith(ck.REPORT_MARKER)
