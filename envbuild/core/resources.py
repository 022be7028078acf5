"""Where the shipped data lives: `matrix/` and `templates/` (repo checkout or installed wheel)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

# Plain strings inside, Paths out: `envbuild resolve` reads the compiled matrix through
# `matrix_folder()` without importing pathlib (with urllib.parse and ipaddress, a visible
# part of its start).
# This module is envbuild/core/resources.py: the package folder is two levels up.
_PKG = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _data_dir(name: str) -> str:
    # A wheel carries the folders under envbuild/_data (pyproject force-include); an editable
    # install or a checkout has them at the repository root.
    packaged = os.path.join(_PKG, "_data", name)
    if os.path.isdir(packaged):
        return packaged
    return os.path.join(os.path.dirname(_PKG), name)


def _path(text: str) -> Path:
    from pathlib import Path

    return Path(text)


def matrix_folder() -> str:
    """`matrix_dir()` as a string."""
    override = os.environ.get("ENVBUILD_MATRIX_DIR")
    return override or _data_dir("matrix")


def matrix_dir() -> Path:
    """The built-in matrix; `ENVBUILD_MATRIX_DIR` replaces it (tests, forks)."""
    return _path(matrix_folder())


def templates_dir() -> Path:
    return _path(_data_dir("templates"))


def payload_dir() -> Path:
    """The smoke payload, copied into every image at a fixed path."""
    return _path(os.path.join(_PKG, "payload"))
