"""The README's exit-code table names every exit code an error class can end with."""

from __future__ import annotations

import re
from pathlib import Path

from envbuild.core import errors

README = Path(__file__).resolve().parents[3] / "README.md"


def _error_codes() -> set[int]:
    found = set()
    for value in vars(errors).values():
        if isinstance(value, type) and issubclass(value, errors.EnvbuildError):
            found.add(errors._class_exit_code(value))
    return found


def _readme_codes() -> set[int]:
    section = README.read_text(encoding="utf-8").split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(m) for m in re.findall(r"^\| (\d+) \|", section, flags=re.MULTILINE)}


def test_every_error_exit_code_is_in_the_readme() -> None:
    codes = _error_codes()
    assert {1, 2, 8} <= codes  # guards against a walk that finds no classes
    assert codes - _readme_codes() == set()
