"""JSON on every error path: with `--json`, whatever goes wrong (bad input, an unreadable or
malformed file, a plan with the wrong field types, a bug), stdout is exactly one JSON object
whose `ok` is false and whose exit code is the one without `--json`; exit 70 is for real bugs
only, and even then the JSON comes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.cli.main import EXIT_INTERNAL, cli
from tests.reliability.helpers import REPO, copy_example, run
from tests.reliability.hostile import assert_one_json


def _edited_lock(tmp: Path) -> list[str]:
    image = copy_example(tmp, "torch-cpu")
    lock = image / "envbuild.lock"
    lock.write_text(lock.read_text().replace("[smoke]", "[smoke]\n# edited", 1))
    return ["render", str(image)]


def _lock_is_a_folder(tmp: Path) -> list[str]:
    image = copy_example(tmp, "torch-cpu")
    (image / "envbuild.lock").unlink()
    (image / "envbuild.lock").mkdir()
    return ["lock", "--check", str(image)]


def _no_folder(tmp: Path) -> list[str]:
    return ["lock", "--check", str(tmp / "missing")]


def _plan(tmp: Path, plan: object) -> list[str]:
    path = tmp / "plan.json"
    path.write_text(json.dumps(plan))
    return ["smoke", "--plan", str(path)]


def _hosts(tmp: Path, text: str) -> list[str]:
    path = tmp / "hosts.jsonl"
    path.write_text(text)
    return ["validate", "--hosts", str(path), "--lock", str(REPO / "images/torch-cpu")]


def _doctor_facts(tmp: Path) -> list[str]:
    path = tmp / "facts.json"
    path.write_text('{"schema": 1, "gpus": "many"}')
    return ["doctor", "--host-facts", str(path)]


def _overlay(tmp: Path) -> list[str]:
    overlay = tmp / "overlay"
    overlay.mkdir()
    (overlay / "cuda.toml").write_text("schema_version = [[[1]]]\n")
    return ["matrix", "check", "--overlay", str(overlay)]


CASES: dict[str, tuple[Callable[[Path], list[str]], int]] = {
    "edited lock (render)": (_edited_lock, 1),
    "lock is a folder": (_lock_is_a_folder, 2),
    "no image folder": (_no_folder, 2),
    "plan timeout_s is a string": (lambda t: _plan(t, {"timeout_s": "abc"}), 2),
    "plan timeout_s is a list": (lambda t: _plan(t, {"timeout_s": [1]}), 2),
    "plan tier is a float": (lambda t: _plan(t, {"tier": 1.5}), 2),
    "plan expect is a list": (lambda t: _plan(t, {"expect": ["torch"]}), 2),
    "plan is a list": (lambda t: _plan(t, [1, 2]), 2),
    "hosts: gpus is a string": (lambda t: _hosts(t, '{"schema": 1, "gpus": "H100"}\n'), 2),
    "hosts: a number": (lambda t: _hosts(t, "12\n"), 2),
    "doctor facts of the wrong shape": (_doctor_facts, 2),
    "overlay value of the wrong type": (_overlay, 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_error_is_one_json_object(tmp_path: Path, case: str) -> None:
    make, code = CASES[case]
    args = make(tmp_path)
    plain = run(*args)
    assert plain.code == code, plain.text
    out = run(*args, "--json")
    assert out.code == code, out.text
    doc = assert_one_json(out)
    assert doc["ok"] is False
    assert doc.get("message") or doc.get("problems"), doc


def test_plan_with_wrong_types_names_the_field(tmp_path: Path) -> None:
    out = run(*_plan(tmp_path, {"timeout_s": "abc"}))
    assert out.code == 2, out.text
    assert "timeout_s" in out.err, out.err


def test_a_bug_under_json_is_still_one_json_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 70 is kept for bugs; a CI job parsing stdout still gets one JSON object."""
    import envbuild.request.parse

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(envbuild.request.parse, "request_from_mapping", broken)
    image = copy_example(tmp_path, "torch-cpu")
    result = CliRunner().invoke(cli, ["lock", "--check", "--json", str(image)])
    assert result.exit_code == EXIT_INTERNAL, result.output
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, result.stdout
    doc = json.loads(lines[0])
    assert doc["ok"] is False
    assert doc["error"] == "InternalError"
    assert "simulated bug" in doc["message"]
    assert "Traceback" not in result.output
