"""The matrix and resolver against NVIDIA's, PyTorch's and TensorFlow's own published tables.

The rows live in tests/cases/resolve/tables/published.toml (each table names its page and how
it was read); the resolver cases drawn from the same tables are tests/cases/resolve/pub-*.toml
(run by test_resolver_cases.py). This file also checks that the devel builder image a
compile-extensions stack needs survives the lock file.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envbuild.app import resolve as resolve_use_case
from envbuild.core.models import Stack
from envbuild.lock import format as lockfile
from envbuild.matrix import Matrix, load_matrix

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomlkit as tomllib

ROOT = Path(__file__).resolve().parents[3]
TABLES: dict[str, Any] = tomllib.loads(
    (ROOT / "tests" / "cases" / "resolve" / "tables" / "published.toml").read_text("utf-8")
)


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix()


def _next_minor(py: str) -> str:
    major, minor = py.split(".")
    return f"{major}.{int(minor) + 1}"


def _prev_minor(py: str) -> str:
    major, minor = py.split(".")
    return f"{major}.{int(minor) - 1}"


def test_every_table_names_its_source() -> None:
    for name in ("cuda_toolkit_driver", "minor_version_compatibility", "torch", "tensorflow"):
        assert "https://" in TABLES[name]["source"], name
        assert TABLES[name]["read"], name


@pytest.mark.parametrize(
    ("version", "driver"),
    [tuple(r) for r in TABLES["cuda_toolkit_driver"]["rows"]],
    ids=[r[0] for r in TABLES["cuda_toolkit_driver"]["rows"]],
)
def test_toolkit_driver_floor_is_the_published_one(
    matrix: Matrix, version: str, driver: str
) -> None:
    rows = [r for r in matrix.cuda if r.version == version]
    assert rows, f"matrix/cuda.toml has no CUDA {version} row"
    assert rows[0].toolkit_driver == driver


@pytest.mark.parametrize(
    ("major", "driver"), [tuple(r) for r in TABLES["minor_version_compatibility"]["rows"]]
)
def test_minor_version_compatibility_floor(matrix: Matrix, major: int, driver: str) -> None:
    rows = [r for r in matrix.cuda if Version(r.version).major == major]
    assert rows
    assert {r.minor_compat_driver for r in rows} == {driver}


@pytest.mark.parametrize(
    ("series", "variant", "cudnn"),
    [tuple(r) for r in TABLES["torch"]["cudnn"]],
    ids=[f"{r[0]}-{r[1]}" for r in TABLES["torch"]["cudnn"]],
)
def test_torch_cudnn_is_the_published_one(
    matrix: Matrix, series: str, variant: str, cudnn: str
) -> None:
    builds = [
        b
        for b in matrix.builds
        if b.framework == "torch"
        and b.variant == variant
        and "x86_64" in b.platforms  # the published tables are the x86_64 builds
        and SpecifierSet(b.versions).contains(f"{series}.0")
    ]
    assert builds, f"no torch {series} {variant} build in matrix/torch.toml"
    assert [b.cudnn for b in builds] == [cudnn]


@pytest.mark.parametrize(
    ("series", "low", "high"),
    [tuple(r) for r in TABLES["torch"]["python"]],
    ids=[r[0] for r in TABLES["torch"]["python"]],
)
def test_torch_python_range_is_the_published_one(
    matrix: Matrix, series: str, low: str, high: str
) -> None:
    rels = [
        r
        for r in matrix.releases
        if r.framework == "torch" and Version(r.version).base_version.startswith(series + ".")
    ]
    assert rels
    for r in rels:
        spec = SpecifierSet(r.python)
        assert low in spec and high in spec, (r.version, r.python)
        assert _prev_minor(low) not in spec and _next_minor(high) not in spec, (r.version, r.python)


@pytest.mark.parametrize(
    ("series", "low", "high", "cudnn", "cuda"),
    [tuple(r) for r in TABLES["tensorflow"]["rows"]],
    ids=[r[0] for r in TABLES["tensorflow"]["rows"]],
)
def test_tensorflow_tested_build_configuration(
    matrix: Matrix, series: str, low: str, high: str, cudnn: str, cuda: str
) -> None:
    builds = [
        b
        for b in matrix.builds
        if b.framework == "tensorflow" and b.cuda and SpecifierSet(b.versions).contains(series)
    ]
    assert len(builds) == 1, series
    b = builds[0]
    assert b.cuda is not None and b.cudnn is not None
    assert Version(b.cuda).release[:2] == Version(cuda).release[:2]
    assert Version(b.cudnn).release[:2] == Version(cudnn).release[:2]
    rels = [
        r
        for r in matrix.releases
        if r.framework == "tensorflow" and r.version.startswith(series + ".")
    ]
    assert rels
    for r in rels:
        spec = SpecifierSet(r.python)
        assert low in spec and high in spec and _next_minor(high) not in spec, r.version
    # And the resolver picks that configuration when asked for the series.
    stack = resolve_use_case.resolve(
        framework=f"tensorflow=={series}.*", gpus=("A100",), matrix=matrix
    )
    assert isinstance(stack, Stack)
    assert stack.cuda is not None and Version(stack.cuda).release[:2] == Version(cuda).release[:2]


# --- the devel builder survives the lock (issue: lockfile.dumps dropped base_image.builder) ---


def test_compile_extensions_builder_round_trips_through_the_lock(matrix: Matrix) -> None:
    stack = resolve_use_case.resolve(
        framework="torch==2.10.*", gpus=("H100",), compile_extensions=True, matrix=matrix
    )
    assert isinstance(stack, Stack)
    builder = stack.base_image.builder
    assert builder is not None and "-devel-" in builder
    text = (ROOT / "images" / "torch-train" / "envbuild.lock").read_text("utf-8")
    lock = lockfile.loads(text, verify=False)
    with_builder = dataclasses.replace(lock, stack=stack)
    dumped = lockfile.dumps(with_builder)
    assert f'builder = "{builder}"' in dumped
    again = lockfile.loads(dumped)
    assert again.stack.base_image.builder == builder
    assert again == with_builder
    assert lockfile.dumps(again) == dumped


def test_a_lock_without_builder_has_no_builder_key(matrix: Matrix) -> None:
    text = (ROOT / "images" / "torch-train" / "envbuild.lock").read_text("utf-8")
    lock = lockfile.loads(text, verify=False)
    assert lock.stack.base_image.builder is None
    assert "builder" not in lockfile.dumps(lock).split("[base_image]")[1].split("\n[")[0]


def test_cuda13_drops_maxwell_pascal_volta(matrix: Matrix) -> None:
    """CUDA 13.0 release notes, 'Deprecated Architectures': offline compilation and library
    support for Maxwell, Pascal and Volta (sm_50 .. sm_72) was removed; Turing (7.5) stays."""
    for a in matrix.archs:
        major_minor = Version(a.cc).release[:2]
        if (5, 0) <= major_minor < (7, 5):
            assert a.last_cuda is not None and Version(a.last_cuda) < Version("13"), a.sm
        elif major_minor >= (7, 5):
            assert a.last_cuda is None or Version(a.last_cuda) >= Version("12.8"), a.sm
