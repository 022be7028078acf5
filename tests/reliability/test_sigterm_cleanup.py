"""SIGTERM (what `kill`, `timeout`, systemd and CI runners send) during `lock` and `render
--context`: envbuild removes its temp files and folders (uv's work folder under TMPDIR, the
lock's temp file, the half-written `.ctx.*` folder), stops uv, leaves the old lock and the
old context as they were, and exits 143 (128 + SIGTERM) without a traceback.
(SIGKILL cannot be caught; what it leaves is tidied by the next run: test_interrupt.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.reliability.helpers import REPO, copy_example


def _start(args: list[str], env: dict[str, str], child: str) -> subprocess.Popen[str]:
    full = dict(os.environ, **env, PYTHONPATH=str(REPO))
    full.pop("ENVBUILD_DEBUG", None)
    return subprocess.Popen(
        [sys.executable, "-c", child, *args],
        cwd=REPO,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(proc: subprocess.Popen[str], marker: Path) -> None:
    deadline = time.monotonic() + 60
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the child ended first: {out}{err}")
        assert time.monotonic() < deadline, "the child never got there"
        time.sleep(0.02)


def _terminate(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("SIGTERM did not end envbuild within 30 s") from None
    return proc.returncode, err


_CLI = textwrap.dedent(
    """
    import sys
    from envbuild.cli import main as cli
    sys.argv = ["envbuild", *sys.argv[1:]]
    cli.main()
    """
)


def test_sigterm_while_uv_runs(tmp_path: Path) -> None:
    image = copy_example(tmp_path, "torch-train")
    (image / "envbuild.toml").write_text(
        (image / "envbuild.toml").read_text().replace('"numpy<3"', '"numpy<2.6"')
    )
    before = (image / "envbuild.lock").read_bytes()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    marker = tmp_path / "uv-started"
    uv = tmp_path / "slow-uv"
    uv.write_text(f"#!/bin/sh\necho $$ > {marker}\nexec sleep 60\n")
    uv.chmod(0o755)
    env = {"ENVBUILD_UV": str(uv), "ENVBUILD_PYDEPS": "uv", "TMPDIR": str(tmp)}
    proc = _start(["lock", "--offline", str(image)], env, _CLI)
    _wait_for(proc, marker)
    time.sleep(0.2)
    code, err = _terminate(proc)
    assert code == 143, err
    assert "Traceback" not in err, err
    assert list(tmp.iterdir()) == []  # uv's work folder is gone
    uv_pid = int(marker.read_text())
    time.sleep(0.5)
    assert (
        not Path(f"/proc/{uv_pid}").exists()
        or "zombie" in Path(f"/proc/{uv_pid}/status").read_text().lower()
    ), "uv was left running"
    assert (image / "envbuild.lock").read_bytes() == before
    assert not list(image.glob(".envbuild.lock.*.tmp"))


# The child stops while writing the context's files (after a few), so the signal lands mid-write.
_RENDER_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from envbuild.cli import main as cli
    marker = Path(os.environ["MARKER"])
    real = Path.write_bytes
    calls = []
    def write_bytes(self, data):
        calls.append(self)
        if len(calls) == 3:
            marker.write_text("mid-write")
            time.sleep(60)
        return real(self, data)
    Path.write_bytes = write_bytes
    sys.argv = ["envbuild", *sys.argv[1:]]
    cli.main()
    """
)


def test_sigterm_while_render_writes_a_context(tmp_path: Path) -> None:
    image = copy_example(tmp_path, "torch-cpu")
    out = tmp_path / "out"
    out.mkdir()
    wheels = tmp_path / "wheels"  # torch-cpu's lock names a local wheel folder
    wheels.mkdir()
    marker = tmp_path / "marker"
    proc = _start(
        ["render", str(image), "--context", str(out / "ctx"), "--find-links", str(wheels)],
        {"MARKER": str(marker)},
        _RENDER_CHILD,
    )
    _wait_for(proc, marker)
    code, err = _terminate(proc)
    assert code == 143, err
    assert "Traceback" not in err, err
    assert list(out.iterdir()) == []  # no .ctx.* folder, no half context
