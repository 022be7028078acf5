"""Nesting depth in every JSON and TOML input: a value nested thousands of arrays or tables deep
in a lock (with its content hash recomputed, so the parser is reached), a smoke plan, a smoke
report, a hosts file, recorded host facts and a matrix overlay. Each is refused as that
input's own error (exit 2 for a file the user gave, 6 for the payload's report), with
`--json` too; never a RecursionError as exit 70.

(The request's case is tests/reliability/test_bad_input.py::test_deeply_nested_value.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.reliability.helpers import REPO, assert_clear_error, copy_example, reseal, run
from tests.reliability.hostile import assert_one_json

DEPTHS = (200, 5000, 100_000)


def _json_arrays(depth: int) -> str:
    return "[" * depth + "]" * depth


def _json_objects(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def _toml_arrays(depth: int) -> str:
    return "[" * depth + "]" * depth


def _toml_inline_tables(depth: int) -> str:
    return "{a = " * depth + "1" + " }" * depth


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("shape", ["arrays", "inline tables"])
def test_deep_lock(tmp_path: Path, depth: int, shape: str) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    lock = image / "envbuild.lock"
    value = _toml_arrays(depth) if shape == "arrays" else _toml_inline_tables(depth)
    lock.write_text(reseal(lock.read_text().replace("[stack]\n", f"[stack]\nx = {value}\n", 1)))
    env = {"ENVBUILD_HOST_FACTS": str(REPO / "tests/fixtures/hosts/h200-healthy.json")}
    for args in (
        ("lock", "--check", str(image)),
        ("render", str(image)),
        ("validate", str(image)),
    ):
        out = run(*args, env=env)
        assert_clear_error(out, 2, names="envbuild.lock")
        assert_one_json(run(*args, "--json", env=env))


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("shape", ["arrays", "objects"])
def test_deep_smoke_plan(tmp_path: Path, depth: int, shape: str) -> None:
    plan = tmp_path / "plan.json"
    inner = _json_arrays(depth) if shape == "arrays" else _json_objects(depth)
    plan.write_text('{"tier": 1, "x": ' + inner + "}")
    out = run("smoke", "--plan", str(plan))
    assert_clear_error(out, 2, names="plan.json")
    assert_one_json(run("smoke", "--plan", str(plan), "--json"))


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_hosts_file(tmp_path: Path, depth: int) -> None:
    hosts = tmp_path / "hosts.jsonl"
    hosts.write_text('{"schema": 1, "gpus": ' + _json_arrays(depth) + "}\n")
    for args, env in (
        (("validate", "--hosts", str(hosts), "--lock", str(REPO / "images/torch-cpu")), None),
        (("resolve", "--hosts", str(hosts)), None),
        (("doctor",), {"ENVBUILD_HOST_FACTS": str(hosts)}),
    ):
        out = run(*args, env=env)
        assert_clear_error(out, 2, names="hosts.jsonl")
        assert_one_json(run(*args, "--json", env=env))


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_matrix_overlay(tmp_path: Path, depth: int) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "cuda.toml").write_text(f"schema_version = 1\nx = {_toml_arrays(depth)}\n")
    out = run("matrix", "check", "--overlay", str(overlay))
    assert out.code in (1, 2), out.text
    assert "cuda.toml" in out.text, out.text
    assert "nested" in out.text, out.text
    assert_one_json(run("matrix", "check", "--overlay", str(overlay), "--json"))


def _fake_payload(tmp_path: Path, line: str) -> Path:
    body = tmp_path / "report.txt"
    body.write_text(line + "\n")
    script = tmp_path / "fake-python"
    script.write_text(f"#!/bin/sh\ncat {body}\n")
    script.chmod(0o755)
    return script


REPORTS = {
    "deep arrays": '{"schema": 1, "ok": true, "checks": [], "x": ' + _json_arrays(100_000) + "}",
    "deep objects": '{"schema": 1, "ok": true, "checks": [], "x": ' + _json_objects(5000) + "}",
    "tier is not a number": json.dumps(
        {"schema": 1, "ok": False, "checks": [{"name": "a", "status": "fail", "tier": "x"}]}
    ),
    "versions is a list": json.dumps(
        {"schema": 1, "ok": True, "checks": [], "versions": [1], "framework": "torch"}
    ),
    "timings is a string": json.dumps(
        {"schema": 1, "ok": True, "checks": [], "timings": "fast", "device": "cpu"}
    ),
    "host gpus is a number": json.dumps(
        {"schema": 1, "ok": True, "checks": [], "host": {"gpus": 3}, "device": "cpu"}
    ),
}


@pytest.mark.parametrize("case", sorted(REPORTS))
def test_malformed_or_deep_smoke_report_is_exit_6(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.setattr(
        sys, "executable", str(_fake_payload(tmp_path, "ENVBUILD-SMOKE-REPORT " + REPORTS[case]))
    )
    out = run("smoke", "--allow-cpu")
    assert_clear_error(out, 6, names="report")
    out = run("smoke", "--allow-cpu", "--json")
    assert out.code == 6, out.text
    assert_one_json(out)
