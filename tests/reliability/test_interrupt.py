"""A real `envbuild lock` child process killed with SIGKILL at several points of a re-lock.

Whatever the moment, the old lock stays readable and intact (or the new one is complete),
a later `envbuild lock --check` is not confused by anything the dead process left, and the
next `envbuild lock` finishes and tidies up. The unit tests cover the pieces:
tests/unit/lock/test_lockfile.py::test_interrupted_write_leaves_old_lock_intact (write_atomic alone)
and ::test_concurrent_lock_runs_end_with_one_valid_lock (three lock_image calls at once).

The child runs the real CLI (`envbuild.cli.main.main`) with the fixed matrix, resolver answer and
recorded uv output of tests/unit/lock/test_lockfile.py (install_fakes): no network.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from envbuild.lock import format as lockfile
from tests.reliability.helpers import REPO, assert_clear_error, run
from tests.unit.lock.test_lockfile import DEMO_REQUEST, GOLDEN, install_fakes, make_image

# The child: the CLI with fakes; KILL_AT names a point where it writes MARKER and sleeps, so
# the parent kills it exactly there ("random" kills after a random delay instead).
_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import pytest
    from envbuild.cli import main as cli
    from envbuild.lock import format as lockfile
    from tests.unit.lock.test_lockfile import FakeUv, install_fakes

    point, marker = os.environ["KILL_AT"], Path(os.environ["MARKER"])
    delay = float(os.environ.get("UV_DELAY", "0"))

    def stop_here(name):
        if point == name:
            marker.write_text(name)
            time.sleep(60)

    class SlowUv(FakeUv):
        def __call__(self, argv, cwd, env):
            stop_here("pinning")
            return super().__call__(argv, cwd, env)

    mp = pytest.MonkeyPatch()
    install_fakes(mp, uv=SlowUv(delay=delay))
    real_fsync, real_replace = os.fsync, os.replace
    calls = []

    def fsync(fd):
        calls.append(fd)
        real_fsync(fd)
        stop_here("after-fsync-temp" if len(calls) == 1 else "after-fsync-dir")

    def replace(src, dst):
        stop_here("before-replace")
        real_replace(src, dst)
        stop_here("after-replace")

    mp.setattr(os, "fsync", fsync)
    mp.setattr(os, "replace", replace)
    sys.argv = ["envbuild", *sys.argv[1:]]
    cli.main()
    """
)

POINTS = ("pinning", "after-fsync-temp", "before-replace", "after-replace", "after-fsync-dir")


def _child(
    image: Path, point: str, marker: Path, *, uv_delay: float = 0.0
) -> subprocess.Popen[str]:
    env = dict(os.environ, KILL_AT=point, MARKER=str(marker), UV_DELAY=str(uv_delay))
    env.pop("ENVBUILD_DEBUG", None)
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, "lock", str(image)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(child: subprocess.Popen[str], marker: Path) -> None:
    deadline = time.monotonic() + 60
    while not marker.exists():
        if child.poll() is not None:
            out, err = child.communicate()
            raise AssertionError(f"the child ended before {marker.name}: {out}{err}")
        assert time.monotonic() < deadline, "the child never reached the kill point"
        time.sleep(0.01)


def _kill(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL


def _kill_at_marker(
    child: subprocess.Popen[str], marker: Path, *, expect_temp: Path | None = None
) -> None:
    try:
        _wait_for(child, marker)
        if expect_temp is not None:
            # Mid-write: the new bytes are complete in a temp file beside the lock.
            (temp,) = _temps(expect_temp)
            lockfile.loads(temp.read_text())
        _kill(child)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)


def _locked_then_changed(tmp_path: Path) -> tuple[Path, bytes]:
    """An image folder with a valid lock whose request then changed (a re-lock would write)."""
    image = make_image(tmp_path)
    (image / "envbuild.lock").write_text(GOLDEN.read_text())
    old = (image / "envbuild.lock").read_bytes()
    lockfile.loads(old.decode())  # the starting lock is valid
    req = image / "envbuild.toml"
    req.write_text(CHANGED_REQUEST)
    return image, old


CHANGED_REQUEST = DEMO_REQUEST.replace('"numpy<3"', '"numpy<2.9"')


def _temps(image: Path) -> list[Path]:
    return sorted(p for p in image.iterdir() if p.name.endswith(".tmp"))


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """`envbuild ARGS` as a real child with the same fakes (nothing killed)."""
    env = dict(os.environ, KILL_AT="never", MARKER="/nonexistent")
    return subprocess.run(
        [sys.executable, "-c", _CHILD, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_during_relock_leaves_a_whole_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    image, old = _locked_then_changed(tmp_path)
    marker = tmp_path / "marker"
    mid_write = point in ("after-fsync-temp", "before-replace")
    _kill_at_marker(_child(image, point, marker), marker, expect_temp=image if mid_write else None)

    now = (image / "envbuild.lock").read_bytes()
    lockfile.loads(now.decode())  # readable, content hash verifies: never a torn file
    if point in ("pinning", "after-fsync-temp", "before-replace"):
        assert now == old
    else:
        assert now != old  # the rename happened: the whole new lock is there

    # `--check` looks at envbuild.lock only; a dead writer's temp file does not confuse it.
    with monkeypatch.context() as mp:
        install_fakes(mp)
        check = run("lock", "--check", str(image))
    if now == old:
        assert_clear_error(check, 1, names=f"next: envbuild lock {image}")
    else:
        assert check.code == 0, check.text

    # The next run completes, and tidies what the killed one left.
    with monkeypatch.context() as mp:
        install_fakes(mp)
        assert run("lock", str(image)).code == 0
        assert run("lock", "--check", str(image)).code == 0
    assert _temps(image) == []


def test_sigkill_after_random_delays(tmp_path: Path) -> None:
    """Kills at arbitrary moments of a slowed-down re-lock (the seed is in the message)."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    # The bytes a completed re-lock writes: the same folder layout elsewhere.
    ref = make_image(tmp_path / "ref", CHANGED_REQUEST)
    assert _cli("lock", str(ref)).returncode == 0
    new = (ref / "envbuild.lock").read_bytes()
    image, old = _locked_then_changed(tmp_path)
    for _ in range(4):
        child = _child(image, "none", tmp_path / "unused", uv_delay=0.3)
        time.sleep(rng.uniform(0.2, 1.4))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        now = (image / "envbuild.lock").read_bytes()
        assert now in (old, new), f"a torn lock (seed {seed})"
    check = _cli("lock", "--check", str(image))
    assert check.returncode in (0, 1) and "Traceback" not in check.stderr, (seed, check.stderr)
    assert (check.returncode == 0) == (now == new)


def test_concurrent_cli_lock_runs_with_one_killed(tmp_path: Path) -> None:
    """Three `envbuild lock` processes on one folder, one SIGKILLed mid-write: the other two
    finish (the folder flock is released by the kernel when the holder dies) and the folder
    ends with one valid lock."""
    image, _ = _locked_then_changed(tmp_path)
    marker = tmp_path / "marker"
    victim = _child(image, "after-fsync-temp", marker)
    _wait_for(victim, marker)  # it holds the folder lock now, asleep mid-write
    env = dict(os.environ, KILL_AT="never", MARKER="/nonexistent", UV_DELAY="0.2")
    others = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, "lock", str(image)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    time.sleep(1.2)  # the others are blocked on the folder lock (or still pinning)
    _kill(victim)
    results = [p.communicate(timeout=120) for p in others]
    assert [p.returncode for p in others] == [0, 0], results
    text = (image / "envbuild.lock").read_text()
    lockfile.loads(text)
    assert _cli("lock", "--check", str(image)).returncode == 0
    assert _temps(image) == []
