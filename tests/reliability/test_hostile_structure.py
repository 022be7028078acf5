"""Hostile structure gets exit 2 or 3, never 70: recursion in the project's files and the
caches, symlink loops, wrong types in host facts, a missing or broken uv and garbage from it,
a full or closed stdout, and `--upgrade-package` values that are options.

Each case was exit 70 (a RecursionError, RuntimeError, ValueError, FileNotFoundError or an
OSError on stdout, some with a traceback) before; `helpers.run` fails a test on exit 70 or a
traceback by itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.helpers import REPO, assert_clear_error, copy_example, run
from tests.reliability.hostile import fake_uv

DEPTH = 3000  # far past Python's recursion limit (1000)


def _image(tmp_path: Path, packages: str, files: dict[str, str], project: str = "") -> Path:
    image = copy_example(tmp_path, "torch-train")
    request = image / "envbuild.toml"
    request.write_text(
        request.read_text().replace('requirements = ["numpy<3"]', packages) + project
    )
    for rel, text in files.items():
        (image / rel).write_text(text)
    return image


def _lock(tmp_path: Path, image: Path, *extra: str) -> object:
    return run("lock", "--offline", *extra, str(image), env=fake_uv(tmp_path / "uv"))


# --- recursion --------------------------------------------------------------------------------


def test_a_requirements_chain_deeper_than_the_limit_is_exit_2(tmp_path: Path) -> None:
    files = {f"r{i}.txt": f"-r r{i + 1}.txt\n" for i in range(DEPTH)}
    files[f"r{DEPTH}.txt"] = "numpy\n"
    image = _image(tmp_path, 'files = ["r0.txt"]', files)
    out = _lock(tmp_path, image)
    assert_clear_error(out, 2, names="more than 32 deep")  # type: ignore[arg-type]


def test_an_include_group_chain_deeper_than_the_limit_is_exit_2(tmp_path: Path) -> None:
    groups = "".join(f'g{i} = [{{include-group = "g{i + 1}"}}]\n' for i in range(DEPTH))
    pyproject = (
        '[project]\nname = "me"\nversion = "1"\ndependencies = []\n'
        f'[dependency-groups]\n{groups}g{DEPTH} = ["numpy"]\n'
    )
    image = _image(
        tmp_path, 'files = ["pyproject.toml"]\ngroups = ["g0"]', {"pyproject.toml": pyproject}
    )
    assert_clear_error(_lock(tmp_path, image), 2, names="32 deep")  # type: ignore[arg-type]


def test_an_extra_chain_past_the_limit_is_exit_2(tmp_path: Path) -> None:
    extras = "".join(f'e{i} = ["me[e{i + 1}]"]\n' for i in range(DEPTH))
    pyproject = (
        '[project]\nname = "me"\nversion = "1"\ndependencies = []\n'
        f'[project.optional-dependencies]\n{extras}e{DEPTH} = ["numpy"]\n'
    )
    image = _image(
        tmp_path, 'files = ["pyproject.toml"]\nextras = ["e0"]', {"pyproject.toml": pyproject}
    )
    assert_clear_error(_lock(tmp_path, image), 2, names="extras")  # type: ignore[arg-type]


@pytest.mark.parametrize("link", ["self", "a"])
def test_a_symlink_loop_in_the_project_folder_is_exit_2(tmp_path: Path, link: str) -> None:
    image = _image(
        tmp_path, 'requirements = ["numpy<3"]', {"x.py": "print(1)\n"}, '\n[project]\npath = "."\n'
    )
    assert _lock(tmp_path, image).code == 0  # type: ignore[attr-defined]
    before = (image / "envbuild.lock").read_bytes()
    if link == "self":
        os.symlink("self", image / "self")
    else:
        os.symlink("b", image / "a")
        os.symlink("a", image / "b")
    assert_clear_error(_lock(tmp_path, image), 2, names="symlink loop")  # type: ignore[arg-type]
    assert (image / "envbuild.lock").read_bytes() == before  # the stopped lock wrote nothing
    out = run("render", str(image), "--context", str(tmp_path / "ctx"))
    assert_clear_error(out, 2, names="symlink loop")


def test_cache_files_nested_past_the_parser_are_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envbuild.build import passes
    from envbuild.lock import headstart, wheelhashes

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(cache))
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    for name in (wheelhashes.FILE_NAME, "smoke-passes.json", "record.json"):
        (cache / name).write_bytes(deep)
        (cache / name).chmod(0o600)
    assert wheelhashes.load() == {}
    assert passes.FileStore("k", "here", path=cache / "smoke-passes.json").find("x") is None
    assert headstart.read_record(str(cache / "record.json")) is None


# --- host facts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"index": "zero"},
        {"memory_mib": "lots"},
        {"index": [1]},
        {"memory_mib": {"a": 1}},
        {"index": -1},
    ],
)
def test_wrong_types_in_host_facts_are_exit_2(tmp_path: Path, bad: dict[str, object]) -> None:
    gpu = {"name": "H100", "cc": "9.0", **bad}
    hosts = tmp_path / "hosts.jsonl"
    hosts.write_text(json.dumps({"name": "h", "driver": "570.124.06", "gpus": [gpu]}) + "\n")
    lock = copy_example(tmp_path, "torch-train")
    key = next(iter(bad))
    out = run("validate", "--hosts", str(hosts), "--lock", str(lock))
    assert_clear_error(out, 2, names=f"'{key}' as a whole number")
    doc = json.loads(run("validate", "--hosts", str(hosts), "--lock", str(lock), "--json").out)
    assert doc["ok"] is False and doc["error"] == "UserError"
    facts = json.loads((REPO / "tests/fixtures/hosts/h200-healthy.json").read_text())
    facts["gpus"][0].update(bad)
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    out = run("doctor", "--host-facts", str(tmp_path / "facts.json"))
    assert_clear_error(out, 2, names=f"'{key}' as a whole number")


# --- uv ---------------------------------------------------------------------------------------


def _uv_env(tmp_path: Path, uv: Path) -> dict[str, str]:
    return {**fake_uv(tmp_path / "fake"), "ENVBUILD_UV": str(uv), "ENVBUILD_NO_HEADSTART": "1"}


@pytest.mark.parametrize("kind", ["missing", "not executable", "a folder", "garbage", "bytes"])
def test_a_missing_or_broken_uv_is_exit_3(tmp_path: Path, kind: str) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    uv = tmp_path / "uv"
    if kind == "not executable":
        uv.write_text("#!/bin/sh\necho hi\n")
    elif kind == "a folder":
        uv.mkdir()
    else:
        # Answers with text that is no pylock.toml (uv writes its lock to stdout), or bytes.
        answer = "x[[[=" if kind == "garbage" else "\\377\\376"
        uv.write_text(f"#!/bin/sh\nprintf '{answer}\\n'\nexit 0\n")
        uv.chmod(0o755)
    before = (image / "envbuild.lock").read_bytes()
    out = run("lock", "--offline", "--upgrade", str(image), env=_uv_env(tmp_path, uv))
    names = {"garbage": "not a pylock.toml", "bytes": "not UTF-8"}.get(kind, f"cannot run {uv}")
    assert_clear_error(out, 3, names=names)
    assert (image / "envbuild.lock").read_bytes() == before


@pytest.mark.parametrize("value", ["--offline", "-rfoo", "--index-url=https://evil.example"])
def test_an_upgrade_package_value_that_is_an_option_is_exit_2(tmp_path: Path, value: str) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    env = fake_uv(tmp_path / "uv")
    out = run("lock", f"--upgrade-package={value}", str(image), env=env)
    assert out.code == 2, out.text
    assert "is not a package name" in out.err
    assert not (tmp_path / "uv" / "uv-calls.jsonl").exists(), "uv was started"
    doc = json.loads(run("lock", f"--upgrade-package={value}", str(image), "--json", env=env).out)
    assert doc["ok"] is False


# --- stdout -----------------------------------------------------------------------------------


def _envbuild(
    *args: str, stdout: int | None = None, pass_fds: tuple[int, ...] = ()
) -> subprocess.CompletedProcess[str]:
    code = "from envbuild.cli.main import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )


RESOLVE = ("resolve", "--gpu", "H100", "--driver", "570.124.06")


@pytest.mark.parametrize("as_json", [False, True])
def test_a_full_stdout_is_exit_3_with_one_line(as_json: bool) -> None:
    with open("/dev/full", "w") as full:
        done = _envbuild(*RESOLVE, *(["--json"] if as_json else []), stdout=full.fileno())
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "error: cannot write the output to stdout: No space left on device"
    assert lines[1].startswith("  next: ") and len(lines) == 2


def test_a_closed_stdout_is_exit_3_with_one_line() -> None:
    code = "import os; os.close(1); from envbuild.cli.main import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, *RESOLVE, "--json"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: cannot write the output to stdout: ")


def test_a_closed_pipe_is_exit_141_and_silent() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from envbuild.cli.main import main; main()",
            "matrix",
            "check",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(1)
    proc.stdout.close()  # the reader goes away (`| head -c1`)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141), err  # 0: it had written everything already
    assert "Traceback" not in err and "internal error" not in err
