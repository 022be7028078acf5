"""`envbuild smoke`: flags, errors and exit codes (the payload runs for real, without torch)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.app import smoke as smoke_use_case
from envbuild.cli.main import cli
from envbuild.core.errors import SmokeFailed

NO_TORCH = importlib.util.find_spec("torch") is None


def _plan(tmp_path: Path, **over: object) -> Path:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({"schema": 1, "framework": "torch", "tier": 1, **over}))
    return p


def test_plan_and_lock_together_is_a_user_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["smoke", "--plan", str(_plan(tmp_path)), "--lock", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "--plan and --lock" in result.output


def test_missing_or_bad_plan_is_a_user_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["smoke", "--plan", str(tmp_path / "nope.json")])
    assert result.exit_code == 2
    assert "cannot read the smoke plan" in result.output
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    result = CliRunner().invoke(cli, ["smoke", "--plan", str(bad), "--json"])
    assert result.exit_code == 2
    assert json.loads(result.output)["error"] == "UserError"


def test_tier_must_be_1_or_2() -> None:
    result = CliRunner().invoke(cli, ["smoke", "--tier", "3"])
    assert result.exit_code == 2


@pytest.mark.skipif(not NO_TORCH, reason="needs a Python without torch (the dev venv)")
def test_no_framework_is_a_failed_verdict_with_the_next_step(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["smoke", "--plan", str(_plan(tmp_path)), "--allow-cpu"])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].split() == ["TIER", "CHECK", "STATUS", "FIGURE"]
    assert "torch is not importable" in result.output
    assert "  framework: install torch here, or run inside the image" in lines
    assert lines[-1].startswith("smoke FAIL: torch on cpu")


@pytest.mark.skipif(not NO_TORCH, reason="needs a Python without torch (the dev venv)")
def test_json_output_is_the_report_with_the_verdict(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["smoke", "--json", "--plan", str(_plan(tmp_path)), "--tier", "1"]
    )
    assert result.exit_code == 1
    out = json.loads(result.output)
    assert out["ok"] is False and out["schema"] == 1
    assert out["verdict"]["failed"][0]["name"] == "framework"
    assert out["tier"] == 1


def test_a_payload_that_prints_no_report_is_smoke_failed(tmp_path: Path) -> None:
    false = shutil.which("false")
    assert false is not None
    with pytest.raises(SmokeFailed, match="without a report") as info:
        smoke_use_case.run(plan_file=_plan(tmp_path), python=false)
    assert info.value.exit_code == 6


def test_a_missing_interpreter_is_smoke_failed(tmp_path: Path) -> None:
    with pytest.raises(SmokeFailed, match="cannot start"):
        smoke_use_case.run(plan_file=_plan(tmp_path), python=str(tmp_path / "no-python"))
