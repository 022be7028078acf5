"""Where the shipped data lives: `matrix/` and `templates/` (repo checkout or installed wheel)."""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    # A wheel carries the folders under envbuild/_data (pyproject force-include); an editable
    # install or a checkout has them at the repository root.
    packaged = _PKG / "_data" / name
    if packaged.is_dir():
        return packaged
    return _PKG.parent / name


def matrix_dir() -> Path:
    """The built-in matrix; `ENVBUILD_MATRIX_DIR` replaces it (tests, forks)."""
    override = os.environ.get("ENVBUILD_MATRIX_DIR")
    return Path(override) if override else _data_dir("matrix")


def templates_dir() -> Path:
    return _data_dir("templates")


def payload_dir() -> Path:
    """The smoke payload, copied into every image at a fixed path."""
    return _PKG / "payload"
