"""Secrets in messages (docs/reliability.md, "Round 3"): Click's own usage errors are redacted
like envbuild's errors (no credential from a URL), and an error reading a file the request
names does not echo its lines (the file may be a secret named by mistake, or by a hostile
request in a shared repository, and CI logs are read by many)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reliability.helpers import assert_clear_error, copy_example, run

SECRET = "hunter2-s3cr3t"
URL = f"https://me:{SECRET}@example.org/simple"


@pytest.mark.parametrize(
    "args",
    [
        ("image", "{image}", "--smoke-timeout", URL),
        ("image", "{image}", "--engine", URL),
        ("resolve", "--gpu", "H100", "--driver", "570.124.06", "--json-typo", URL),
    ],
)
def test_a_usage_error_does_not_print_a_credential(tmp_path: Path, args: tuple[str, ...]) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    argv = [a.format(image=image) for a in args]
    out = run(*argv)
    assert out.code == 2, out.text
    assert SECRET not in out.text
    out = run(*argv, "--json")
    assert out.code == 2
    assert SECRET not in out.text
    doc = json.loads(out.out)
    assert doc["ok"] is False and doc["error"] == "UsageError"


@pytest.mark.parametrize(
    "content",
    [
        f"machine example.org login me password {SECRET}\n",
        f"TOKEN={SECRET}\n",
        f"numpy<3\nexport AWS_SECRET_ACCESS_KEY={SECRET}\n",
        f"{SECRET} {SECRET}\n",
    ],
)
def test_a_requirements_file_error_does_not_echo_its_line(tmp_path: Path, content: str) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    (image / "secrets.txt").write_text(content)
    request = image / "envbuild.toml"
    request.write_text(request.read_text() + '\n[packages]\nfiles = ["secrets.txt"]\n')
    out = run("lock", "--offline", str(image), env={"ENVBUILD_NO_INDEX_PROBE": "1"})
    assert_clear_error(out, 2, names="secrets.txt line")
    assert SECRET not in out.text
    out = run("lock", "--offline", "--json", str(image), env={"ENVBUILD_NO_INDEX_PROBE": "1"})
    assert out.code == 2 and SECRET not in out.text
