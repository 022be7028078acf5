"""File writing (thin I/O): the one atomic writer, a folder's exclusive lock, and a build
context folder swapped in whole.

A reader, or a crash at any moment, sees either the old file or the new one, never a mix.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

FLOCK_FILE = ".envbuild.lock.lock"
"""The file an image folder's writers hold an exclusive flock on (never deleted)."""


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive flock on `<folder>/.envbuild.lock.lock` (blocks until free).

    The lock file is never deleted: deleting it would let a third process lock a new inode
    while the second still holds the old one.
    """
    fd = os.open(folder / FLOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def write_atomic(path: Path, data: str | bytes | Iterable[bytes]) -> None:
    """Replace `path` with `data` (text as UTF-8; or chunks, streamed) atomically: temp file in
    the same folder, fsync, os.replace; the folder is created when missing. envbuild's one file
    writer (locks, Dockerfiles, build-context tars, JUnit, Job manifests, matrix files, the
    refresh cache, `image --save` archives).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, str | bytes):
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            else:
                for chunk in data:
                    fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # The rename itself is durable only once the folder is synced (POSIX rename(2) notes).
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_if_changed(path: Path, text: str) -> bool:
    """Write `path` under its folder's lock unless it already holds `text`; True when written."""
    with folder_lock(path.parent):
        # Every writer holds this flock while its temp file exists, so a temp file seen here
        # belongs to a writer that died (SIGKILL, power loss): nothing else removes it.
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        try:
            current: str | None = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = None
        except UnicodeDecodeError:
            current = None
        if current == text:
            return False
        write_atomic(path, text)
        return True


def replace_folder(dest: Path, files: Mapping[str, bytes]) -> None:
    """Write `files` (relative path -> bytes) into a new folder and swap it in for `dest` whole,
    so a reader never sees half of it. The caller decides whether `dest` may be replaced."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    tmp_dir.chmod(0o755)  # mkdtemp makes it private; a context folder is ordinary output
    for rel, data in files.items():
        target = tmp_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.old."))
        os.replace(dest, old / "ctx")
    os.replace(tmp_dir, dest)
    if old is not None:
        shutil.rmtree(old)
