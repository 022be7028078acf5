"""Loading the matrix (thin I/O): the built-in folder plus an optional overlay folder.

The overlay is a value the caller passes (`load_matrix_from(overlay)`); the one place that
reads it from the environment is `overlay_from_env()`, called at the CLI edge.
`load_matrix(overlay=None)` still falls back to the environment for callers not yet passing it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from envbuild.errors import MatrixError
from envbuild.matrix.parse import _problems_error, collect
from envbuild.matrix.rows import Matrix

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
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.toml")):
        name = f"{label}/{path.name}"
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise MatrixError(
                f"{name}: cannot be read: {exc.strerror}",
                hint=f"check the permissions of {path}",
                fields={"file": name},
            ) from None
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
    return Path(value) if value else None


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
    from envbuild.resources import matrix_dir

    built_in = read_matrix_files(matrix_dir(), label="matrix")
    extra = read_matrix_files(overlay, label=str(overlay)) if overlay is not None else {}
    return built_in, extra


def load_matrix_from(overlay: Path | None) -> Matrix:
    """The built-in matrix merged with this overlay folder (None = none), parsed and
    cross-checked; cached per process and folder pair. MatrixError (exit 2) on any problem."""
    from envbuild.resources import matrix_dir

    cache_key = (str(matrix_dir().resolve()), str(overlay.resolve()) if overlay else "")
    cached = _CACHE.get(cache_key)
    if cached is not None:
        return cached
    built_in, extra = sources_from(overlay)
    matrix, problems, _ = collect(built_in, extra or None, warnings=False)
    if problems:
        raise _problems_error(problems)
    _CACHE[cache_key] = matrix
    return matrix


def load_matrix(*, overlay: Path | None = None) -> Matrix:
    """`load_matrix_from(overlay)`, where overlay None still means `overlay_from_env()` (the
    callers that do not pass the overlay value yet)."""
    return load_matrix_from(overlay_dir(overlay))


def clear_cache() -> None:
    """Forget loaded matrices (tests that edit matrix files in place)."""
    _CACHE.clear()
