"""`envbuild lock` with its head start (envbuild/lock/headstart.py) on, through the CLI, with the
stand-in for uv of tests/reliability/hostile.py as a real child process: the command the last
lock ran starts before the lock builds its own, is taken when it is the same, and the lock
comes out byte for byte as without it."""

from __future__ import annotations

from pathlib import Path

from envbuild.lock import headstart
from tests.reliability.helpers import copy_example, run
from tests.reliability.hostile import fake_uv, uv_calls


def _started_ahead(call: dict[str, object]) -> bool:
    return Path(str(call["cwd"])).parent.name.startswith("envbuild-headstart-")


def test_a_repeated_lock_takes_the_command_started_ahead(tmp_path: Path) -> None:
    image = copy_example(tmp_path, "torch-train")
    (image / "envbuild.lock").unlink(missing_ok=True)
    env = {
        **fake_uv(tmp_path / "uv"),
        "ENVBUILD_CACHE_DIR": str(tmp_path / "cache"),
        headstart.DISABLE_ENV: "",
    }
    outputs = []
    for _ in range(3):
        out = run("lock", "--offline", str(image), env=env)
        assert out.code == 0, out.text
        outputs.append((image / "envbuild.lock").read_bytes())
    calls = uv_calls(tmp_path / "uv")
    # 1: no lock, nothing kept. 2: the lock written by 1 is new, so the folder changed and
    # nothing starts ahead. 3: the folder is as 2 found it: the kept command starts at once.
    assert [_started_ahead(c) for c in calls] == [False, False, True]
    assert outputs[1] == outputs[2]
    assert calls[1]["argv"] == calls[2]["argv"]

    # The request changes: nothing starts ahead, and the lock follows the new request.
    request = image / "envbuild.toml"
    request.write_text(request.read_text().replace('"numpy<3"', '"numpy<2.6"'))
    out = run("lock", "--offline", str(image), env=env)
    assert out.code == 0, out.text
    calls = uv_calls(tmp_path / "uv")
    assert len(calls) == 4 and not _started_ahead(calls[3])
    assert (image / "envbuild.lock").read_bytes() != outputs[2]  # the new request's hash
    assert run("lock", "--check", str(image), env=env).code == 0


def test_the_same_lock_without_the_head_start(tmp_path: Path) -> None:
    """The bytes do not depend on it: ENVBUILD_NO_HEADSTART=1 gives the same lock."""
    locks = []
    for on in ("", "1"):
        root = tmp_path / f"on-{on or 0}"
        image = copy_example(root, "torch-train")
        (image / "envbuild.lock").unlink(missing_ok=True)
        env = {
            **fake_uv(root / "uv"),
            "ENVBUILD_CACHE_DIR": str(root / "cache"),
            headstart.DISABLE_ENV: on,
        }
        for _ in range(3):
            assert run("lock", "--offline", str(image), env=env).code == 0
        locks.append((image / "envbuild.lock").read_bytes())
        ahead = [_started_ahead(c) for c in uv_calls(root / "uv")]
        assert ahead == ([False, False, True] if on == "" else [False, False, False])
    assert locks[0] == locks[1]


def test_the_console_script_takes_the_kept_command(tmp_path: Path) -> None:
    """Through `envbuild.cli.main.main` (the installed `envbuild`), in a child process: the
    third lock takes the kept command, and nothing is left in $TMPDIR."""
    import os
    import subprocess
    import sys

    image = copy_example(tmp_path, "torch-train")
    (image / "envbuild.lock").unlink(missing_ok=True)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {
        **os.environ,
        **fake_uv(tmp_path / "uv"),
        "ENVBUILD_CACHE_DIR": str(tmp_path / "cache"),
        "TMPDIR": str(tmp),
        headstart.DISABLE_ENV: "",
    }
    entry = "from envbuild.cli.main import main; main()"

    def envbuild(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", entry, *args], env=env, capture_output=True, text=True
        )

    for _ in range(3):
        done = envbuild("lock", "--offline", str(image))
        assert done.returncode == 0, done.stderr
    assert [_started_ahead(c) for c in uv_calls(tmp_path / "uv")] == [False, False, True]
    assert list(tmp.iterdir()) == []
