"""`--report FILE.html` of `envbuild image`, `smoke` and `validate`, and the memory fit they print.

The page is `envbuild.render.report.page`; it is written atomically (`write_atomic`), and on a
failure too (it shows what failed). `check_path` refuses a path that cannot be a file before a
long build rather than after it.

A --report that is a symlink is written through it (the link stays: it is how the user named
the page's place), and one that is a FIFO or a character device (/dev/stdout) is streamed into
it: replacing either with a file, as a rename does, would leave the reader waiting for ever,
and as root would replace /dev/stdout itself.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envbuild import matrix as matrix_data
from envbuild.core.errors import UserError
from envbuild.core.fsio import write_atomic, write_error
from envbuild.render import report as html
from envbuild.smoke import fit as memfit


def _mode(path: Path) -> int | None:
    """The mode of what `path` names (through a symlink); None when nothing is there. UserError
    for a symlink to nothing (writing would create its target's folders) or a socket/device."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # the parents' check words the second
        if path.is_symlink():
            raise UserError(
                f"--report {path} is a symlink to {os.readlink(path)}, which does not exist",
                hint="point the link at a file in an existing folder, or name another page",
            ) from None
        return None
    except OSError as exc:
        raise write_error(exc, path, f"--report {path}") from None
    if stat.S_ISDIR(mode):
        raise UserError(
            f"--report {path} is a folder", hint="name the page, e.g. --report smoke.html"
        )
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        raise UserError(
            f"--report {path} is not a file, FIFO or terminal",
            hint="name a file for the page, e.g. --report smoke.html",
        )
    return mode


def check_path(path: Path | None) -> None:
    """UserError (exit 2) for a --report that is a folder, a socket, a dangling symlink or
    under a file."""
    if path is None:
        return
    if _mode(path) is not None:
        return
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(
                    f"--report {path}: {parent} is a file, not a folder",
                    hint="name a file in a folder, e.g. --report smoke.html",
                )
            break


def memory_fit(
    report: Mapping[str, Any] | None,
    matrix_overlay: Path | None = None,
    *,
    targets: Sequence[str] = (),
    command: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The run's memory fit (the payload's report and the project's smoke step `command`)
    against the lock's target GPUs (every GPU the matrix knows the memory of when there are
    none), as JSON; None when the run has no peak."""
    if not report and not command:
        return None
    table = memfit.matrix_memory(matrix_data.load_matrix_from(matrix_overlay))
    got = memfit.memory_fit(report, memfit.for_targets(table, targets), command)
    return got.to_json() if got is not None else None


def write(
    path: Path,
    *,
    title: str,
    ok: bool,
    report: Mapping[str, Any] | None,
    checks: Sequence[Mapping[str, Any]] = (),
    fit: Mapping[str, Any] | None = None,
    error: str = "",
    command: Mapping[str, Any] | None = None,
) -> None:
    """Render the page and write it atomically (FileWriteError, exit 3, when it cannot be)."""
    text = html.page(
        title=title,
        verdict="pass" if ok else "fail",
        report=report,
        checks=checks,
        memory_fit=fit,
        error=error,
        command=command,
    )
    mode = _mode(path)
    if mode is not None and not stat.S_ISREG(mode):
        _stream(path, text)
    else:
        write_atomic(path.resolve() if path.is_symlink() else path, text)


def _stream(path: Path, text: str) -> None:
    """Write into a FIFO or character device as `> path` would; a FIFO nobody reads is refused
    (opening it would block for ever)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UserError(
                f"--report {path} is a FIFO that no process reads",
                hint=f"start its reader first (e.g. `cat {path} > page.html &`)",
            ) from None
        raise write_error(exc, path, f"--report {path}") from None
    try:
        os.set_blocking(fd, True)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        raise write_error(exc, path, f"--report {path}") from None
