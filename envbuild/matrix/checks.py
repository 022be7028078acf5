"""Strict checks of the matrix (pure; each yields or returns problem texts): per-row value
checks, run while parsing, and cross-file checks between rows of a parsed `Matrix`."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from packaging.specifiers import InvalidSpecifier
from packaging.version import InvalidVersion, Version

from envbuild.core.values import gpu_name_words
from envbuild.matrix.rows import (
    CONFIDENCES,
    GPU_SEGMENTS,
    IMAGE_FLAVOURS,
    ISSUE_EFFECTS,
    PLATFORMS,
    PYTHON_LIBCS,
    AnyRow,
    Arch,
    CudaImage,
    CudaRelease,
    FrameworkBuild,
    FrameworkRelease,
    GpuBaseline,
    HostPlatform,
    KnownIssue,
    LibRelease,
    ListedGpu,
    Matrix,
    NgcImage,
    OsImage,
    OtherVendorGpu,
    PythonBuild,
    _lib_match,
    _major_of,
    _minor_of,
    _spec,
    _ver,
)

_SM_RE = re.compile(r"^(sm|compute)_(\d+)([af]?)$")
_CC_RE = re.compile(r"^\d+\.\d$")
_MAJOR_MINOR_RE = re.compile(r"^\d+\.\d+$")
# Bounded parts: NVIDIA driver parts have at most 3 digits (570.124.06); an unbounded run
# would pass here and then crash Version() past Python's 4300-digit int limit in the resolver
# (tests/reliability/test_bad_input.py::test_mutated_matrix_file, case huge driver).
_DRIVER_RE = re.compile(r"^\d{1,6}(\.\d{1,6}){0,2}$")
_REQUIRE_CUDA_RE = re.compile(r"^cuda>=(\d+\.\d+)((?: brand=[a-z]+,driver>=\d+,driver<\d+)*)$")
_FLAVOUR_OS_RE = re.compile(rf"^({'|'.join(IMAGE_FLAVOURS)})-(.+)$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
_TAGGED_REF_RE = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[0-9]+)?/[a-z0-9._/-]+:[A-Za-z0-9._-]+$")
_RELEASE_RE = re.compile(r"^\d{2}\.\d{2}$")
_OS_RE = re.compile(r"^[a-z]+\d+(\.\d+)?$")


# --- per-row value checks (pure; each yields problem texts) --------------------------------------


def _version_ok(text: str | None, *, parts: tuple[int, ...] = (1, 2, 3, 4)) -> bool:
    if text is None:
        return True
    try:
        v = _ver(text)
    except InvalidVersion:
        return False
    return str(v) == text and len(v.release) in parts and not v.local


def _spec_ok(text: str | None) -> bool:
    if text is None:
        return True
    try:
        _spec(text)
    except InvalidSpecifier:
        return False
    return bool(text.strip())


def _common(row: AnyRow) -> Iterable[str]:
    if not row.source.strip():
        yield "source is missing (every row says where its facts come from)"
    if row.confidence not in CONFIDENCES:
        yield f"confidence {row.confidence!r} must be one of {', '.join(CONFIDENCES)}"


def _check_cuda(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, CudaRelease)
    yield from _common(row)
    if not _version_ok(row.version, parts=(3,)):
        yield f"version {row.version!r} must be a full release like '12.8.1'"
    for what, drv in (
        ("toolkit_driver", row.toolkit_driver),
        ("minor_compat_driver", row.minor_compat_driver),
    ):
        if drv is not None and not _DRIVER_RE.match(drv):
            yield f"{what} {drv!r} is not a driver version like '570.124.06'"
    if row.minor_compat_driver is None and _major_of(row.version) not in (None, 10):
        yield "minor_compat_driver is missing (no [[minor_compat]] row for this major)"


def _check_arch(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, Arch)
    yield from _common(row)
    if not _CC_RE.match(row.cc):
        yield f"cc {row.cc!r} must look like '9.0'"
        return
    major, minor = row.cc.split(".")
    if row.sm != f"sm_{major}{minor}":
        yield f"sm {row.sm!r} does not match cc {row.cc} (expected sm_{major}{minor})"
    for what, v in (("first_cuda", row.first_cuda), ("last_cuda", row.last_cuda)):
        if v is not None and not _MAJOR_MINOR_RE.match(v):
            yield f"{what} {v!r} must be major.minor like '12.8'"
    if (
        row.first_cuda
        and row.last_cuda
        and _MAJOR_MINOR_RE.match(row.first_cuda)
        and _MAJOR_MINOR_RE.match(row.last_cuda)
        and Version(row.first_cuda) > Version(row.last_cuda)
    ):
        yield f"first_cuda {row.first_cuda} is after last_cuda {row.last_cuda}"
    if row.renamed_to is not None and not _SM_RE.match(row.renamed_to):
        yield f"renamed_to {row.renamed_to!r} must be an sm name like 'sm_110'"
    if any(not g.strip() for g in row.gpus):
        yield "gpus has an empty name"
    if row.last_driver_branch is not None and not 100 <= row.last_driver_branch <= 999:
        yield f"last_driver_branch {row.last_driver_branch} must be a branch number like 580"
    yield from _memory_problems(row)


def _memory_problems(row: Arch) -> Iterable[str]:
    """memory_gib: each name is one of the arch's GPUs (or one with a memory variant after it),
    once; a plausible size; and a datasheet to check it against."""
    if row.memory_source and not row.memory_gib:
        yield "memory_source without memory_gib"
    if not row.memory_gib:
        return
    if "https://" not in row.memory_source:
        yield "memory_gib needs memory_source with the datasheet URL(s) it comes from"
    names = sorted((_norm_gpu(g) for g in row.gpus), key=len, reverse=True)
    seen: set[str] = set()
    for name, gib in row.memory_gib:
        norm = _norm_gpu(name)
        if norm in seen:
            yield f"memory_gib lists {name!r} twice"
        seen.add(norm)
        if not any(norm.startswith(g) for g in names if g):
            yield f"memory_gib name {name!r} is not one of this arch's gpus (or one + a variant)"
        if not 1 <= gib <= 1024:
            yield f"memory_gib {name!r} = {gib:g} GiB is not between 1 and 1024"


def _check_release(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, FrameworkRelease)
    yield from _common(row)
    if not _version_ok(row.version):
        yield f"version {row.version!r} is not an exact release like '2.7.1'"
    if not _spec_ok(row.python):
        yield f"python {row.python!r} is not a version range like '>=3.9,<3.14'"
    if row.free_threaded is not None and not _spec_ok(row.free_threaded):
        yield f"free_threaded {row.free_threaded!r} is not a version range like '==3.14.*'"


def _check_build(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, FrameworkBuild)
    yield from _common(row)
    if not _spec_ok(row.versions):
        yield f"versions {row.versions!r} is not a version range like '==2.7.*'"
    if not _NAME_RE.match(row.variant):
        yield f"variant {row.variant!r} must be a lower-case name like 'cu128'"
    if not _version_ok(row.cuda, parts=(2, 3)):
        yield f"cuda {row.cuda!r} must be '12.8' or '12.8.1'"
    for what, v in (("cudnn", row.cudnn), ("nccl", row.nccl)):
        if not _version_ok(v):
            yield f"{what} {v!r} is not a version like '9.10.2.21'"
    if not _spec_ok(row.python):
        yield f"python {row.python!r} is not a version range"
    if "{version}" not in row.requirement:
        yield "requirement must contain {version}, e.g. 'torch=={version}'"
    else:
        yield from _requirement_problems(row)
    if row.index_url is not None and not row.index_url.startswith("https://"):
        yield f"index_url {row.index_url!r} must be an https:// URL"
    if row.index_url is not None and row.pypi_default:
        yield "a pypi_default build has no index_url (it comes from PyPI)"
    for p in row.platforms:
        if p not in PLATFORMS:
            yield f"platform {p!r} must be one of {', '.join(PLATFORMS)}"
    if not row.platforms:
        yield "platforms is empty"
    if row.cuda is None:
        if row.archs or row.cudnn or row.nccl:
            yield "a CPU build (no cuda) has no archs, cudnn or nccl"
    elif not row.archs:
        yield "a CUDA build needs its archs (leave the build out when they are not known)"
    for a in row.archs:
        if not _SM_RE.match(a):
            yield f"arch {a!r} must look like 'sm_90' or 'compute_120'"
    if list(row.archs) != sorted(set(row.archs), key=_arch_sort_key):
        yield "archs must be unique and sorted (sm_ by number, then compute_ by number)"
    if row.cudnn_range is not None and (not _spec_ok(row.cudnn_range) or row.cudnn is None):
        yield f"cudnn_range {row.cudnn_range!r} must be a version range, with cudnn its floor"
    if row.min_cc is not None and (not _CC_RE.match(row.min_cc) or row.cuda is None):
        yield f"min_cc {row.min_cc!r} must look like '5.2' (and only on a CUDA build)"


def _requirement_problems(row: FrameworkBuild) -> Iterable[str]:
    """The requirement goes to uv as a line of its requirements file: it must be exactly one
    PEP 508 requirement on the framework itself (extras allowed), with no URL, marker, option
    or second line, or an overlay could add an index or build a source at lock time."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    text = row.requirement.replace("{version}", "0")
    if text != text.strip() or any(c in text for c in "\r\n\t") or " -" in text:
        yield f"requirement {row.requirement!r} must be one requirement on one line, no options"
        return
    try:
        req = Requirement(text)
    except InvalidRequirement:
        yield f"requirement {row.requirement!r} is not a PEP 508 requirement"
        return
    if canonicalize_name(req.name) != canonicalize_name(row.framework):
        yield f"requirement {row.requirement!r} must name {row.framework}"
    if req.url or req.marker:
        yield f"requirement {row.requirement!r} must have no URL and no environment marker"


def _arch_sort_key(a: str) -> tuple[int, int, str]:
    m = _SM_RE.match(a)
    if not m:
        return (9, 0, a)
    return (0 if m.group(1) == "sm" else 1, int(m.group(2)), m.group(3))


def _check_lib(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, LibRelease)
    yield from _common(row)
    if not _version_ok(row.version):
        yield f"version {row.version!r} is not a version like '9.10.2'"
    if not _spec_ok(row.cuda):
        yield f"cuda {row.cuda!r} is not a version range like '>=12.0,<13'"
    for what, v in (("min_cc", row.min_cc), ("max_cc", row.max_cc)):
        if v is not None and not _CC_RE.match(v):
            yield f"{what} {v!r} must look like '7.5'"


def _check_image(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, CudaImage)
    yield from _common(row)
    if not _version_ok(row.cuda, parts=(3,)):
        yield f"cuda {row.cuda!r} must be a full release like '12.8.1'"
    for f in row.flavours:
        if f not in IMAGE_FLAVOURS:
            yield f"flavour {f!r} must be one of {', '.join(IMAGE_FLAVOURS)}"
    if "cudnn" in row.flavours and row.cudnn is None:
        yield "a cudnn flavour needs the cudnn version inside it"
    if row.cudnn is not None and "cudnn" not in row.flavours:
        yield "cudnn is set but the cudnn flavour is not listed"
    if not _version_ok(row.cudnn) or not _version_ok(row.nccl):
        yield "cudnn and nccl must be versions like '9.8.0.87'"
    if not re.match(r"^cudnn\d*$", row.cudnn_tag):
        yield f"cudnn_tag {row.cudnn_tag!r} must be 'cudnn', 'cudnn8' or 'cudnn9'"
    m = _REQUIRE_CUDA_RE.match(row.require_cuda)
    if not m:
        yield (
            f"require_cuda {row.require_cuda!r} must be 'cuda>=X.Y' followed by "
            "' brand=<b>,driver>=N,driver<M' clauses"
        )
    elif _version_ok(row.cuda, parts=(3,)) and m.group(1) != _minor_of(row.cuda):
        yield f"require_cuda says cuda>={m.group(1)} but the image is CUDA {row.cuda}"
    for combo in row.missing:
        mm = _FLAVOUR_OS_RE.match(combo)
        if not mm or mm.group(1) not in row.flavours or mm.group(2) not in row.oses:
            yield f"missing {combo!r} must be '<flavour>-<os>' of the listed flavours and oses"


def _check_os(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, OsImage)
    yield from _common(row)
    if not _MAJOR_MINOR_RE.match(row.python):
        yield f"python {row.python!r} must be major.minor like '3.11'"
    if not row.python_packages:
        yield "python_packages is empty"
    if ":" not in row.image:
        yield f"image {row.image!r} must be a tagged reference like 'debian:bookworm-slim'"


def _check_host_platform(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, HostPlatform)
    yield from _common(row)
    if row.platform not in PLATFORMS:
        yield f"platform {row.platform!r} must be one of {', '.join(PLATFORMS)}"
    if not row.gpus or any(not g.strip() for g in row.gpus):
        yield "gpus must list GPU names"
    if row.jetpack_index is not None and not row.jetpack_index.startswith("https://"):
        yield f"jetpack_index {row.jetpack_index!r} must be an https:// URL"


def _check_other_vendor(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, OtherVendorGpu)
    yield from _common(row)
    if not row.vendor.strip() or not row.gpus or any(not g.strip() for g in row.gpus):
        yield "vendor and gpus (names) are required"


def _check_issue(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, KnownIssue)
    yield from _common(row)
    if not _spec_ok(row.versions):
        yield f"versions {row.versions!r} is not a version range like '>=2.16'"
    if not row.archs or any(not _SM_RE.match(a) or not a.startswith("sm_") for a in row.archs):
        yield "archs must list target architectures like 'sm_120'"
    if row.effect not in ISSUE_EFFECTS:
        yield f"effect {row.effect!r} must be one of {', '.join(ISSUE_EFFECTS)}"
    if not row.reason.strip():
        yield "reason is missing"


def _check_baseline(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, GpuBaseline)
    yield from _common(row)
    for what, v in (
        ("bf16_tflops", row.bf16_tflops),
        ("mem_bw_tbs", row.mem_bw_tbs),
        ("datasheet_bf16_tflops", row.datasheet_bf16_tflops),
        ("datasheet_mem_bw_tbs", row.datasheet_mem_bw_tbs),
        ("nvlink_busbw_gbs", row.nvlink_busbw_gbs),
    ):
        if v is not None and not v > 0:
            yield f"{what} must be > 0"


def _check_ngc(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, NgcImage)
    yield from _common(row)
    if not _TAGGED_REF_RE.match(row.image):
        yield f"image {row.image!r} must be a tagged reference like 'nvcr.io/nvidia/pytorch:25.12-py3'"
    elif not _RELEASE_RE.match(row.release):
        yield f"release {row.release!r} must be NGC's yy.mm like '25.12'"
    elif not row.image.rsplit(":", 1)[1].startswith(f"{row.release}-"):
        yield f"image {row.image!r} is not tagged with release {row.release}"
    if not _NAME_RE.match(row.framework):
        yield f"framework {row.framework!r} must be a lower-case name like 'torch'"
    try:
        _ver(row.framework_version)
    except InvalidVersion:
        yield f"framework_version {row.framework_version!r} is not a version (PEP 440)"
    if not _version_ok(row.cuda, parts=(3,)):
        yield f"cuda {row.cuda!r} must be a full release like '13.1.0'"
    if row.python is not None and not _MAJOR_MINOR_RE.match(row.python):
        yield f"python {row.python!r} must be major.minor like '3.12'"
    if row.os is not None and not _OS_RE.match(row.os):
        yield f"os {row.os!r} must look like 'ubuntu24.04'"
    if not _version_ok(row.cudnn) or not _version_ok(row.nccl):
        yield "cudnn and nccl must be versions like '9.17.0.29'"
    for drv in (row.driver, *row.compat_drivers):
        if drv is not None and not _DRIVER_RE.match(drv):
            yield f"driver {drv!r} is not a driver version like '570' or '535.86'"
    if row.min_cc is not None and not _CC_RE.match(row.min_cc):
        yield f"min_cc {row.min_cc!r} must look like '7.5'"


def _check_listed_gpu(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, ListedGpu)
    yield from _common(row)
    if not gpu_name_words(row.name):
        yield f"name {row.name!r} has no letters or digits after the brand words"
    if not _CC_RE.match(row.cc):
        yield f"cc {row.cc!r} must look like '7.5'"
    if row.segment not in GPU_SEGMENTS:
        yield f"segment {row.segment!r} must be one of {', '.join(GPU_SEGMENTS)}"


_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_PBS_RELEASE_RE = re.compile(r"^\d{8}$")
_PBS_URL = "https://github.com/astral-sh/python-build-standalone/releases/download/"
"""Where uv's metadata points every CPython archive; `UV_PYTHON_INSTALL_MIRROR` replaces this
prefix at build time (https://docs.astral.sh/uv/reference/environment/)."""


def _check_python_build(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, PythonBuild)
    yield from _common(row)
    if not re.match(r"^3\.\d{1,2}t?$", row.python):
        yield f"python {row.python!r} must be major.minor, 't' for free-threaded: '3.14t'"
    minor = row.python.removesuffix("t")
    if not _version_ok(row.version, parts=(3,)) or _minor_of(row.version) != minor:
        yield f"version {row.version!r} must be a CPython {minor}.x release like '{minor}.1'"
    if row.platform not in PLATFORMS:
        yield f"platform {row.platform!r} must be one of {', '.join(PLATFORMS)}"
    if row.libc not in PYTHON_LIBCS:
        yield f"libc {row.libc!r} must be one of {', '.join(PYTHON_LIBCS)}"
    variant = "+freethreaded" if row.python.endswith("t") else ""
    want = f"cpython-{row.version}{variant}-linux-{row.platform}-{row.libc}"
    if row.uv_key != want:
        yield f"uv_key {row.uv_key!r} must be {want!r} (uv's key of that build)"
    if not _PBS_RELEASE_RE.match(row.release):
        yield f"release {row.release!r} must be a python-build-standalone tag like '20260814'"
    if not row.url.startswith(f"{_PBS_URL}{row.release}/") or not row.url.endswith(
        (".tar.gz", ".tar.zst")
    ):
        yield f"url {row.url!r} must be a {_PBS_URL}{row.release}/ archive (.tar.gz, .tar.zst)"
    elif any(c in row.url for c in " \"'\\$`\n"):
        yield f"url {row.url!r} has a character no URL of uv's metadata has"
    if not _SHA256_RE.match(row.sha256):
        yield f"sha256 {row.sha256!r} must be 64 lower-case hex digits"


_ROW_CHECKS: dict[type, Callable[[AnyRow], Iterable[str]]] = {
    CudaRelease: _check_cuda,
    Arch: _check_arch,
    FrameworkRelease: _check_release,
    FrameworkBuild: _check_build,
    LibRelease: _check_lib,
    CudaImage: _check_image,
    OsImage: _check_os,
    GpuBaseline: _check_baseline,
    HostPlatform: _check_host_platform,
    OtherVendorGpu: _check_other_vendor,
    KnownIssue: _check_issue,
    NgcImage: _check_ngc,
    ListedGpu: _check_listed_gpu,
    PythonBuild: _check_python_build,
}


# --- cross-file checks ---------------------------------------------------------------------------


def _norm_gpu(name: str) -> str:
    return "".join(gpu_name_words(name))


def _arch_targetable(arch: Arch, cuda: str) -> bool:
    mm = Version(_minor_of(cuda))
    if arch.first_cuda is not None and mm < Version(arch.first_cuda):
        return False
    return not (arch.last_cuda is not None and mm > Version(arch.last_cuda))


def check_matrix(matrix: Matrix) -> list[str]:
    """Contradictions and dangling references between rows (pure). Each line names file and
    row: "matrix/torch.toml: build[12] (torch ==2.7.* cu128): ..."."""
    releases: dict[str, list[FrameworkRelease]] = {}
    for release in matrix.releases:
        releases.setdefault(release.framework, []).append(release)
    out = list(_arch_problems(matrix))
    defaults = [o for o in matrix.os_images if o.default]
    if matrix.os_images and len(defaults) != 1:
        out.append(
            f"os_images.toml: exactly one [[os]] row must have default = true "
            f"(found {len(defaults)})"
        )
    arch_by_number = {int(a.sm.split("_")[1]): a for a in matrix.archs if _SM_RE.match(a.sm)}
    for build in matrix.builds:
        out.extend(_build_problems(matrix, build, arch_by_number, releases))
    out.extend(_pypi_default_problems(matrix, releases))
    out.extend(_cuda_image_problems(matrix))
    out.extend(_gpu_name_problems(matrix))
    out.extend(_listed_gpu_problems(matrix))
    out.extend(_ngc_problems(matrix, releases))
    return out


def _ngc_problems(matrix: Matrix, releases: dict[str, list[FrameworkRelease]]) -> Iterable[str]:
    """An NGC image's CUDA and framework against the other files; its cuDNN/NCCL against
    the CUDA ranges of their rows."""
    for row in matrix.ngc_images:
        if matrix.cuda_release(row.cuda) is None:
            yield f"{matrix.where(row)}: cuda {row.cuda} is not in cuda.toml"
        if releases and row.framework not in releases:
            yield f"{matrix.where(row)}: framework {row.framework!r} has no <framework>.toml"
        for lib_name, version in (("cudnn", row.cudnn), ("nccl", row.nccl)):
            lib = _lib_match(matrix.libs, lib_name, version) if version else None
            if lib is not None and not _spec(lib.cuda).contains(_ver(row.cuda), prereleases=True):
                yield (
                    f"{matrix.where(row)}: {lib_name} {version} has builds for CUDA {lib.cuda} "
                    f"only ({matrix.where(lib)})"
                )


def _gpu_name_problems(matrix: Matrix) -> Iterable[str]:
    """Host-platform names must be GPU names of some arch; another vendor's names must not."""
    known = {_norm_gpu(g) for a in matrix.archs for g in a.gpus}
    for row in matrix.host_platforms:
        for gpu in row.gpus:
            if _norm_gpu(gpu) not in known:
                yield f"{matrix.where(row)}: GPU {gpu!r} is not a name under any [[arch]]"
    for other in matrix.other_vendors:
        for gpu in other.gpus:
            if _norm_gpu(gpu) in known:
                yield f"{matrix.where(other)}: {gpu!r} is also an NVIDIA GPU name in [[arch]]"


def _listed_gpu_problems(matrix: Matrix) -> Iterable[str]:
    """NVIDIA's list and the [[arch]] names must agree: one name, one compute capability."""
    named = {_norm_gpu(g): a.cc for a in matrix.archs for g in a.gpus}
    seen: dict[str, ListedGpu] = {}
    for row in matrix.listed_gpus:
        norm = _norm_gpu(row.name)
        first = seen.setdefault(norm, row)
        if first is not row:
            yield f"{matrix.where(row)}: {row.name!r} is listed twice (also {matrix.where(first)})"
        cc = named.get(norm)
        if cc is not None and cc != row.cc:
            yield f"{matrix.where(row)}: {row.name!r} is compute capability {cc} in gpus.toml"


def _arch_problems(matrix: Matrix) -> Iterable[str]:
    """A GPU name listed under two archs; a rename to a missing or overlapping arch."""
    where = matrix.where
    names: dict[str, Arch] = {}
    for arch in matrix.archs:
        for gpu in arch.gpus:
            other = names.get(_norm_gpu(gpu))
            if other is not None and other is not arch:
                yield f"{where(arch)}: GPU name {gpu!r} is also listed under {other.sm}"
            names[_norm_gpu(gpu)] = arch
        if arch.renamed_to is None:
            continue
        new = matrix.arch(arch.renamed_to)
        if new is None:
            yield f"{where(arch)}: renamed_to {arch.renamed_to} is not in gpus.toml"
        elif (
            arch.last_cuda and new.first_cuda and Version(new.first_cuda) <= Version(arch.last_cuda)
        ):
            yield (
                f"{where(arch)}: renamed_to {new.sm} starts in CUDA {new.first_cuda}, "
                f"not after this arch's last_cuda {arch.last_cuda}"
            )


def _build_problems(
    matrix: Matrix,
    build: FrameworkBuild,
    arch_by_number: dict[int, Arch],
    releases: dict[str, list[FrameworkRelease]],
) -> Iterable[str]:
    """One build's CUDA, archs, cuDNN/NCCL and covered releases against the other files."""
    where = matrix.where
    if build.cuda is not None and matrix.cuda_release(build.cuda) is None:
        yield f"{where(build)}: cuda {build.cuda} is not in cuda.toml"
    for arch_text in build.archs:
        match = _SM_RE.match(arch_text)
        if not match:
            continue
        arch = arch_by_number.get(int(match.group(2)))
        if arch is None:
            yield f"{where(build)}: arch {arch_text} is not in gpus.toml"
        elif build.cuda is not None and not _arch_targetable(arch, build.cuda):
            span = f"{arch.first_cuda or 'before the matrix'}..{arch.last_cuda or 'now'}"
            yield (
                f"{where(build)}: arch {arch_text} cannot be built with CUDA {build.cuda} "
                f"(gpus.toml: {arch.sm} is targetable by CUDA {span})"
            )
    for lib_name, version in (("cudnn", build.cudnn), ("nccl", build.nccl)):
        if version is None or build.cuda is None:
            continue
        lib = _lib_match(matrix.libs, lib_name, version)
        if lib is not None and not _spec(lib.cuda).contains(_ver(build.cuda), prereleases=True):
            yield (
                f"{where(build)}: {lib_name} {version} has builds for CUDA {lib.cuda} only, "
                f"not CUDA {build.cuda} ({where(lib)})"
            )
    covered = [
        release
        for release in releases.get(build.framework, [])
        if _spec_ok(build.versions) and _spec(build.versions).contains(_ver(release.version))
    ]
    if build.framework in releases and not covered:
        yield f"{where(build)}: versions {build.versions} covers no [[release]] of {build.framework}"


def _pypi_default_problems(
    matrix: Matrix, releases: dict[str, list[FrameworkRelease]]
) -> Iterable[str]:
    """One PyPI default per release and platform: what a plain `pip install` gets is one thing."""
    for framework, framework_releases in sorted(releases.items()):
        for release in framework_releases:
            version = _ver(release.version)
            for platform in PLATFORMS:
                defaults = [
                    build
                    for build in matrix.builds
                    if build.framework == framework
                    and build.pypi_default
                    and platform in build.platforms
                    and _spec(build.versions).contains(version, prereleases=True)
                ]
                if len(defaults) > 1:
                    rows = ", ".join(build.variant for build in defaults)
                    yield (
                        f"{matrix.where(release)}: more than one pypi_default build on "
                        f"{platform} ({rows})"
                    )


def _cuda_image_problems(matrix: Matrix) -> Iterable[str]:
    """An `nvidia/cuda` image's CUDA, OS names and cuDNN against the other files."""
    where = matrix.where
    os_names = {o.os for o in matrix.os_images}
    for image in matrix.cuda_images:
        if matrix.cuda_release(image.cuda) is None or image.cuda.count(".") != 2:
            yield f"{where(image)}: cuda {image.cuda} is not in cuda.toml"
        for os_name in image.oses:
            if os_name not in os_names:
                yield f"{where(image)}: os {os_name} is not in os_images.toml"
        if image.cudnn is not None:
            lib = _lib_match(matrix.libs, "cudnn", image.cudnn)
            if lib is not None and not _spec(lib.cuda).contains(_ver(image.cuda), prereleases=True):
                yield (
                    f"{where(image)}: cudnn {image.cudnn} has builds for CUDA {lib.cuda} only "
                    f"({where(lib)})"
                )


def matrix_warnings(matrix: Matrix) -> list[str]:
    """Gaps that are not contradictions: a build's cuDNN/NCCL with no row in cudnn.toml /
    nccl.toml, a release no build covers. Printed by `matrix check`; never fatal."""
    out: list[str] = []
    w = matrix.where
    for b in matrix.builds:
        for lib_name, v in (("cudnn", b.cudnn), ("nccl", b.nccl)):
            if v is not None and _lib_match(matrix.libs, lib_name, v) is None:
                out.append(f"{w(b)}: {lib_name} {v} has no row in {lib_name}.toml")
    for r in matrix.releases:
        if not matrix.builds_for(r.framework, r.version):
            out.append(f"{w(r)}: no [[build]] covers this release")
    images: tuple[CudaImage | NgcImage, ...] = (*matrix.cuda_images, *matrix.ngc_images)
    for img in images:
        for lib_name, v in (("cudnn", img.cudnn), ("nccl", img.nccl)):
            if v is not None and _lib_match(matrix.libs, lib_name, v) is None:
                out.append(f"{w(img)}: {lib_name} {v} has no row in {lib_name}.toml")
    return out
