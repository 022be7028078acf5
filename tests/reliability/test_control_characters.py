"""Control characters and smuggled syntax in every value that reaches a command line, a file or
a terminal: a matrix overlay row's requirement (uv's command line and requirements file), request
values that `render` would refuse (refused by `lock` already, by the same validator), a smoke
report and host facts printed to a terminal (escape sequences, fake lines).

The terminal cases run with Click's colour stripping off (`run_tty`): on a real terminal nothing
strips escape sequences, so whatever reaches the output here would reach the user's screen.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.reliability.helpers import MATRIX, REPO, assert_clear_error, copy_example, run
from tests.reliability.hostile import assert_terminal_safe, fake_uv, run_tty, uv_calls

# --- a matrix overlay row's requirement ------------------------------------------------------

_ROW_START = '[[build]]\nversions = "==2.10.*"\nvariant = "cu128"'


def _overlay_with_requirement(folder: Path, requirement: str) -> Path:
    """An overlay replacing the torch 2.10 cu128 build row (torch-train's pick) with one whose
    requirement is REQUIREMENT; everything else as shipped."""
    text = (MATRIX / "torch.toml").read_text()
    start = text.index(_ROW_START)
    row = text[start : text.index("\n\n", start)]
    row = row.replace(
        'requirement = "torch=={version}"', f"requirement = {json.dumps(requirement)}"
    )
    assert json.dumps(requirement) in row
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "torch.toml").write_text(f'schema_version = 1\nframework = "torch"\n\n{row}\n')
    return folder


BAD_REQUIREMENTS = {
    "an extra index on a second line": "torch=={version}\n--extra-index-url http://127.0.0.1:9/simple",
    "an editable source on a second line": "torch=={version}\n-e file:///some/src",
    "an option after the requirement": "torch=={version} --index-url http://127.0.0.1:9/simple",
    "a direct URL": "torch @ file:///some/src",
    "another project": "numpy=={version}",
    "an environment marker": "torch=={version}; python_version > '3'",
}


@pytest.mark.parametrize("case", sorted(BAD_REQUIREMENTS))
def test_overlay_requirement_is_one_pep508_requirement(tmp_path: Path, case: str) -> None:
    overlay = _overlay_with_requirement(tmp_path / "overlay", BAD_REQUIREMENTS[case])
    check = run("matrix", "check", "--overlay", str(overlay))
    assert check.code == 1, check.text
    assert "torch.toml" in check.text and "requirement" in check.text, check.text

    image = copy_example(tmp_path, "torch-train")
    before = (image / "envbuild.lock").read_bytes()
    env = {**fake_uv(tmp_path / "uv"), "ENVBUILD_MATRIX_OVERLAY": str(overlay)}
    out = run("lock", "--offline", str(image), env=env)
    assert_clear_error(out, 2, names="requirement")
    assert uv_calls(tmp_path / "uv") == []  # refused before uv was started
    assert (image / "envbuild.lock").read_bytes() == before


def test_shipped_requirements_still_load(tmp_path: Path) -> None:
    """The rule above accepts every requirement the shipped matrix has (extras included)."""
    out = run("matrix", "check")
    assert out.code == 0, out.text


# --- request values render would refuse: refused by lock first --------------------------------

REQUEST_VALUES = {
    "a 300-character name": ("image", "name", '"' + "a" * 300 + '"'),
    "shell characters in an extra index": (
        "indexes",
        "extra_index_urls",
        '["https://pypi.org/simple/?a=1&b=(2)|x;y"]',
    ),
    "a query in the index": ("indexes", "index_url", '"https://pypi.org/simple?x=1"'),
    "a fragment in find_links": ("indexes", "find_links", '["https://example.org/wheels/#x"]'),
    "a space in find_links": ("indexes", "find_links", '["https://example.org/my wheels/"]'),
}


@pytest.mark.parametrize("case", sorted(REQUEST_VALUES))
def test_lock_refuses_what_render_would_refuse(tmp_path: Path, case: str) -> None:
    table, key, value = REQUEST_VALUES[case]
    image = copy_example(tmp_path, "torch-train")
    request = image / "envbuild.toml"
    text = request.read_text()
    if f"[{table}]" in text:
        text = text.replace(f"[{table}]", f"[{table}]\n{key} = {value}", 1)
    else:
        text += f"\n[{table}]\n{key} = {value}\n"
    request.write_text(text)
    before = (image / "envbuild.lock").read_bytes()
    env = fake_uv(tmp_path / "uv")
    for args in (("lock", "--offline", str(image)), ("lock", "--check", str(image))):
        out = run(*args, env=env)
        assert_clear_error(out, 2, names=key)
    assert uv_calls(tmp_path / "uv") == []
    assert (image / "envbuild.lock").read_bytes() == before


# --- a smoke report printed to a terminal --------------------------------------------------------

ESCAPES = {
    "title": "\x1b]0;pwned\x07",
    "clear screen": "\x1b[2J\x1b[H",
    "hidden text": "\x1b[8m",
    "one-byte CSI": "\x9b2J",
    "fake line": "\nerror: fake log line",
    "carriage return": "\rPASS",
    "line separator": "\u2028next: fake step",
}


def _fake_payload(tmp_path: Path, report: object) -> Path:
    """An interpreter stand-in that prints REPORT as the payload's report line."""
    body = tmp_path / "report.txt"
    body.write_text("ENVBUILD-SMOKE-REPORT " + json.dumps(report) + "\n")
    script = tmp_path / "fake-python"
    script.write_text(f"#!/bin/sh\ncat {body}\n")
    script.chmod(0o755)
    return script


def _report_with(text: str) -> dict[str, object]:
    return {
        "schema": 1,
        "ok": False,
        "framework": f"torch{text}",
        "device": "cpu",
        "checks": [
            {"name": f"gpu{text}", "status": "fail", "tier": 1, "figure": f"x{text}", "hint": text},
            {"name": "imports", "status": "warn", "tier": 1, "figure": text, "hint": f"h{text}"},
        ],
        "host": {"gpus": [{"name": f"H100{text}"}]},
    }


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_smoke_report_is_made_safe_for_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.setattr(
        sys, "executable", str(_fake_payload(tmp_path, _report_with(ESCAPES[case])))
    )
    out = run_tty("smoke", "--allow-cpu")
    assert out.code == 1, out.text  # a verdict: the report failed a check
    assert_terminal_safe(out.text)
    assert not any(line.startswith(("error: fake", "next: fake")) for line in out.text.splitlines())


# --- host facts printed to a terminal ------------------------------------------------------------


def _hosts_file(tmp_path: Path, text: str) -> Path:
    facts = json.loads((REPO / "tests/fixtures/hosts/h200-healthy.json").read_text())
    facts["hostname"] = f"gpu01{text}"
    facts["gpus"][0]["name"] = f"NVIDIA H200{text}"
    facts["driver"]["version"] = f"580.159.04{text}"
    facts["platform"]["os"] = f"Ubuntu{text}"
    path = tmp_path / "hosts.jsonl"
    path.write_text(json.dumps(facts) + "\n")
    return path


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_host_facts_are_made_safe_for_a_terminal(tmp_path: Path, case: str) -> None:
    hosts = _hosts_file(tmp_path, ESCAPES[case])
    for args, env in (
        (("validate", "--hosts", str(hosts), "--lock", str(REPO / "images/torch-train")), None),
        (("doctor",), {"ENVBUILD_HOST_FACTS": str(hosts)}),
    ):
        out = run_tty(*args, env=env)
        assert out.code in (0, 1, 2), out.text
        assert_terminal_safe(out.text)
        assert not any(
            line.startswith(("error: fake", "next: fake")) for line in out.text.splitlines()
        ), out.text
