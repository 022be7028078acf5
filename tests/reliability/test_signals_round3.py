"""Signals and processes, round 3 (envbuild/cli/main.py `raise_terminated`,
envbuild/lock/headstart.py, envbuild/core/fsio.py `remove_dead_temp`).

The defects: `envbuild image` turned SIGTERM into Ctrl-C (exit 130, not 143); a second
SIGTERM during the first one's cleanup killed envbuild outright (SIG_DFL), leaving uv's work
folder; SIGHUP (the terminal went away) skipped every cleanup; the head-start uv ran in a
session of its own, so a SIGHUP or SIGKILL of envbuild's process group left it running; and
what a SIGKILLed lock left in $TMPDIR stayed there for ever.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from envbuild.lock import headstart
from tests.reliability.helpers import (
    E2E_BASE,
    REPO,
    copy_example,
    docker_ok,
    ours,
    probe_image,
    probe_wheel,
)
from tests.reliability.hostile import fake_uv

ENTRY = "from envbuild.cli.main import main; main()"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), **extra)
    env.pop("ENVBUILD_DEBUG", None)
    return env


def _wait_for(proc: subprocess.Popen[str], marker: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    # The marker is written in two steps (created, then its line): wait for the line.
    while not (marker.exists() and marker.read_text().strip()):
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the child ended first: {out}{err}")
        assert time.monotonic() < deadline, "the child never got there"
        time.sleep(0.02)


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "zombie" in status.lower()


def _slow_uv(tmp_path: Path) -> tuple[Path, Path]:
    """A uv that says it started (its pid and folder) and then hangs."""
    marker = tmp_path / "uv-started"
    uv = tmp_path / "slow-uv"
    uv.write_text(f'#!/bin/sh\necho "$$ $(pwd)" > {marker}\nexec sleep 60\n')
    uv.chmod(0o755)
    return uv, marker


# The child makes cleanup slow: removing a folder (uv's work folder) takes a second, long
# enough for a second SIGTERM to land in the middle of it.
_SLOW_CLEANUP = textwrap.dedent(
    """
    import os, shutil, sys, time
    from pathlib import Path
    real = shutil.rmtree
    def rmtree(path, *args, **kwargs):
        Path(os.environ["CLEANING"]).write_text("cleaning")
        time.sleep(1)
        return real(path, *args, **kwargs)
    shutil.rmtree = rmtree
    from envbuild.cli.main import main
    sys.argv = ["envbuild", *sys.argv[1:]]
    main()
    """
)


def test_a_second_sigterm_still_cleans_up(tmp_path: Path) -> None:
    image = copy_example(tmp_path, "torch-train")
    before = (image / "envbuild.lock").read_bytes()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    uv, marker = _slow_uv(tmp_path)
    cleaning = tmp_path / "cleaning"
    env = _env(
        tmp_path,
        ENVBUILD_UV=str(uv),
        ENVBUILD_NO_HEADSTART="1",
        TMPDIR=str(tmp),
        CLEANING=str(cleaning),
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_CLEANUP, "lock", "--offline", "--upgrade", str(image)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(proc, marker)
    proc.send_signal(signal.SIGTERM)
    _wait_for(proc, cleaning, timeout=30)
    proc.send_signal(signal.SIGTERM)  # while the first one's cleanup runs
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert list(tmp.iterdir()) == []  # uv's work folder removed after all
    assert _gone(int(marker.read_text().split()[0])), "uv was left running"
    assert (image / "envbuild.lock").read_bytes() == before


def test_sighup_cleans_up_like_sigterm(tmp_path: Path) -> None:
    image = copy_example(tmp_path, "torch-train")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    uv, marker = _slow_uv(tmp_path)
    env = _env(tmp_path, ENVBUILD_UV=str(uv), ENVBUILD_NO_HEADSTART="1", TMPDIR=str(tmp))
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "lock", "--offline", "--upgrade", str(image)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(proc, marker)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 129, err  # 128 + SIGHUP, as a shell reports it
    assert "Traceback" not in err
    assert list(tmp.iterdir()) == []
    assert _gone(int(marker.read_text().split()[0]))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP])
def test_the_head_start_uv_dies_with_envbuilds_group(tmp_path: Path, sig: signal.Signals) -> None:
    image = copy_example(tmp_path, "torch-train")
    (image / "envbuild.lock").unlink(missing_ok=True)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    real = fake_uv(tmp_path / "uv")["ENVBUILD_UV"]
    marker, slow = tmp_path / "uv-started", tmp_path / "slow"
    uv = tmp_path / "uv-maybe-slow"
    uv.write_text(
        f'#!/bin/sh\nif [ -e {slow} ]; then echo "$$ $(pwd)" > {marker}; exec sleep 60; fi\n'
        f'exec {real} "$@"\n'
    )
    uv.chmod(0o755)
    env = _env(
        tmp_path,
        ENVBUILD_UV=str(uv),
        ENVBUILD_PYDEPS="uv",
        ENVBUILD_CACHE_DIR=str(tmp_path / "cache"),
        TMPDIR=str(tmp),
        **{headstart.DISABLE_ENV: ""},
    )
    for _ in range(2):  # the second lock keeps the commands the third starts ahead
        done = subprocess.run(
            [sys.executable, "-c", ENTRY, "lock", "--offline", str(image)],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    slow.write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "lock", "--offline", str(image)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own group, as a shell's job is
    )
    _wait_for(proc, marker)  # type: ignore[arg-type]
    pid, folder = marker.read_text().split()
    assert "envbuild-headstart-" in folder  # the uv started ahead
    os.killpg(proc.pid, sig)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while not _gone(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = not _gone(int(pid))
    if alive:
        os.kill(int(pid), signal.SIGKILL)
    assert not alive, "the head-start uv outlived envbuild's group"
    # Whatever the kill left in $TMPDIR, the next lock removes (its process is gone).
    slow.unlink()
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, "lock", "--offline", str(image)],
        env={**env, headstart.DISABLE_ENV: "1"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert list(tmp.iterdir()) == []


def test_only_dead_envbuild_temp_folders_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envbuild.core import fsio

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    child = subprocess.Popen(["true"])  # a pid that is surely gone once it is reaped
    child.wait()
    names = {
        "dead": f"envbuild-pin-{child.pid}-abc",
        "dead-headstart": f"envbuild-headstart-{child.pid}-def",
        "alive": f"envbuild-pin-{os.getpid()}-ghi",
        "other": "envbuild-notours-1-x",
        "no-pid": "envbuild-pin-abc",
        "older": f"envbuild-headstart-{child.pid}",  # an older envbuild's random part, digits
    }
    for name in names.values():
        (tmp_path / name).mkdir()
    os.symlink(tmp_path / names["alive"], tmp_path / f"envbuild-smoke-{child.pid}-link")
    fsio.remove_dead_temp()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert names["dead"] not in left and names["dead-headstart"] not in left
    assert {names["alive"], names["other"], names["no-pid"], names["older"]} <= set(left)
    assert f"envbuild-smoke-{child.pid}-link" in left  # a link is never followed or removed


# --- the smoke test on the real engine -------------------------------------------------------

_HANG = """RUN mkdir -p /opt/envbuild/payload \\
 && printf 'import time\\nprint("MARK", flush=True)\\ntime.sleep(600)\\n' > /opt/envbuild/payload/__main__.py
COPY plan.json envbuild.lock /opt/envbuild/"""


@pytest.mark.engine
def test_sigterm_during_the_smoke_test_exits_143_and_cleans_up(tmp_path: Path) -> None:
    if not docker_ok():
        pytest.skip(f"no Docker engine answers, or {E2E_BASE} is missing (tests/e2e.sh prepare)")
    import hashlib

    folder = tmp_path / "wheels"
    _, sha = probe_wheel(folder)
    marker = f"reliability-{uuid.uuid4().hex}"
    image = probe_image(tmp_path, sha256=sha, payload=_HANG.replace("MARK", marker))
    lock_sha = hashlib.sha256((image / "envbuild.lock").read_bytes()).hexdigest()
    tag = f"envbuild-rel/term:{marker[-12:]}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            ENTRY,
            "image",
            str(image),
            "--base-image",
            E2E_BASE,
            "--find-links",
            str(folder),
            "--tag",
            tag,
            "--allow-cpu",
            "--resmoke",
        ],
        env=_env(tmp_path, ENVBUILD_CACHE_DIR=str(tmp_path / "cache")),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    running: list[str] = []
    while not running:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the smoke container never started"
        ids = subprocess.run(
            [
                "docker",
                "ps",
                "-q",
                "--no-trunc",
                "--filter",
                f"label=envbuild.lock.sha256={lock_sha}",
            ],
            capture_output=True,
            text=True,
        ).stdout.split()
        running = ids
        time.sleep(0.3)
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    left = subprocess.run(
        ["docker", "ps", "-a", "-q", "--no-trunc"], capture_output=True, text=True
    )
    assert ours(set(left.stdout.split()), lock_sha) == [], "the smoke container was left"
    # The candidate (named in the progress line) is removed; its layers stay as build cache.
    import re

    found = re.search(r"candidate (sha256:[0-9a-f]{64}) built", err)
    assert found, err
    candidate = subprocess.run(["docker", "image", "inspect", found.group(1)], capture_output=True)
    assert candidate.returncode != 0, "the candidate was left"
    tagged = subprocess.run(["docker", "image", "inspect", tag], capture_output=True)
    assert tagged.returncode != 0, f"{tag} was tagged"
