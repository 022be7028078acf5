"""Files (thin I/O): the one bounded reader, the one atomic writer and the one rule of every
output a user names (`write_output`), a folder's exclusive lock, and a build context folder
swapped in whole.

A reader, or a crash at any moment, sees either the old file or the new one, never a mix.
Every input file is read through `read_input`: a FIFO, a device or a folder is refused before
reading (a FIFO would block for ever, /dev/zero never ends), and so is a file past its size
cap. Every OSError of a write becomes a typed error with a next step: a full disk is
DiskFullError (exit 3), a read-only or forbidden folder FileWriteError (exit 3), something in
the way (a folder where a file goes, a symlink) UserError (exit 2).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from envbuild.core.errors import DiskFullError, FileWriteError, UserError

if TYPE_CHECKING:
    from pathlib import Path

# pathlib, shutil and tempfile are imported by the writers only: the reader is what every
# command's start needs (the compiled matrix of `envbuild resolve`), and those three cost it
# about 12 ms (python -X importtime).

FLOCK_FILE = ".envbuild.lock.lock"
"""The file an image folder's writers hold an exclusive flock on (never deleted)."""


CONTEXT_MARKER = ".envbuild-context"
"""Written into every build context folder: the files envbuild put there, one per line. Only a
folder holding exactly those (and the marker) is envbuild's to replace."""

MAX_INPUT_BYTES = 16 << 20
"""The default size cap of an input file: far above any real request, lock, hosts file,
matrix file or plan (the largest shipped lock is 13 kB), far below what exhausts memory."""

_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def file_kind(mode: int) -> str:
    """What a file of `mode` is, in words ("a FIFO", "a folder", ...)."""
    return _KINDS.get(stat.S_IFMT(mode), "not a plain file")


def _not_regular(path: str | os.PathLike[str], mode: int, what: str) -> UserError:
    kind = file_kind(mode)
    return UserError(
        f"{what} {path} is not a regular file ({kind})",
        hint=f"give a regular file as {what}; envbuild reads nothing else",
        fields={"file": str(path), "kind": kind},
    )


def read_input(
    path: str | os.PathLike[str],
    *,
    what: str,
    limit: int = MAX_INPUT_BYTES,
    accept: Callable[[os.stat_result], bool] | None = None,
) -> bytes:
    """The bytes of an input file, refusing a FIFO, device, socket or folder before reading and
    a file larger than `limit` (UserError, exit 2, naming `what` and the path), and one whose
    `fstat` `accept` says no to (the user cache: `usercache.own`), all on the one open file.
    FileNotFoundError passes through: each caller words a missing file its own way."""
    path = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UserError(
            f"cannot read {what} {path}: {exc.strerror}",
            hint="check that the path exists and that you may read it",
            fields={"file": str(path)},
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _not_regular(path, info.st_mode, what)
    if accept is not None and not accept(info):
        os.close(fd)
        raise UserError(
            f"{what} {path} is not the user's own, or others may write it",
            hint=f"remove it (rm {path}); envbuild writes its own",
            fields={"file": str(path)},
        )
    with os.fdopen(fd, "rb") as fh:
        too_big = UserError(
            f"{what} {path} is larger than {limit} bytes ({info.st_size})",
            hint=f"give the real {what}; envbuild reads at most {limit} bytes of it",
            fields={"file": str(path), "size": info.st_size, "limit": limit},
        )
        if info.st_size > limit:
            raise too_big
        data = fh.read(limit + 1)  # the file may grow while it is read
    if len(data) > limit:
        raise too_big
    return data


def write_error(exc: OSError, path: Path, what: str = "") -> Exception:
    """The typed error for an OSError while writing PATH (callers `raise write_error(...)`)."""
    where = what or str(path)
    fields = {"file": str(path), "errno": errno.errorcode.get(exc.errno or 0, "")}
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFullError(
            f"no space left on the device of {path.parent} while writing {where}",
            hint=f"free space there (`df -h {path.parent}`), or write somewhere else",
            fields=fields,
        )
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return FileWriteError(
            f"cannot write {where}: {exc.strerror}",
            hint=f"write to a folder you can write to, or fix the permissions of {path.parent}",
            fields=fields,
        )
    if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.ELOOP, errno.EEXIST, errno.ENOTEMPTY):
        return UserError(
            f"cannot write {where}: {exc.strerror} ({exc.filename or path})",
            hint="remove what is in the way (a folder or link where envbuild writes a file), "
            "or write somewhere else",
            fields=fields,
        )
    return FileWriteError(
        f"cannot write {where}: {exc.strerror}",
        hint=f"check the disk and folder {path.parent}",
        fields=fields,
    )


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive flock on `<folder>/.envbuild.lock.lock` (blocks until free).

    The lock file is never deleted: deleting it would let a third process lock a new inode
    while the second still holds the old one. It is opened without following a symlink
    (O_NOFOLLOW): a checkout that plants one must not make `lock`, perhaps run as root, create
    or open a file wherever the link points.
    """
    path = folder / FLOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(
                f"{path} is a symlink; envbuild does not follow it",
                hint=f"remove it (rm {path}); envbuild creates its own",
                fields={"file": str(path)},
            ) from None
        raise write_error(exc, path, str(path)) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_regular(path, mode, "the folder lock file")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def write_atomic(path: Path, data: str | bytes | Iterable[bytes]) -> None:
    """Replace `path` with `data` (text as UTF-8; or chunks, streamed) atomically: temp file in
    the same folder, fsync, os.replace; the folder is created when missing. envbuild's one file
    writer: its own files (locks, the refresh cache) directly, every path a user names through
    `write_output`'s rule (Dockerfiles, build-context tars, JUnit, Job manifests, matrix files,
    HTML reports, `image --save` archives).
    """
    from pathlib import Path

    path = Path(path)
    try:
        _write_atomic(path, data)
    except OSError as exc:
        raise write_error(exc, path) from None


_STANDARD_STREAM = re.compile(r"/dev/(?:std(out|err)|fd/([0-9]+))|/proc/self/fd/([0-9]+)")
"""The names a shell gives its own streams (bash(1), REDIRECTION: /dev/stdout, /dev/fd/N)."""


def write_output(path: Path, data: str | bytes | Iterable[bytes], *, what: str) -> str:
    """Write a file the user named (`what`: the option, as messages name it), by one rule, the
    one every output follows (docs/reliability.md, "Writers never replace special files"):

    - a new or regular file is replaced atomically (`write_atomic`), through a symlink to it
      (the link stays, its target is replaced, as `>` would write it);
    - /dev/stdout, /dev/stderr, /dev/fd/N and /proc/self/fd/N are envbuild's own stream:
      written to it, as the shell writes to them;
    - a FIFO or a character device (a terminal, /dev/null) is written into, never renamed
      over; a FIFO that no process reads is refused (opening it would block for ever);
    - a folder, a block device or a socket is refused (UserError, exit 2).

    Returns "" for a regular file, else what was written into ("the FIFO x"), for the
    caller to say so."""
    from pathlib import Path

    path = Path(path)
    fd = _standard_fd(str(path))
    if fd is not None:
        _stream_fd(fd, data, path, what)
        return f"{path} (envbuild's own stream: written into)"
    mode = _output_mode(path, what)
    if mode is None or stat.S_ISREG(mode):
        write_atomic(path.resolve() if path.is_symlink() else path, data)
        return ""
    _stream(path, data, what)
    return f"{path} ({_KINDS[stat.S_IFMT(mode)]}: written into, not replaced)"


def check_output(path: Path, *, what: str) -> None:
    """UserError (exit 2) now for an output `write_output` would refuse (a folder, a socket, a
    block device, a symlink to nothing, a path under a file): asked before a long build
    rather than after it."""
    from pathlib import Path

    path = Path(path)
    if _standard_fd(str(path)) is not None or _output_mode(path, what) is not None:
        return
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(
                    f"{what} {path}: {parent} is a file, not a folder",
                    hint=f"name a file in a folder for {what}",
                    fields={"file": str(path)},
                )
            break


def _output_mode(path: Path, what: str) -> int | None:
    """The mode of what an output path names (through a symlink): None when nothing is there;
    UserError for what is never written over, and for a symlink to nothing (writing would
    create its target wherever it points)."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # check_output words the second
        if path.is_symlink():
            raise UserError(
                f"{what} {path} is a symlink to {os.readlink(path)}, which does not exist",
                hint="point the link at a file in an existing folder, or name another file",
                fields={"file": str(path)},
            ) from None
        return None
    except OSError as exc:
        raise write_error(exc, path, f"{what} {path}") from None
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return mode
    kind = _KINDS.get(stat.S_IFMT(mode), "not a plain file")
    raise UserError(
        f"{what} {path} is {kind}: envbuild does not write over it",
        hint=f"give a file path for {what} (a new one, a regular file, a FIFO or a terminal)",
        fields={"file": str(path), "kind": kind},
    )


def _standard_fd(name: str) -> int | None:
    found = _STANDARD_STREAM.fullmatch(name)
    if found is None:
        return None
    std, dev_fd, proc_fd = found.groups()
    if std:
        return 1 if std == "out" else 2
    return int(dev_fd or proc_fd)


def _chunks(data: str | bytes | Iterable[bytes]) -> Iterator[bytes]:
    if isinstance(data, str):
        yield data.encode("utf-8")
    elif isinstance(data, bytes):
        yield data
    else:
        yield from data


def _stream_fd(fd: int, data: str | bytes | Iterable[bytes], path: Path, what: str) -> None:
    for stream in (sys.stdout, sys.stderr):  # what was printed before comes first
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        for chunk in _chunks(data):
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
    except OSError as exc:
        raise write_error(exc, path, f"{what} {path}") from None


def _stream(path: Path, data: str | bytes | Iterable[bytes], what: str) -> None:
    """Write into a FIFO or character device as `> path` would; a FIFO nobody reads is refused
    (opening it would block for ever)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UserError(
                f"{what} {path} is a FIFO that no process reads",
                hint=f"start its reader first (e.g. `cat {path} > out &`), or give a file",
                fields={"file": str(path), "kind": "a FIFO"},
            ) from None
        raise write_error(exc, path, f"{what} {path}") from None
    try:
        os.set_blocking(fd, True)
        _stream_fd(fd, data, path, what)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: str | bytes | Iterable[bytes]) -> None:
    import tempfile

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
            # Only regular files are a writer's temp files; anything else was put there by
            # someone else and is left alone.
            with contextlib.suppress(OSError):
                if stat.S_ISREG(stale.lstat().st_mode):
                    stale.unlink()
        try:
            current: str | None = read_input(path, what="the file").decode("utf-8")
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
    so a reader never sees half of it, with CONTEXT_MARKER listing what was written. The caller
    decides whether `dest` may be replaced (`is_own_folder`). A failure or a signal part-way
    leaves `dest` as it was and no temp folder behind."""
    import shutil
    import tempfile
    from pathlib import Path

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp_dir = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    except OSError as exc:
        raise write_error(exc, dest) from None
    try:
        tmp_dir.chmod(0o755)  # mkdtemp makes it private; a context folder is ordinary output
        for rel, data in files.items():
            target = tmp_dir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        (tmp_dir / CONTEXT_MARKER).write_text("".join(f"{rel}\n" for rel in sorted(files)))
        old = None
        if dest.exists():
            old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.old."))
            os.replace(dest, old / "ctx")
        os.replace(tmp_dir, dest)
    except BaseException as exc:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        if isinstance(exc, OSError):
            raise write_error(exc, dest) from None
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def is_own_folder(folder: Path) -> bool:
    """True when FOLDER holds exactly what an earlier `replace_folder` wrote there: its marker
    and the files the marker lists (a folder with anything else is not envbuild's)."""
    try:
        marker = read_input(folder / CONTEXT_MARKER, what="the context marker").decode("utf-8")
    except (FileNotFoundError, UserError, UnicodeDecodeError):
        return False
    listed = set(marker.splitlines()) | {CONTEXT_MARKER}
    found = set()
    for path in folder.rglob("*"):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            return False
        if path.is_file():
            found.add(path.relative_to(folder).as_posix())
    return found == listed


TEMP_PREFIXES = ("envbuild-headstart-", "envbuild-pin-", "envbuild-smoke-", "envbuild-ctx-")
"""envbuild's own temp folders, each named `<prefix><pid>-<random>` (`temp_prefix`)."""


def temp_prefix(prefix: str) -> str:
    """The name start of a temp folder of this process: `prefix` and the pid, so that a
    folder left by a SIGKILLed envbuild is known for one (`remove_dead_temp`)."""
    return f"{prefix}{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's process, alive
        return True
    return True


def remove_dead_temp() -> None:
    """Remove envbuild's temp folders (TEMP_PREFIXES) whose process is gone: SIGKILL and power
    loss skip every `finally`. Only this user's folders, never through a symlink; a folder
    whose pid is alive (or was reused) is left alone. Best effort."""
    import shutil
    import tempfile

    for base in {tempfile.gettempdir(), os.environ.get("TMPDIR") or "/tmp"}:
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            prefix = next((p for p in TEMP_PREFIXES if name.startswith(p)), None)
            # `<pid>-<random>` only: an older envbuild's `<random>` may be all digits.
            pid, dash, _ = name[len(prefix) :].partition("-") if prefix else ("", "", "")
            if not dash or not pid.isdigit() or _alive(int(pid)):
                continue
            path = os.path.join(base, name)
            with contextlib.suppress(OSError):
                info = os.lstat(path)
                if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
                    shutil.rmtree(path, ignore_errors=True)
