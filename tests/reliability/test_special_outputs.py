"""Writers never replace special files (docs/reliability.md, "Round 3"): every path envbuild
writes at the user's word (`render -o` and `--context x.tar`, `validate --junit` and
`--k8s-job`, `image --save`, `--report`) goes through one rule, `fsio.write_output`: a regular
file is replaced atomically, a FIFO, a character device or a standard stream is written into
as `>` would, a symlink is followed, anything else is refused; never renamed over."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from envbuild.core import fsio
from envbuild.core.errors import UserError
from tests.reliability.helpers import REPO, copy_example, run

ENTRY = "from envbuild.cli.main import main; main()"


def _image(tmp_path: Path) -> Path:
    return copy_example(tmp_path, "torch-cpu")


def _reader(fifo: Path) -> tuple[threading.Thread, list[bytes]]:
    """A reader of `fifo` whose end is open before this returns: envbuild refuses a FIFO
    nobody reads (ENXIO), so a reader thread still starting made the test flaky under load.
    Reads until the writer has written and closed (a FIFO never opened for writing reads as
    end of file at once, so an empty read before any data is only waited past)."""
    got: list[bytes] = []
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)

    def read() -> None:
        data = b""
        deadline = time.monotonic() + 30
        try:
            while time.monotonic() < deadline:
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:  # a writer is there, nothing written yet
                    chunk = None
                if chunk:
                    data += chunk
                elif chunk == b"" and data:
                    break  # written, and the writer closed its end
                else:
                    time.sleep(0.01)
        finally:
            os.close(fd)
            got.append(data)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, got


def test_render_into_a_fifo_writes_into_it(tmp_path: Path) -> None:
    fifo = tmp_path / "dockerfile.fifo"
    os.mkfifo(fifo)
    image = _image(tmp_path)
    thread, got = _reader(fifo)
    out = run("render", str(image), "-o", str(fifo))
    thread.join(10)
    assert out.code == 0, out.text
    assert stat.S_ISFIFO(fifo.lstat().st_mode), "the FIFO was replaced by a file"
    assert got and got[0].startswith(b"# ") and b"FROM " in got[0]
    assert "a FIFO" in out.err  # said so: written into, not replaced
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".dockerfile")] == []


def test_a_fifo_nobody_reads_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "job.fifo"
    os.mkfifo(fifo)
    image = _image(tmp_path)
    out = run("render", str(image), "-o", str(fifo))
    assert out.code == 2, out.text
    assert "FIFO" in out.err and "reads" in out.err
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_render_into_a_terminal_device_writes_into_it(tmp_path: Path) -> None:
    """A character device (a pseudo-terminal's /dev/pts/N) is written into, never replaced."""
    master, slave = os.openpty()
    try:
        device = Path(os.ttyname(slave))
        chunks: list[bytes] = []

        def drain() -> None:
            while True:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    return
                if not data:
                    return
                chunks.append(data)

        thread = threading.Thread(target=drain, daemon=True)
        thread.start()
        out = run("render", str(_image(tmp_path)), "-o", str(device))
        assert out.code == 0, out.text
        assert stat.S_ISCHR(device.lstat().st_mode)
        assert "a character device" in out.err
    finally:
        os.close(slave)
        thread.join(5)
        os.close(master)
    assert b"FROM " in b"".join(chunks)


@pytest.mark.parametrize("stream", ["/dev/fd/1", "/proc/self/fd/1"])
def test_render_to_the_standard_output_by_name(tmp_path: Path, stream: str) -> None:
    """`-o /dev/fd/1` (or /dev/stdout, /proc/self/fd/1) writes to envbuild's own stdout, as a
    shell's `> /dev/stdout` would, whatever stdout is (here a pipe)."""
    image = _image(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, "render", str(image), "-o", stream],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert b"FROM " in done.stdout


def test_a_symlink_is_followed_and_kept(tmp_path: Path) -> None:
    image = _image(tmp_path)
    real = tmp_path / "real.Dockerfile"
    real.write_text("old\n")
    link = tmp_path / "Dockerfile"
    link.symlink_to(real)
    out = run("render", str(image), "-o", str(link))
    assert out.code == 0, out.text
    assert link.is_symlink() and b"FROM " in real.read_bytes()


def test_a_folder_or_socket_is_refused(tmp_path: Path) -> None:
    import socket

    image = _image(tmp_path)
    folder = tmp_path / "out"
    folder.mkdir()
    out = run("render", str(image), "-o", str(folder))
    assert out.code == 2 and "folder" in out.err, out.text
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        out = run("render", str(image), "--context", str(sock_path) + ".tar")
        assert out.code == 0, out.text  # a new .tar beside it: fine
        with pytest.raises(UserError, match="socket"):
            fsio.write_output(sock_path, b"x", what="--junit")
        assert stat.S_ISSOCK(sock_path.lstat().st_mode)


def test_chunks_stream_into_a_fifo(tmp_path: Path) -> None:
    """`image --save` hands the engine's archive over as chunks: they stream into a FIFO."""
    fifo = tmp_path / "image.tar"
    os.mkfifo(fifo)
    thread, got = _reader(fifo)
    for _ in range(200):  # until the reader has opened its end: refused before that
        try:
            note = fsio.write_output(fifo, iter([b"a" * 70000, b"b" * 70000]), what="--save")
            break
        except UserError as err:
            assert "no process reads" in err.message
            time.sleep(0.05)
    thread.join(10)
    assert got == [b"a" * 70000 + b"b" * 70000]
    assert "FIFO" in note and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_every_output_goes_through_the_one_rule() -> None:
    """Outside core/fsio.py only envbuild's own files (the lock, under its folder lock, and
    the refresh cache) are written with write_atomic; every path a user names goes through
    write_output."""
    allowed = {"envbuild/matrix/refresh/pypi.py"}
    found = set()
    for path in (REPO / "envbuild").rglob("*.py"):
        rel = path.relative_to(REPO).as_posix()
        if rel != "envbuild/core/fsio.py" and re.search(r"\bwrite_atomic\(", path.read_text()):
            found.add(rel)
    assert found <= allowed, found - allowed


def test_k8s_job_and_junit_write_into_a_fifo_and_through_a_link(tmp_path: Path) -> None:
    hosts = REPO / "tests" / "fixtures" / "hosts" / "fleet-doctor.jsonl"
    fifo = tmp_path / "jobs.fifo"
    os.mkfifo(fifo)
    real = tmp_path / "junit-real.xml"
    real.write_text("old\n")
    link = tmp_path / "junit.xml"
    link.symlink_to(real)
    thread, got = _reader(fifo)
    out = run(
        *("validate", "--hosts", str(hosts), "--lock", str(REPO / "images" / "torch-train")),
        *("--image", "registry.example.com/ml/torch:1", "--k8s-job", str(fifo)),
        *("--junit", str(link)),
    )
    thread.join(10)
    assert out.code in (0, 1), out.text
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert got and b'kind: "Job"' in got[0]
    assert link.is_symlink() and real.read_text().startswith("<?xml")
