"""What a framework-base request adds to its base (envbuild.app.lock_base_extras): requirements the
base satisfies are not resolved again; a source extension is locked from the local wheelhouse
alone (uv, --offline) with the base's torch, setuptools and ninja, and compiled with the base's
own toolkit; a project's dependencies and build backend follow the same rule."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from envbuild.app.lock_base_extras import lock_extras, satisfied_by
from envbuild.core.errors import UserError
from envbuild.core.models import (
    BaseFacts,
    DependencyFiles,
    Indexes,
    ProjectSettings,
    Request,
    Targets,
)
from envbuild.lock.pins import RunResult, find_uv
from envbuild.matrix import load_matrix_from
from envbuild.resolver import base as fb

REPO = Path(__file__).resolve().parents[3]
WHEELS = REPO / "images" / "torch-ext" / "wheels"
REF = "nvcr.io/nvidia/pytorch:25.09-py3"
FACTS = BaseFacts(
    source="probe",
    framework="torch",
    framework_version="2.9.0a0+50eac811a6.nv25.09",
    cuda="13.0",
    cudnn="9.13.0",
    nccl="2.27.7",
    archs=("compute_120", "sm_100", "sm_120", "sm_80", "sm_90"),
    python="3.12",
    python_path="/usr/bin/python",
    os="ubuntu24.04",
    packages=(
        ("ninja", "1.13.0"),
        ("numpy", "2.1.0"),
        ("setuptools", "78.1.1"),
        ("torch", "2.9.0a0+50eac811a6.nv25.09"),
        ("tqdm", "4.67.1"),
    ),
)
needs_uv = pytest.mark.skipif(find_uv() is None, reason="uv is not installed")


def _request(**over: object) -> Request:
    base = Request(
        framework="torch",
        base=REF,
        targets=Targets(gpus=("H200",), driver="580.95.05"),
        indexes=Indexes(find_links=("wheels",)),
    )
    return dataclasses.replace(base, **over)  # type: ignore[arg-type]


def test_what_the_base_satisfies() -> None:
    held = satisfied_by(FACTS, "x86_64")
    # NGC's torch is a pre-release with a local label: its public release satisfies ranges.
    assert held("torch>=2.4") and held("torch") and held("setuptools>=77") and held("ninja")
    assert not held("torch>=2.10")  # another torch would replace the base's: resolved, refused
    assert not held("torch[opt-einsum]")  # extras may pull more
    assert not held("hatchling")  # not in the base
    assert held('pywin32; sys_platform == "win32"')  # not for this image at all
    # Facts from a matrix row list no packages: the framework is still the base's.
    assert satisfied_by(dataclasses.replace(FACTS, packages=()), "x86_64")("torch>=2.4")


@needs_uv
def test_an_extension_locks_from_the_wheelhouse_with_the_base_toolkit(tmp_path: Path) -> None:
    shutil.copytree(WHEELS, tmp_path / "wheels")
    request = _request(compile_extensions=True, packages=("envbuild-vecadd==0.1.0",))
    stack = fb.stack_for_base(request, FACTS, load_matrix_from(None))
    out = lock_extras(tmp_path, request, FACTS, stack, offline=True)
    (vecadd,) = out.packages
    assert (vecadd.name, vecadd.version, vecadd.sdist, vecadd.source) == (
        "envbuild-vecadd",
        "0.1.0",
        True,
        "wheels",
    )
    assert vecadd.build_requires == ("setuptools>=77", "torch", "ninja")
    assert out.build is not None
    # The base's nvcc; H200 cubin plus PTX (the base's torch ships PTX); nothing else to pin:
    # torch, setuptools and ninja are the base's.
    assert (out.build.toolchain, out.build.cuda_archs, out.build.packages) == (
        "devel",
        ("sm_90", "compute_90"),
        (),
    )


@needs_uv
def test_a_project_whose_dependencies_the_base_holds_resolves_nothing(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '\n[project]\nname = "p"\nversion = "0"\ndependencies = ["torch>=2.4", "numpy>=1.26"]\n'
        '\n[project.optional-dependencies]\ntrain = ["tqdm>=4.66"]\n'
    )
    request = _request(
        dependency_files=DependencyFiles(files=("pyproject.toml",), extras=("train",)),
        project=ProjectSettings(path=".", install=True),
        indexes=Indexes(),
    )
    stack = fb.stack_for_base(request, FACTS, load_matrix_from(None))

    def no_resolver(*_: object) -> RunResult:
        raise AssertionError("nothing to resolve")

    out = lock_extras(tmp_path, request, FACTS, stack, offline=True, runner=no_resolver)
    assert (out.packages, out.build) == ((), None)
    assert out.project is not None and [p for p, _ in out.project.files] == ["pyproject.toml"]


def test_installing_the_project_needs_pip_in_the_base(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "0"\n')
    request = _request(project=ProjectSettings(path=".", install=True))
    facts = dataclasses.replace(FACTS, has_pip=False)
    stack = fb.stack_for_base(request, facts, load_matrix_from(None))
    with pytest.raises(UserError) as info:
        lock_extras(tmp_path, request, facts, stack)
    assert info.value.message == (
        f"[project] install = true, but the base {REF} has no pip for /usr/bin/python to "
        "install the project with"
    )


def test_project_dependencies_the_base_lacks_need_its_pip_at_lock_time(tmp_path: Path) -> None:
    """Not only [packages]: a project's own dependency the base does not hold is installed
    with the base's pip, so a base without one is refused when locking, not when building."""
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "0"\ndependencies = ["rich>=13"]\n'
    )
    request = _request(
        dependency_files=DependencyFiles(files=("pyproject.toml",)),
        project=ProjectSettings(path=".", install=False),
        indexes=Indexes(),
    )
    facts = dataclasses.replace(FACTS, has_pip=False)
    stack = fb.stack_for_base(request, facts, load_matrix_from(None))
    with pytest.raises(UserError) as info:
        lock_extras(tmp_path, request, facts, stack, offline=True)
    assert info.value.message == (
        f"the base {REF} has no pip for /usr/bin/python: the packages it does not hold "
        "(rich>=13) cannot be installed"
    )
