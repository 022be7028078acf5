"""Loading the matrix (thin I/O): the built-in folder plus an optional overlay folder.

The overlay is a value the caller passes (`load_matrix_from(overlay)`); the one place that
reads it from the environment is `overlay_from_env()`, called at the CLI edge.
`load_matrix(overlay=None)` still falls back to the environment for callers not yet passing it.
"""

from __future__ import annotations

import binascii
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from envbuild.core.errors import MatrixError, UserError
from envbuild.matrix.rows import Matrix

if TYPE_CHECKING:
    # Paths come in from callers; a read of the compiled matrix needs no pathlib (with
    # urllib.parse and ipaddress, a visible part of `envbuild resolve`'s start).
    from pathlib import Path

OVERLAY_ENV = "ENVBUILD_MATRIX_OVERLAY"

_CACHE: dict[tuple[str, str], Matrix] = {}


def read_matrix_files(folder: Path, *, label: str) -> dict[str, str]:
    """Every *.toml of a folder as display name ("<label>/<file>") -> text. MatrixError (exit 2)
    for a missing folder, an unreadable file or bytes that are not UTF-8."""
    if not folder.is_dir():
        raise MatrixError(
            f"matrix folder {folder} does not exist",
            hint="pass an existing folder (--overlay DIR or ENVBUILD_MATRIX_OVERLAY)",
            fields={"folder": str(folder)},
        )
    from envbuild.core.fsio import read_input  # only when the compiled matrix is not used

    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.toml")):
        name = f"{label}/{path.name}"
        try:
            data = read_input(path, what="the matrix file")
        except FileNotFoundError:
            continue  # removed since the folder was listed
        except UserError as exc:  # a FIFO, a device, a folder, too large, unreadable
            raise MatrixError(exc.message, hint=exc.hint, fields={"file": name}) from None
        try:
            out[name] = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MatrixError(
                f"{name}: not UTF-8 (byte {exc.start})",
                hint=f"save {path} as UTF-8",
                fields={"file": name},
            ) from None
    return out


def overlay_from_env(environ: Mapping[str, str] | None = None) -> Path | None:
    """The overlay folder named by $ENVBUILD_MATRIX_OVERLAY (empty or unset: none). The one
    place the environment chooses the overlay; the CLI edge calls it and passes the value on."""
    value = (os.environ if environ is None else environ).get(OVERLAY_ENV)
    if not value:
        return None
    from pathlib import Path

    return Path(value)


def overlay_dir(overlay: Path | None) -> Path | None:
    """The overlay folder: the argument, else `overlay_from_env()` (for callers that do not
    pass the overlay yet)."""
    return overlay if overlay is not None else overlay_from_env()


def load_sources(overlay: Path | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(built-in files, overlay files) as display name -> text; overlay None falls back to
    `overlay_from_env()`."""
    return sources_from(overlay_dir(overlay))


def sources_from(overlay: Path | None) -> tuple[dict[str, str], dict[str, str]]:
    """(built-in files, overlay files) as display name -> text; overlay None = no overlay."""
    from envbuild.core.resources import matrix_dir

    built_in = read_matrix_files(matrix_dir(), label="matrix")
    extra = read_matrix_files(overlay, label=str(overlay)) if overlay is not None else {}
    return built_in, extra


def load_matrix_from(overlay: Path | None) -> Matrix:
    """The built-in matrix merged with this overlay folder (None = none), parsed and
    cross-checked; cached per process and folder pair. MatrixError (exit 2) on any problem."""
    from envbuild.core.resources import matrix_folder

    cache_key = (os.path.realpath(matrix_folder()), str(overlay.resolve()) if overlay else "")
    cached = _CACHE.get(cache_key)
    if cached is not None:
        return cached
    matrix = _load_compiled(cache_key[0], overlay, cache_key)
    _CACHE[cache_key] = matrix
    return matrix


RACY_S = 2
"""A file changed less than this long ago may change again within the same timestamp tick
with the same size, so a matrix read from it is not stored (git's "racy clean" rule,
https://git-scm.com/docs/racy-git)."""


def _folder_stamps(folder: str | Path) -> list[tuple[str, int, int, int, int]] | None:
    """(name, size, mtime_ns, ctime_ns, inode) of each *.toml in `folder`, sorted, as
    `read_matrix_files` would list them; None when one is not a plain file or cannot be
    stat'ed (the reading path then reports it)."""
    out = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.name.endswith(".toml"):
                    continue
                if not entry.is_file():
                    return None
                st = entry.stat()
                out.append((entry.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    except OSError:
        return None
    return sorted(out)


def _row_types() -> tuple[type, ...]:
    """The classes a compiled matrix may hold: those `envbuild.matrix.rows` defines (its
    unpickling names no other global: `envbuild.core.compiled`)."""
    import sys

    module = Matrix.__module__
    return tuple(
        v
        for v in vars(sys.modules[module]).values()
        if isinstance(v, type) and v.__module__ == module
    )


def _load_compiled(built_in_dir: str, overlay: Path | None, folders: tuple[str, str]) -> Matrix:
    """The parsed matrix from the user cache (`envbuild.core.compiled`) when the files are the ones
    it was compiled from (name, size, mtime, ctime, inode), by this envbuild version, with the
    same row types and parser; else read, parsed, cross-checked and stored. Parsing and
    checking are most of a short command's time; unpickling is not."""
    import time

    from envbuild import __version__
    from envbuild.core import compiled

    stamps = [_folder_stamps(built_in_dir), _folder_stamps(overlay) if overlay else []]
    path = key = None
    if stamps[0] is not None and stamps[1] is not None:
        key = repr((__version__, folders, stamps))  # compared whole: no hash to import
        # One file per built-in/overlay folder pair: an edit replaces it, adds none.
        where = binascii.crc32("\0".join(folders).encode())
        path = compiled.cache_file(f"matrix-{where:08x}.pickle")
        cached = compiled.read(path, key, allowed=_row_types(), kind=Matrix)
        if isinstance(cached, Matrix):
            return cached
    from envbuild.matrix.parse import _problems_error, collect

    built_in, extra = sources_from(overlay)
    matrix, problems, _ = collect(built_in, extra or None, warnings=False)
    if problems:
        raise _problems_error(problems)
    newest = max((s[2] for group in stamps for s in group or ()), default=0)
    if path is not None and key is not None and newest < time.time_ns() - RACY_S * 10**9:
        made_by = (collect.__module__, "envbuild.matrix.checks")
        compiled.write(path, key, matrix, made_by=made_by)
    return matrix


def load_matrix(*, overlay: Path | None = None) -> Matrix:
    """`load_matrix_from(overlay)`, where overlay None still means `overlay_from_env()` (the
    callers that do not pass the overlay value yet)."""
    return load_matrix_from(overlay_dir(overlay))


def clear_cache() -> None:
    """Forget loaded matrices (tests that edit matrix files in place)."""
    _CACHE.clear()
