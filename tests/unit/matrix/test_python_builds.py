"""matrix/python_builds.toml: the managed Pythons, generated from uv's own download metadata
(`envbuild.matrix.refresh.python_builds`), loaded and checked as strictly as every matrix file
(matrix/README.md)."""

from __future__ import annotations

import pytest

from envbuild.core.resources import matrix_dir
from envbuild.matrix import check_files, load_matrix, read_matrix_files
from envbuild.matrix.refresh import python_builds

KEY = "cpython-3.9.25-linux-x86_64-gnu"
SHA = "fe04e8b27bd69ca2144fc542428f8b9b5287b6a2e45516a4acfe2c2bc3102773"


def _files_with(old: str, new: str) -> dict[str, str]:
    files = read_matrix_files(matrix_dir(), label="matrix")
    name = "matrix/python_builds.toml"
    assert old in files[name]
    files[name] = files[name].replace(old, new, 1)
    return files


def test_the_shipped_rows_are_the_snapshot_of_uvs_metadata() -> None:
    commit, entries = python_builds.read_snapshot(matrix_dir() / python_builds.SNAPSHOT)
    text = (matrix_dir() / python_builds.OUTPUT).read_text(encoding="utf-8")
    assert text == python_builds.render(entries, commit=commit)
    rows = load_matrix().python_builds
    pythons = {(b.python, b.platform) for b in rows}
    wanted = {f"3.{m}" for m in range(9, 15)} | {"3.13t", "3.14t"}
    assert pythons == {(p, a) for p in wanted for a in ("x86_64", "aarch64")}


def test_select_keeps_the_newest_final_patch_of_each_build() -> None:
    def entry(patch: int, pre: str = "") -> dict[str, object]:
        return {
            "name": "cpython",
            "arch": {"family": "x86_64", "variant": None},
            "os": "linux",
            "libc": "gnu",
            "major": 3,
            "minor": 12,
            "patch": patch,
            "prerelease": pre,
            "url": "u",
            "sha256": "s",
            "variant": None,
            "build": "20260101",
        }

    kept = python_builds.select(
        {"a": entry(3), "b": entry(9), "c": entry(10, "rc1"), "d": {**entry(11), "libc": "musl"}}
    )
    assert list(kept) == ["b"]


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (f'sha256 = "{SHA}"', 'sha256 = "abc"', "sha256 'abc' must be 64 lower-case hex digits"),
        (
            'source = "https://github.com/astral-sh/uv/blob/',
            'note = "https://github.com/astral-sh/uv/blob/',
            "source is missing",
        ),
        (f'uv_key = "{KEY}"', 'uv_key = "cpython-3.9.24-linux-x86_64-gnu"', "uv_key"),
        ('platform = "x86_64"', 'platform = "riscv64"', "platform 'riscv64' must be one of"),
    ],
)
def test_a_bad_python_build_row_is_a_matrix_problem(old: str, new: str, problem: str) -> None:
    report = check_files(_files_with(old, new))
    assert any(problem in p and "python_builds.toml: build[" in p for p in report.problems), (
        report.problems
    )
