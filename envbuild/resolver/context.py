"""The resolution context: cached version parsers, the request prepared against the matrix
(`_Ctx`, `_Target`), candidate fits (`_Fit`, `_Outcome`) and matrix lookups."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envbuild.core.models import (
    Floors,
    Request,
)
from envbuild.cuda.archs import ArchRules, cc_tuple, coverage, sort_archs
from envbuild.matrix import (
    Arch,
    CudaImage,
    CudaRelease,
    FrameworkBuild,
    FrameworkRelease,
    KnownIssue,
    LibRelease,
    Matrix,
    OsImage,
    PythonBuild,
)


@lru_cache(maxsize=4096)
def _version(text: str) -> Version:
    return Version(text)


@lru_cache(maxsize=1024)
def _specifier(text: str) -> SpecifierSet:
    return SpecifierSet(text)


@lru_cache(maxsize=16384)
def _in_range(version: str, spec: str) -> bool:
    return _specifier(spec).contains(_version(version), prereleases=True)


@lru_cache(maxsize=4096)
def _major_minor(version: str) -> tuple[int, int]:
    rel = _version(version).release
    return (rel[0], rel[1] if len(rel) > 1 else 0)


def _branch(driver: str) -> int:
    return _version(driver).release[0]


def _is_branch(driver: str) -> bool:
    """ "525": only the branch is known (a bare branch number)."""
    return len(_version(driver).release) == 1


def _meets(driver: str, floor: str) -> bool:
    """Does this driver meet the floor? A bare branch ("525") is read as the newest update of
    that branch: NVIDIA keeps patching a branch, and an update within it does not change what
    it supports, so a floor inside the same branch (525.60.13) is met by updating within it;
    a floor in a later branch is not."""
    if _is_branch(driver):
        return _branch(driver) >= _branch(floor)
    return _version(driver) >= _version(floor)


# Kernel coverage (cc_tuple, parse_arch, covers, coverage) lives in envbuild/cuda/archs.py, shared
# with `envbuild validate` and `envbuild doctor`.


def _short(cuda: str) -> str:
    mm = _major_minor(cuda)
    return f"{mm[0]}.{mm[1]}"


def _label_versions(versions: list[str]) -> str:
    if len(versions) == 1:
        return versions[0]
    series = {_major_minor(v) for v in versions}
    if len(series) == 1:
        return ", ".join(sorted(versions, key=_version))
    return f"{min(versions, key=_version)} to {max(versions, key=_version)}"


@dataclass(frozen=True)
class _Target:
    """One target architecture and the names the GPUs of it were given."""

    arch: Arch
    labels: tuple[str, ...]
    """What the user or the hosts called the GPUs of this architecture."""
    rules: ArchRules = field(default_factory=ArchRules)
    """The matrix's Tegra capabilities and arch renames (Thor: sm_101 -> sm_110 in CUDA 13.0,
    nvCOMPDx/cuRANDDx release notes): envbuild/cuda/archs.py."""

    @property
    def cc(self) -> tuple[int, int]:
        return cc_tuple(self.arch.cc)

    def coverage(self, archs: Sequence[str]) -> tuple[str | None, str | None]:
        return coverage(archs, self.cc, self.rules)

    @property
    def label(self) -> str:
        names = [n for n in self.labels if n != self.arch.sm]
        return f"{' / '.join(names)} ({self.arch.sm})" if names else self.arch.sm


# --- the resolution context ------------------------------------------------------------------


@dataclass(frozen=True)
class _Ctx:
    """A request prepared for the search: parsed, its GPUs mapped to architectures."""

    request: Request
    matrix: Matrix
    framework: str
    spec: str
    """The requirement's specifier text ("" = any release)."""
    variants: tuple[str, ...]
    """Variant filter from the requirement's extras (jax[cuda13]); () = any."""
    targets: tuple[_Target, ...]
    driver: str | None
    device: str
    flavour: str
    python: str | None
    os: str | None
    cuda_spec: str | None
    policy: str
    pre_notes: tuple[str, ...] = ()
    framework_index: str = "auto"
    """`[indexes] framework_index`: auto, pypi (builds from PyPI/the configured index only)
    or index (the best build, its own index required)."""
    unreachable: frozenset[str] = frozenset()
    """Index URLs that did not answer (the lock's probe): builds from them are left out,
    except under framework_index = "index"."""
    words: str = "flags"
    """How ways out name a change: "flags" (`envbuild resolve`) or "keys" (an envbuild.toml's,
    for `envbuild lock`): `explain.WORDS`."""
    memo: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """Per-resolve memo of answers that do not depend on the fields alternatives change."""


def _index_allowed(ctx: _Ctx, build: FrameworkBuild) -> bool:
    """May this build be picked, given where it installs from and which indexes answer?
    A build without an index_url installs from PyPI (or the configured index_url)."""
    if build.index_url is None or ctx.framework_index == "index":
        return True
    return ctx.framework_index != "pypi" and build.index_url not in ctx.unreachable


# --- matrix lookups --------------------------------------------------------------------------


def _cuda_row(matrix: Matrix, version: str) -> CudaRelease | None:
    """The CUDA row of a build: exact, else the newest row of the same major.minor.

    Framework tables often name only "12.8" when the update is unknown; the newest update's
    floor is the conservative one (the same rule as `Matrix.cuda_release`).
    """
    for r in matrix.cuda:
        if r.version == version:
            return r
    same = [r for r in matrix.cuda if _major_minor(r.version) == _major_minor(version)]
    return max(same, key=lambda r: _version(r.version)) if same else None


def _first_cuda_floor(matrix: Matrix, arch: Arch) -> CudaRelease | None:
    """The earliest CUDA release of the arch's first_cuda major.minor (its driver branch)."""
    if not arch.first_cuda:
        return None
    same = [r for r in matrix.cuda if _major_minor(r.version) == _major_minor(arch.first_cuda)]
    return (
        min(same, key=lambda r: (_version(r.toolkit_driver), _version(r.version))) if same else None
    )


def _lib_row(matrix: Matrix, library: str, version: str | None) -> LibRelease | None:
    if not version:
        return None
    best: LibRelease | None = None
    for r in matrix.libs:
        if r.library != library:
            continue
        if r.version == version:
            return r
        if version.startswith(r.version + ".") and (
            best is None or len(r.version) > len(best.version)
        ):
            best = r
    return best


def _cudnn_supports(row: LibRelease, cc: tuple[int, int]) -> bool:
    """Below min_cc is unsupported; above max_cc only a forward-compatible cuDNN (9.x) runs
    (cuDNN support matrices and release notes, matrix/cudnn.toml)."""
    if row.min_cc and cc < cc_tuple(row.min_cc):
        return False
    return not (row.max_cc and cc > cc_tuple(row.max_cc) and not row.forward_compatible)


@dataclass(frozen=True)
class _CudnnPlan:
    """The cuDNN a build will run with: its exact pin, or for a range-pinned build the newest
    cuDNN of the range that supports every target (`capped` when that is not the newest the
    installer would pick, so the lock must pin it)."""

    row: LibRelease | None
    version: str | None
    newest: LibRelease | None
    capped: bool


def _plan_cudnn(ctx: _Ctx, build: FrameworkBuild) -> _CudnnPlan:
    memo_key = f"cudnn:{build.key}:{','.join(t.arch.sm for t in ctx.targets)}"
    if memo_key in ctx.memo:
        plan: _CudnnPlan = ctx.memo[memo_key]
        return plan
    m = ctx.matrix
    if not build.cudnn:
        plan = _CudnnPlan(None, None, None, False)
    elif build.cudnn_range and build.cuda:
        cands = sorted(
            (
                r
                for r in m.libs
                if r.library == "cudnn"
                and _in_range(r.version, build.cudnn_range)
                and _in_range(build.cuda, r.cuda)
            ),
            key=lambda r: _version(r.version),
            reverse=True,
        )
        fits = [r for r in cands if all(_cudnn_supports(r, t.cc) for t in ctx.targets)]
        newest = cands[0] if cands else None
        pick = fits[0] if fits else None
        plan = _CudnnPlan(
            pick, pick.version if pick else None, newest, bool(pick and pick is not newest)
        )
    else:
        row = _lib_row(m, "cudnn", build.cudnn)
        ok = row is None or all(_cudnn_supports(row, t.cc) for t in ctx.targets)
        plan = _CudnnPlan(row if ok else None, build.cudnn if ok else None, row, False)
    ctx.memo[memo_key] = plan
    return plan


def _issue(ctx: _Ctx, release_version: str, sm: str, effect: str) -> KnownIssue | None:
    """A published failure of this framework release on this target architecture."""
    for issue in ctx.matrix.issues:
        if (
            issue.framework == ctx.framework
            and issue.effect == effect
            and sm in issue.archs
            and _in_range(release_version, issue.versions)
        ):
            return issue
    return None


def _first_url(source: str) -> str:
    m = re.search(r"https?://\S+?(?=[,;)\s]|$)", source)
    return m.group(0) if m else source


def _cuda_image(matrix: Matrix, cuda: str, os: str, flavour: str) -> CudaImage | None:
    """The newest nvidia/cuda image of the build's CUDA major.minor with this OS and flavour
    (only the newest patch release of a CUDA version is supported, older ones go EOL and their
    tags are deleted six months later: the nvidia/cuda support policy,
    https://gitlab.com/nvidia/container-images/cuda/-/blob/master/doc/support-policy.md)."""
    rows = [
        i
        for i in matrix.cuda_images
        if _major_minor(i.cuda) == _major_minor(cuda) and i.has(flavour, os)
    ]
    return max(rows, key=lambda i: _version(i.cuda)) if rows else None


# --- evaluation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fit:
    """A framework build that runs on every target, with what it needs (floors, images)."""

    release: FrameworkRelease
    build: FrameworkBuild
    osimg: OsImage
    floors: Floors | None
    cuda_row: CudaRelease | None
    ptx_only: tuple[tuple[_Target, str], ...]
    image: CudaImage | None
    flavour: str
    builder: CudaImage | None
    notes: tuple[str, ...]
    rows: tuple[str, ...]
    python_build: PythonBuild | None = None
    """The managed Python the image installs (`_managed_build`); None: the OS row's Python."""

    @property
    def needed_driver(self) -> str | None:
        return self.floors.effective if self.floors else None


def _managed_build(ctx: _Ctx) -> PythonBuild | None:
    """The managed Python (matrix/python_builds.toml) for the requested Python when no OS row
    ships it: an OS Python stays preferred (docs/request.md, "Python"). None also when an OS
    is asked for (`--os` names the Python too)."""
    if not ctx.python or ctx.os or any(o.python == ctx.python for o in ctx.matrix.os_images):
        return None
    return ctx.matrix.python_build(ctx.python, ctx.request.platform)


@dataclass
class _Outcome:
    """A search's result: the fits in preference order and why the rest did not fit."""

    fits: list[_Fit] = field(default_factory=list)
    misses: dict[str, list[str]] = field(default_factory=dict)
    """release version -> reason lines ("{R}" stands for the release's name)."""
    global_reasons: list[str] = field(default_factory=list)
    releases: list[FrameworkRelease] = field(default_factory=list)


def _series(build: FrameworkBuild, release: FrameworkRelease) -> str:
    m = re.fullmatch(r"==(\d+\.\d+)\.\*", build.versions.strip())
    return m.group(1) if m else release.version


def _arch_summary(archs: Sequence[str]) -> str:
    return " ".join(sort_archs(archs)) if archs else "no GPU code"
