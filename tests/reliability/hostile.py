"""Pieces of the hostile-input and fault tests: a stand-in for uv that replays uv's recorded
output and logs what it was given, a CLI runner that keeps terminal escapes, a runner that
starts the CLI in a child process with a time limit (for inputs that could hang it), and the
checks every such run shares (no traceback, no exit 70, JSON under --json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from envbuild.cli.main import EXIT_INTERNAL, cli
from tests.reliability.helpers import REPO, Outcome

PYLOCK = REPO / "tests" / "fixtures" / "pydeps" / "uv-torch-2.10.0-py312-x86_64.pylock.toml"
"""uv's real output for torch-train's request (torch 2.10.0, Python 3.12, x86_64)."""

# The stand-in for uv: writes the recorded pylock to --output-file. Like uv it keeps the
# versions named in an existing output file (uv docs, "Locking requirements": "uv will prefer
# the versions in the output file"); a kept version gets a made-up hash, as another file would.
# Each call is logged as one JSON line: argv, environment, the preferences it was given.
_FAKE_UV = """\
#!{python}
import hashlib, json, os, sys, tomllib
from pathlib import Path
args = sys.argv[1:]
out = Path(args[args.index("--output-file") + 1]) if "--output-file" in args else None
prefs = out.read_text() if out is not None and out.exists() else None
with open({log!r}, "a") as fh:
    fh.write(json.dumps({{"argv": args, "env": dict(os.environ), "preferences": prefs, "cwd": os.getcwd()}}) + "\\n")
fail = {fail!r}
if fail is not None:
    sys.stderr.write(fail)
    sys.exit(1)
data = tomllib.loads(Path({pylock!r}).read_text())
extra = tomllib.loads({extra!r})
kept = {{}}
if prefs:
    kept = {{p["name"]: p["version"] for p in tomllib.loads(prefs).get("packages", [])}}
lines = ['lock-version = "1.0"', 'created-by = "uv"', ""]
for p in data["packages"] + extra.get("packages", []):
    version = kept.get(p["name"], p["version"])
    lines += ["[[packages]]", "name = " + json.dumps(p["name"]), "version = " + json.dumps(version)]
    if "marker" in p:
        lines.append("marker = " + json.dumps(p["marker"]))
    if "archive" in p:
        a = p["archive"]
        where = ("url = " + json.dumps(a["url"])) if "url" in a else ("path = " + json.dumps(a["path"]))
        sha = a.get("hashes", {{}}).get("sha256")
        lines.append("archive = {{ " + where + (", hashes = {{ sha256 = " + json.dumps(sha) + " }}" if sha else "") + " }}")
    else:
        wheels = []
        for w in p.get("wheels", []):
            sha = w["hashes"]["sha256"]
            if version != p["version"]:
                sha = hashlib.sha256((p["name"] + version).encode()).hexdigest()
            wheels.append("{{ url = " + json.dumps(w["url"]) + ", hashes = {{ sha256 = " + json.dumps(sha) + " }} }}")
        lines.append("wheels = [" + ", ".join(wheels) + "]")
    lines.append("")
(out or Path("pylock.toml")).write_text("\\n".join(lines))
"""


def fake_uv(folder: Path, *, extra: str = "", fail: str | None = None) -> dict[str, str]:
    """Write the stand-in for uv into FOLDER; the environment that makes `envbuild lock` use it.
    `extra` is PEP 751 text whose packages are added to the output; `fail` makes it exit 1 with
    that text on stderr. Its calls: `uv_calls(folder)`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "fake-uv"
    script.write_text(
        _FAKE_UV.format(
            python=sys.executable,
            log=str(folder / "uv-calls.jsonl"),
            fail=fail,
            pylock=str(PYLOCK),
            extra=extra,
        )
    )
    script.chmod(0o755)
    return {"ENVBUILD_UV": str(script), "ENVBUILD_PYDEPS": "uv"}


def uv_calls(folder: Path) -> list[dict[str, Any]]:
    log = folder / "uv-calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def _checked(out: Outcome) -> Outcome:
    assert "Traceback" not in out.text, out.text
    assert out.code != EXIT_INTERNAL, out.text
    assert "internal error" not in out.err, out.err
    if "--json" in out.args:
        assert_one_json(out)
    return out


def run_tty(*args: str, env: dict[str, str] | None = None) -> Outcome:
    """`envbuild ARGS` in-process as a terminal would get it: Click strips nothing (color=True),
    so an escape sequence that reaches the output is seen here."""
    result = CliRunner().invoke(cli, list(args), env=env, color=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"envbuild {' '.join(args)} raised {result.exception!r}")
    return _checked(Outcome(result.exit_code, result.stdout, result.stderr, args))


_CHILD = textwrap.dedent(
    """
    import sys
    from envbuild.cli import main as cli
    sys.argv = ["envbuild", *sys.argv[1:]]
    cli.main()
    """
)


CHILD_MEMORY = 2 << 30
"""Address-space limit of a child run: reading /dev/zero whole fails there, not the machine."""


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))


def run_child(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 20,
    cwd: Path | None = None,
) -> Outcome:
    """`envbuild ARGS` in a child process that must end within `timeout` seconds (a FIFO or a
    device read would otherwise hang the test run itself), in at most CHILD_MEMORY."""
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("ENVBUILD_DEBUG", None)
    full_env["PYTHONPATH"] = str(REPO)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, *args],
            cwd=cwd or REPO,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"envbuild {' '.join(args)} hung for {timeout} s") from None
    return _checked(Outcome(done.returncode, done.stdout, done.stderr, args))


def assert_one_json(out: Outcome) -> dict[str, Any]:
    """Under --json: stdout is exactly one JSON object whose `ok` matches the exit code."""
    lines = [line for line in out.out.splitlines() if line.strip()]
    assert len(lines) == 1, out.text
    doc = json.loads(lines[0])
    assert isinstance(doc, dict), out.text
    assert doc.get("ok") is (out.code == 0), out.text
    return doc


# Terminal control: C0 controls but tab and newline, DEL, C1 controls (0x80-0x9f; 0x9b is a
# one-byte CSI), and the line/paragraph separators some terminals break lines on.
_UNSAFE = {chr(c) for c in range(0x20) if chr(c) not in "\t\n"} | {chr(0x7F)}
_UNSAFE |= {chr(c) for c in range(0x80, 0xA0)} | {"\u2028", "\u2029"}


def assert_terminal_safe(text: str) -> None:
    found = sorted({repr(ch) for ch in text if ch in _UNSAFE})
    assert not found, f"terminal control characters {found} reach the output:\n{text!r}"
