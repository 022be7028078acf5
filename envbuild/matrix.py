"""The compatibility matrix: row types, strict parsing and cross-checks (pure), loading (thin I/O).

One concern per file under `matrix/` (see matrix/README.md for the schema of each file).
Every row carries `source` (and `confidence` where the source is secondary). Rows have a
stable `key` ("cuda:12.8.1", "build:torch:==2.7.*:cu128") and a `fingerprint` (sha256 of the
row's canonical JSON); a lock's input hash covers the fingerprints of the rows its stack used,
so editing one of those rows makes the lock stale and editing any other row does not.

Layers: the row dataclasses and `parse_matrix` / `check_matrix` / `matrix_warnings` are pure
(text in, values or problem lines out); `load_matrix` is the only function that reads files.
TOML is parsed with the standard library's `tomllib` where it exists (Python >= 3.11; about
20x faster than tomlkit on the shipped matrix) and with tomlkit on 3.10.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuild.errors import MatrixError

MATRIX_SCHEMA_VERSION = 1
"""The newest `schema_version` of a matrix file this envbuild reads."""

CONFIDENCES = ("high", "medium", "low")
IMAGE_FLAVOURS = ("base", "runtime", "cudnn", "devel")
PLATFORMS = ("x86_64", "aarch64")
OVERLAY_ENV = "ENVBUILD_MATRIX_OVERLAY"


@functools.lru_cache(maxsize=4096)
def _spec(text: str) -> SpecifierSet:
    """Parsed specifier, cached: the cross-checks test every release against every build."""
    spec = SpecifierSet(text)
    try:
        # Bounds parse lazily; one comparison now turns a bound past Python's int-string
        # limit (4300 digits: a plain ValueError) into InvalidSpecifier (tests/reliability).
        for one in spec:
            one.contains("0", prereleases=True)
    except ValueError as exc:
        raise InvalidSpecifier(str(exc)) from None
    return spec


@functools.lru_cache(maxsize=4096)
def _ver(text: str) -> Version:
    try:
        return Version(text)
    except ValueError as exc:  # also a part past the 4300-digit int limit (tests/reliability)
        raise InvalidVersion(str(exc)) from None


def fingerprint_of(row: object) -> str:
    """sha256 of a row's canonical JSON (sorted keys, no whitespace)."""
    data = asdict(row)  # type: ignore[call-overload]
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# --- row types ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CudaRelease:
    """One CUDA toolkit release and its two driver floors (Linux x86_64)."""

    version: str
    """ "12.8.1"."""
    toolkit_driver: str
    """Minimum driver for the full toolkit ("Toolkit Driver Version" in NVIDIA's table)."""
    minor_compat_driver: str | None
    """Minor-version-compatibility minimum for the major; None for CUDA < 11."""
    source: str
    confidence: str = "high"
    note: str = ""

    @property
    def key(self) -> str:
        return f"cuda:{self.version}"


@dataclass(frozen=True)
class Arch:
    """One compute capability."""

    cc: str
    """ "9.0"."""
    sm: str
    """ "sm_90"."""
    family: str
    """ "Hopper"."""
    gpus: tuple[str, ...]
    """Names users type: "H100", "H200", "RTX 4090" (matched case- and space-insensitively)."""
    first_cuda: str | None
    """The first CUDA (major.minor) whose nvcc can target it; None = before the matrix starts."""
    last_cuda: str | None
    """The last CUDA (major.minor) that can target it; None = still supported."""
    source: str
    confidence: str = "high"
    renamed_to: str | None = None
    """The sm name the same silicon has from a later CUDA on (sm_101 -> sm_110 in CUDA 13.0)."""
    note: str = ""

    @property
    def key(self) -> str:
        return f"arch:{self.sm}"


@dataclass(frozen=True)
class FrameworkRelease:
    """One release of a framework on PyPI."""

    framework: str
    version: str
    """Exact "2.7.1"."""
    python: str
    """Specifier of the Pythons with Linux wheels: ">=3.9,<3.14"."""
    source: str
    confidence: str = "high"
    yanked: bool = False
    note: str = ""
    seen: str | None = None
    """ "YYYY-MM-DD" a refresh (`envbuild matrix refresh`) read this row from its source."""

    @property
    def key(self) -> str:
        return f"release:{self.framework}:{self.version}"


@dataclass(frozen=True)
class FrameworkBuild:
    """One CUDA (or CPU) variant of a framework over a range of its releases."""

    framework: str
    versions: str
    """Specifier of the releases this row covers: "==2.7.*"."""
    variant: str
    """ "cu128", "cpu", "cuda12", "and-cuda"."""
    cuda: str | None
    """The CUDA the build was made with: "12.8.1", or "12.8" where the update is not known
    (then `Matrix.cuda_release` answers with the newest 12.8.x row: the conservative floor)."""
    cudnn: str | None
    nccl: str | None
    archs: tuple[str, ...]
    """Cubins "sm_80" and PTX "compute_120" the build carries; empty for CPU builds."""
    requirement: str
    """What pip installs, with {version}: "torch=={version}", "jax[cuda12]=={version}"."""
    index_url: str | None
    """None = PyPI."""
    pypi_default: bool
    source: str
    confidence: str = "high"
    platforms: tuple[str, ...] = ("x86_64",)
    python: str | None = None
    """Extra Python restriction of this build, beyond the release's."""
    note: str = ""
    seen: str | None = None
    """ "YYYY-MM-DD" a refresh (`envbuild matrix refresh`) read this row from its source."""

    @property
    def key(self) -> str:
        return f"build:{self.framework}:{self.versions}:{self.variant}"


@dataclass(frozen=True)
class LibRelease:
    """A cuDNN or NCCL release and the CUDA majors/GPUs it supports."""

    library: str
    """ "cudnn" or "nccl"."""
    version: str
    """A release ("9.10.2") or a full build number ("9.10.2.21"); builds match it by prefix."""
    cuda: str
    """Specifier of the CUDA versions it has builds for."""
    source: str
    min_cc: str | None = None
    max_cc: str | None = None
    confidence: str = "high"
    note: str = ""

    @property
    def key(self) -> str:
        return f"{self.library}:{self.version}"


@dataclass(frozen=True)
class CudaImage:
    """A family of `nvidia/cuda` tags for one CUDA version."""

    cuda: str
    """ "12.8.1"."""
    oses: tuple[str, ...]
    """ "ubuntu24.04", "ubuntu22.04", ..."""
    flavours: tuple[str, ...]
    """Of base, runtime, cudnn, devel."""
    cudnn: str | None
    """cuDNN inside the cudnn/devel-cudnn flavours."""
    require_cuda: str
    """The image's published `NVIDIA_REQUIRE_CUDA` ("cuda>=12.8 brand=tesla,driver>=470,...")."""
    source: str
    confidence: str = "high"
    cudnn_tag: str = "cudnn"
    """The tag word of the cuDNN flavours: "cudnn8" (<= 12.2), "cudnn9" (12.3.2), "cudnn"."""
    nccl: str | None = None
    """NCCL (libnccl2) inside the runtime/devel flavours."""
    missing: tuple[str, ...] = ()
    """"<flavour>-<os>" combinations NVIDIA does not publish ("cudnn-ubuntu24.04")."""
    note: str = ""

    @property
    def key(self) -> str:
        return f"image:nvidia/cuda:{self.cuda}"

    def has(self, flavour: str, os: str) -> bool:
        """True when the tag for this flavour and OS is published."""
        return (
            flavour in self.flavours and os in self.oses and f"{flavour}-{os}" not in self.missing
        )

    def ref(self, flavour: str, os: str) -> str:
        # Tag scheme: <version>-<flavour>-<os>; the cudnn flavour is "<cudnn_tag>-runtime"
        # (cudnn8-runtime <= 12.2, cudnn9-runtime 12.3.2, cudnn-runtime from 12.4.1); source:
        # hub.docker.com/r/nvidia/cuda supported tags (matrix/cuda_images.toml [scheme]).
        tag_flavour = f"{self.cudnn_tag}-runtime" if flavour == "cudnn" else flavour
        return f"nvidia/cuda:{self.cuda}-{tag_flavour}-{os}"


@dataclass(frozen=True)
class OsImage:
    """A plain OS base and how Python is installed on it."""

    os: str
    """ "debian12", "ubuntu24.04"."""
    image: str
    """ "debian:bookworm-slim"."""
    python: str
    """The Python the OS packages ship ("3.11")."""
    python_packages: tuple[str, ...]
    """OS packages that give a venv-capable Python ("python3", "python3-venv")."""
    source: str
    default: bool = False
    confidence: str = "high"
    note: str = ""

    @property
    def key(self) -> str:
        return f"os:{self.os}"


@dataclass(frozen=True)
class GpuBaseline:
    """A healthy GPU's measured throughput; the smoke floor is 0.75 x these (DCGM policy)."""

    gpu: str
    """Name as NVML reports it, matched by substring: "H200"."""
    bf16_tflops: float
    mem_bw_tbs: float
    source: str
    datasheet_bf16_tflops: float | None = None
    datasheet_mem_bw_tbs: float | None = None
    confidence: str = "high"
    note: str = ""

    @property
    def key(self) -> str:
        return f"baseline:{self.gpu}"


Row = CudaRelease | Arch | FrameworkRelease | FrameworkBuild | LibRelease | CudaImage
AnyRow = Row | OsImage | GpuBaseline


@dataclass(frozen=True)
class Matrix:
    """The whole matrix, parsed and cross-checked."""

    cuda: tuple[CudaRelease, ...] = ()
    archs: tuple[Arch, ...] = ()
    releases: tuple[FrameworkRelease, ...] = ()
    builds: tuple[FrameworkBuild, ...] = ()
    libs: tuple[LibRelease, ...] = ()
    cuda_images: tuple[CudaImage, ...] = ()
    os_images: tuple[OsImage, ...] = ()
    baselines: tuple[GpuBaseline, ...] = ()
    schema_version: int = 1
    origins: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    """row key -> "file: table[n] (label)" where it was read (for messages)."""

    def fingerprints(self) -> dict[str, str]:
        """row key -> fingerprint, for every row."""
        out: dict[str, str] = {}
        for group in self._groups():
            for row in group:
                out[row.key] = fingerprint_of(row)
        return out

    def _groups(self) -> tuple[tuple[AnyRow, ...], ...]:
        return (
            self.cuda,
            self.archs,
            self.releases,
            self.builds,
            self.libs,
            self.cuda_images,
            self.os_images,
            self.baselines,
        )

    def counts(self) -> dict[str, int]:
        """Rows per kind (the one-line summary of `envbuild matrix check`)."""
        return {
            "cuda": len(self.cuda),
            "archs": len(self.archs),
            "releases": len(self.releases),
            "builds": len(self.builds),
            "cudnn": sum(1 for lib in self.libs if lib.library == "cudnn"),
            "nccl": sum(1 for lib in self.libs if lib.library == "nccl"),
            "cuda_images": len(self.cuda_images),
            "os_images": len(self.os_images),
            "baselines": len(self.baselines),
        }

    def where(self, row: AnyRow) -> str:
        """ "matrix/torch.toml: build[12] (torch ==2.7.* cu128)", or the key without origin."""
        return self.origins.get(row.key, row.key)

    # Lookups the resolver and others use; all pure.

    def cuda_release(self, version: str) -> CudaRelease | None:
        """The row of an exact CUDA version ("12.8.1"); for "12.8" the newest 12.8.x row,
        whose toolkit driver is the highest of that minor (the conservative floor)."""
        exact = [c for c in self.cuda if c.version == version]
        if exact:
            return exact[0]
        if version.count(".") == 1:
            same = [c for c in self.cuda if _minor_of(c.version) == version]
            if same:
                return max(same, key=lambda c: Version(c.version))
        return None

    def arch(self, sm_or_cc: str) -> Arch | None:
        """The arch row for "sm_90" or "9.0"."""
        for a in self.archs:
            if sm_or_cc in (a.sm, a.cc):
                return a
        return None

    def releases_of(self, framework: str) -> tuple[FrameworkRelease, ...]:
        return tuple(r for r in self.releases if r.framework == framework)

    def builds_for(self, framework: str, version: str) -> tuple[FrameworkBuild, ...]:
        """The builds whose `versions` specifier contains this exact release."""
        v = _ver(version)
        return tuple(
            b
            for b in self.builds
            if b.framework == framework and _spec(b.versions).contains(v, prereleases=True)
        )

    def lib(self, library: str, version: str) -> LibRelease | None:
        """The cudnn/nccl row a build's version refers to: exact, else the longest row whose
        version is a release prefix of it ("9.10.2" covers "9.10.2.21")."""
        return _lib_match(self.libs, library, version)


# --- parsing -------------------------------------------------------------------------------------

_CORE_FILES = (
    "cuda.toml",
    "gpus.toml",
    "cudnn.toml",
    "nccl.toml",
    "cuda_images.toml",
    "os_images.toml",
    "baselines.toml",
)
_SM_RE = re.compile(r"^(sm|compute)_(\d+)([af]?)$")
_CC_RE = re.compile(r"^\d+\.\d$")
_MAJOR_MINOR_RE = re.compile(r"^\d+\.\d+$")
# Bounded parts: NVIDIA driver parts have at most 3 digits (570.124.06); an unbounded run
# would pass here and then crash Version() past Python's 4300-digit int limit in the resolver
# (tests/reliability/test_bad_input.py::test_mutated_matrix_file, case huge driver).
_DRIVER_RE = re.compile(r"^\d{1,6}(\.\d{1,6}){0,2}$")
_REQUIRE_CUDA_RE = re.compile(r"^cuda>=(\d+\.\d+)((?: brand=[a-z]+,driver>=\d+,driver<\d+)*)$")
_FLAVOUR_OS_RE = re.compile(r"^(base|runtime|cudnn|devel)-(.+)$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*$")


@dataclass
class _Row:
    """One parsed row with where it came from (file display name, table, 1-based index)."""

    row: AnyRow
    file: str
    table: str
    index: int

    @property
    def where(self) -> str:
        return f"{self.file}: {self.table}[{self.index}] ({_label(self.row)})"


@dataclass
class _Collected:
    rows: list[_Row] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _label(row: AnyRow) -> str:
    if isinstance(row, CudaRelease):
        return f"cuda {row.version}"
    if isinstance(row, Arch):
        return row.sm
    if isinstance(row, FrameworkRelease):
        return f"{row.framework} {row.version}"
    if isinstance(row, FrameworkBuild):
        return f"{row.framework} {row.versions} {row.variant}"
    if isinstance(row, LibRelease):
        return f"{row.library} {row.version}"
    if isinstance(row, CudaImage):
        return f"nvidia/cuda {row.cuda}"
    if isinstance(row, OsImage):
        return row.os
    return row.gpu


def parse_toml(text: str, *, name: str) -> dict[str, Any]:
    """TOML text -> plain Python data; MatrixError (exit 2) naming the file when invalid."""
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise _toml_error(name, exc) from None
    import tomlkit  # Python 3.10: no tomllib, and tomli is not a dependency
    from tomlkit.exceptions import TOMLKitError

    try:
        data: dict[str, Any] = tomlkit.parse(text).unwrap()
    except (TOMLKitError, ValueError) as exc:
        raise _toml_error(name, exc) from None
    return data


def _toml_error(name: str, exc: Exception) -> MatrixError:
    return MatrixError(
        f"{name}: not valid TOML: {exc}",
        hint=f"fix the TOML syntax of {name} (a truncated file or a stray character)",
        fields={"file": name},
    )


def parse_matrix(files: Mapping[str, str]) -> Matrix:
    """Parse and cross-check matrix files (display name -> TOML text). Pure and strict: any
    problem raises MatrixError whose message names file and row; all problems are in
    `fields["problems"]`."""
    matrix, problems, _ = collect(files, warnings=False)
    if problems:
        raise _problems_error(problems)
    return matrix


def collect(
    files: Mapping[str, str],
    overlay: Mapping[str, str] | None = None,
    *,
    warnings: bool = True,
) -> tuple[Matrix, list[str], list[str]]:
    """Parse built-in files and an optional overlay, merge, cross-check; never raises for a
    problem inside a row. Returns (matrix of the rows that parsed, problems, warnings).
    Raises MatrixError only for a file that is not TOML at all."""
    base = _collect_files(files)
    problems = list(base.problems)
    rows = _merge_unique(base.rows, problems)
    if overlay:
        extra = _collect_files(overlay)
        problems.extend(extra.problems)
        overlay_rows = _merge_unique(extra.rows, problems)
        by_key = {r.row.key: i for i, r in enumerate(rows)}
        for r in overlay_rows:
            # Same key replaces the built-in row in place; a new key adds a row (issue 10).
            if r.row.key in by_key:
                rows[by_key[r.row.key]] = r
            else:
                rows.append(r)
    matrix = _build(rows)
    problems.extend(check_matrix(matrix))
    return matrix, problems, matrix_warnings(matrix) if warnings else []


def _problems_error(problems: Sequence[str]) -> MatrixError:
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    first = problems[0]
    if len(first) > 300:  # a huge value is named by its start, not echoed (tests/reliability)
        first = f"{first[:240]}... ({len(first)} characters)"
    return MatrixError(
        f"the compatibility matrix has problems: {first}{more}",
        hint="run `envbuild matrix check` for the full list and fix those rows",
        fields={"problems": list(problems)},
    )


def _merge_unique(rows: Iterable[_Row], problems: list[str]) -> list[_Row]:
    seen: dict[str, _Row] = {}
    out: list[_Row] = []
    for r in rows:
        first = seen.get(r.row.key)
        if first is not None:
            problems.append(f"{r.where}: duplicate key {r.row.key!r}, first at {first.where}")
            continue
        seen[r.row.key] = r
        out.append(r)
    return out


def _build(rows: Sequence[_Row]) -> Matrix:
    groups: dict[type, list[Any]] = {t: [] for t in _ROW_TYPES}
    origins: dict[str, str] = {}
    for r in rows:
        groups[type(r.row)].append(r.row)
        origins[r.row.key] = r.where
    return Matrix(
        cuda=tuple(groups[CudaRelease]),
        archs=tuple(groups[Arch]),
        releases=tuple(groups[FrameworkRelease]),
        builds=tuple(groups[FrameworkBuild]),
        libs=tuple(groups[LibRelease]),
        cuda_images=tuple(groups[CudaImage]),
        os_images=tuple(groups[OsImage]),
        baselines=tuple(groups[GpuBaseline]),
        schema_version=MATRIX_SCHEMA_VERSION,
        origins=origins,
    )


_ROW_TYPES: tuple[type, ...] = (
    CudaRelease,
    Arch,
    FrameworkRelease,
    FrameworkBuild,
    LibRelease,
    CudaImage,
    OsImage,
    GpuBaseline,
)


def _collect_files(files: Mapping[str, str]) -> _Collected:
    out = _Collected()
    for name in sorted(files):
        data = parse_toml(files[name], name=name)
        _collect_file(name, data, out)
    return out


def _collect_file(name: str, data: dict[str, Any], out: _Collected) -> None:
    base = PurePosixPath(name).name
    problems = out.problems
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        problems.append(f"{name}: schema_version must be an integer (this envbuild reads 1)")
    elif version > MATRIX_SCHEMA_VERSION:
        problems.append(
            f"{name}: schema_version {version} is newer than this envbuild reads "
            f"({MATRIX_SCHEMA_VERSION}); upgrade envbuild"
        )
    elif version < 1:
        problems.append(f"{name}: schema_version must be >= 1")

    # table name -> (row builder, extra fields injected from the file)
    tables: dict[str, tuple[type, dict[str, Any]]]
    allowed_top = {"schema_version"}
    if base == "cuda.toml":
        tables = {"cuda": (CudaRelease, {})}
        allowed_top |= {"minor_compat"}
    elif base == "gpus.toml":
        tables = {"arch": (Arch, {})}
    elif base in ("cudnn.toml", "nccl.toml"):
        tables = {"release": (LibRelease, {"library": base.removesuffix(".toml")})}
    elif base == "cuda_images.toml":
        tables = {"image": (CudaImage, {})}
        allowed_top |= {"scheme"}
    elif base == "os_images.toml":
        tables = {"os": (OsImage, {})}
    elif base == "baselines.toml":
        tables = {"baseline": (GpuBaseline, {})}
    elif "framework" in data:
        fw = data["framework"]
        allowed_top |= {"framework"}
        if not isinstance(fw, str) or not _NAME_RE.match(fw):
            problems.append(f"{name}: framework must be a lower-case name like 'torch'")
            return
        if base != f"{fw}.toml":
            problems.append(f"{name}: a framework file must be named {fw}.toml")
        tables = {
            "release": (FrameworkRelease, {"framework": fw}),
            "build": (FrameworkBuild, {"framework": fw}),
        }
    else:
        known = ", ".join(_CORE_FILES)
        problems.append(
            f"{name}: unknown matrix file (expected one of {known}, or <framework>.toml "
            "with a top-level framework key)"
        )
        return

    for key in sorted(data):
        if key not in allowed_top and key not in tables:
            problems.append(f"{name}: unknown top-level key {key!r}")

    minor_compat: dict[int, str] = {}
    if base == "cuda.toml":
        minor_compat = _minor_compat_table(name, data.get("minor_compat", []), problems)
    if base == "cuda_images.toml":
        _check_scheme(name, data.get("scheme"), problems)

    for table, (cls, injected) in tables.items():
        raw_rows = data.get(table, [])
        if not isinstance(raw_rows, list) or not all(isinstance(r, dict) for r in raw_rows):
            problems.append(f"{name}: {table} must be an array of tables ([[{table}]])")
            continue
        for i, raw in enumerate(raw_rows, start=1):
            raw = dict(raw)
            if cls is CudaRelease and "minor_compat_driver" not in raw:
                major = _major_of(raw.get("version"))
                if major is not None and major in minor_compat:
                    raw["minor_compat_driver"] = minor_compat[major]
            where = f"{name}: {table}[{i}] ({_raw_label(cls, raw, injected)})"
            row = _make_row(cls, raw, injected, where, problems)
            if row is not None:
                out.rows.append(_Row(row, name, table, i))


def _raw_label(cls: type, raw: dict[str, Any], injected: dict[str, Any]) -> str:
    def g(k: str) -> str:
        v = raw.get(k, injected.get(k, "?"))
        return str(v)

    if cls is CudaRelease:
        return f"cuda {g('version')}"
    if cls is Arch:
        return g("sm")
    if cls is FrameworkRelease:
        return f"{g('framework')} {g('version')}"
    if cls is FrameworkBuild:
        return f"{g('framework')} {g('versions')} {g('variant')}"
    if cls is LibRelease:
        return f"{g('library')} {g('version')}"
    if cls is CudaImage:
        return f"nvidia/cuda {g('cuda')}"
    if cls is OsImage:
        return g("os")
    return g("gpu")


def _major_of(version: object) -> int | None:
    if isinstance(version, str) and re.match(r"^\d+\.", version):
        return int(version.split(".", 1)[0])
    return None


def _minor_of(version: str) -> str:
    parts = version.split(".")
    return ".".join(parts[:2])


def _minor_compat_table(name: str, raw: object, problems: list[str]) -> dict[int, str]:
    out: dict[int, str] = {}
    if not isinstance(raw, list):
        problems.append(f"{name}: minor_compat must be an array of tables ([[minor_compat]])")
        return out
    allowed = {"major", "driver", "source", "confidence", "note"}
    for i, row in enumerate(raw, start=1):
        where = f"{name}: minor_compat[{i}]"
        if not isinstance(row, dict):
            problems.append(f"{where}: must be a table")
            continue
        for k in sorted(set(row) - allowed):
            problems.append(f"{where}: unknown key {k!r}")
        major, driver, source = row.get("major"), row.get("driver"), row.get("source")
        if not isinstance(major, int) or isinstance(major, bool):
            problems.append(f"{where}: major must be an integer")
            continue
        if not isinstance(driver, str) or not _DRIVER_RE.match(driver):
            problems.append(f"{where}: driver must be a driver version string like '525.60.13'")
            continue
        if not isinstance(source, str) or not source.strip():
            problems.append(f"{where}: source is missing")
        if major in out:
            problems.append(f"{where}: duplicate major {major}")
        out[major] = driver
    return out


def _check_scheme(name: str, raw: object, problems: list[str]) -> None:
    if raw is None:
        problems.append(f"{name}: the [scheme] table (tag format and its source) is missing")
        return
    if not isinstance(raw, dict):
        problems.append(f"{name}: scheme must be a table")
        return
    allowed = {"tag_format", "cudnn_flavour", "source", "confidence", "note"}
    for k in sorted(set(raw) - allowed):
        problems.append(f"{name}: scheme: unknown key {k!r}")
    # CudaImage.ref() implements exactly this format; a data change must come with a code change.
    if raw.get("tag_format") != "{cuda}-{flavour}-{os}":
        problems.append(f"{name}: scheme: tag_format must be '{{cuda}}-{{flavour}}-{{os}}'")
    if raw.get("cudnn_flavour") != "{cudnn_tag}-runtime":
        problems.append(f"{name}: scheme: cudnn_flavour must be '{{cudnn_tag}}-runtime'")
    if not isinstance(raw.get("source"), str) or not raw["source"].strip():
        problems.append(f"{name}: scheme: source is missing")


def _make_row(
    cls: type, raw: dict[str, Any], injected: dict[str, Any], where: str, problems: list[str]
) -> AnyRow | None:
    """Build one row: unknown keys, missing keys, wrong types, then per-field value checks.
    A row with a missing or mistyped field is dropped; a row whose only fault is an unknown key
    is kept (one typo should not also dangle every reference to the row)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for k in sorted(raw):
        if k in injected:
            problems.append(f"{where}: {k!r} is set by the file, not per row")
        elif k not in fields:
            problems.append(f"{where}: unknown key {k!r}")
    unusable = False
    values: dict[str, Any] = dict(injected)
    for fname, f in fields.items():
        if fname in injected:
            continue
        if fname not in raw:
            has_default = (
                f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            )
            optional = "None" in str(f.type)
            if not has_default and not optional:
                problems.append(f"{where}: {fname} is missing")
                unusable = True
            elif not has_default:
                values[fname] = None
            continue
        ok, value = _coerce(str(f.type), raw[fname])
        if not ok:
            problems.append(f"{where}: {fname} must be {_type_words(str(f.type))}")
            unusable = True
            continue
        values[fname] = value
    if unusable:
        return None
    row: AnyRow = cls(**values)
    before = len(problems)
    for msg in _ROW_CHECKS[cls](row):
        problems.append(f"{where}: {msg}")
    return None if len(problems) > before else row


def _coerce(type_text: str, value: Any) -> tuple[bool, Any]:
    """Check a TOML value against a dataclass field's annotation (as text, from annotations)."""
    t = type_text.replace(" ", "")
    if t == "str" or t == "str|None":
        return isinstance(value, str), value
    if t == "bool":
        return isinstance(value, bool), value
    if t == "int":
        return isinstance(value, int) and not isinstance(value, bool), value
    if t in ("float", "float|None"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if t == "tuple[str,...]":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return ok, tuple(value) if ok else value
    return False, value  # pragma: no cover - a new field type needs a case here


def _type_words(type_text: str) -> str:
    t = type_text.replace(" ", "")
    return {
        "str": "a string",
        "str|None": "a string",
        "bool": "true or false",
        "int": "an integer",
        "float": "a number",
        "float|None": "a number",
        "tuple[str,...]": "an array of strings",
    }.get(t, t)


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


def _check_release(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, FrameworkRelease)
    yield from _common(row)
    if not _version_ok(row.version):
        yield f"version {row.version!r} is not an exact release like '2.7.1'"
    if not _spec_ok(row.python):
        yield f"python {row.python!r} is not a version range like '>=3.9,<3.14'"


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


def _check_baseline(row: AnyRow) -> Iterable[str]:
    assert isinstance(row, GpuBaseline)
    yield from _common(row)
    for what, v in (
        ("bf16_tflops", row.bf16_tflops),
        ("mem_bw_tbs", row.mem_bw_tbs),
        ("datasheet_bf16_tflops", row.datasheet_bf16_tflops),
        ("datasheet_mem_bw_tbs", row.datasheet_mem_bw_tbs),
    ):
        if v is not None and not v > 0:
            yield f"{what} must be > 0"


_ROW_CHECKS: dict[type, Callable[[AnyRow], Iterable[str]]] = {
    CudaRelease: _check_cuda,
    Arch: _check_arch,
    FrameworkRelease: _check_release,
    FrameworkBuild: _check_build,
    LibRelease: _check_lib,
    CudaImage: _check_image,
    OsImage: _check_os,
    GpuBaseline: _check_baseline,
}


# --- cross-file checks ---------------------------------------------------------------------------


def _norm_gpu(name: str) -> str:
    return re.sub(r"[\s_-]+", "", name.lower())


def _lib_match(libs: Iterable[LibRelease], library: str, version: str) -> LibRelease | None:
    try:
        want = _ver(version).release
    except InvalidVersion:
        return None
    best: LibRelease | None = None
    best_len = 0
    for lib in libs:
        if lib.library != library:
            continue
        try:
            have = _ver(lib.version).release
        except InvalidVersion:
            continue
        if want[: len(have)] == have and len(have) > best_len:
            best, best_len = lib, len(have)
    return best


def _arch_targetable(arch: Arch, cuda: str) -> bool:
    mm = Version(_minor_of(cuda))
    if arch.first_cuda is not None and mm < Version(arch.first_cuda):
        return False
    return not (arch.last_cuda is not None and mm > Version(arch.last_cuda))


def check_matrix(matrix: Matrix) -> list[str]:
    """Contradictions and dangling references between rows (pure). Each line names file and
    row: "matrix/torch.toml: build[12] (torch ==2.7.* cu128): ..."."""
    out: list[str] = []
    w = matrix.where
    arch_by_num = {int(a.sm.split("_")[1]): a for a in matrix.archs if _SM_RE.match(a.sm)}
    os_names = {o.os for o in matrix.os_images}

    names: dict[str, Arch] = {}
    for a in matrix.archs:
        for g in a.gpus:
            other = names.get(_norm_gpu(g))
            if other is not None and other is not a:
                out.append(f"{w(a)}: GPU name {g!r} is also listed under {other.sm}")
            names[_norm_gpu(g)] = a
        if a.renamed_to is not None:
            new = matrix.arch(a.renamed_to)
            if new is None:
                out.append(f"{w(a)}: renamed_to {a.renamed_to} is not in gpus.toml")
            elif a.last_cuda and new.first_cuda and Version(new.first_cuda) <= Version(a.last_cuda):
                out.append(
                    f"{w(a)}: renamed_to {new.sm} starts in CUDA {new.first_cuda}, "
                    f"not after this arch's last_cuda {a.last_cuda}"
                )

    defaults = [o for o in matrix.os_images if o.default]
    if matrix.os_images and len(defaults) != 1:
        out.append(
            f"os_images.toml: exactly one [[os]] row must have default = true "
            f"(found {len(defaults)})"
        )

    releases: dict[str, list[FrameworkRelease]] = {}
    for r in matrix.releases:
        releases.setdefault(r.framework, []).append(r)

    for b in matrix.builds:
        if b.cuda is not None and matrix.cuda_release(b.cuda) is None:
            out.append(f"{w(b)}: cuda {b.cuda} is not in cuda.toml")
        for a_text in b.archs:
            m = _SM_RE.match(a_text)
            if not m:
                continue
            arch = arch_by_num.get(int(m.group(2)))
            if arch is None:
                out.append(f"{w(b)}: arch {a_text} is not in gpus.toml")
            elif b.cuda is not None and not _arch_targetable(arch, b.cuda):
                span = f"{arch.first_cuda or 'before the matrix'}..{arch.last_cuda or 'now'}"
                out.append(
                    f"{w(b)}: arch {a_text} cannot be built with CUDA {b.cuda} "
                    f"(gpus.toml: {arch.sm} is targetable by CUDA {span})"
                )
        for lib_name, v in (("cudnn", b.cudnn), ("nccl", b.nccl)):
            if v is None or b.cuda is None:
                continue
            lib = _lib_match(matrix.libs, lib_name, v)
            if lib is not None and not _spec(lib.cuda).contains(_ver(b.cuda), prereleases=True):
                out.append(
                    f"{w(b)}: {lib_name} {v} has builds for CUDA {lib.cuda} only, "
                    f"not CUDA {b.cuda} ({w(lib)})"
                )
        covered = [
            r
            for r in releases.get(b.framework, [])
            if _spec_ok(b.versions) and _spec(b.versions).contains(_ver(r.version))
        ]
        if b.framework in releases and not covered:
            out.append(f"{w(b)}: versions {b.versions} covers no [[release]] of {b.framework}")

    # One PyPI default per release and platform: what a plain `pip install` gets is one thing.
    for fw, rels in sorted(releases.items()):
        for r in rels:
            rv = _ver(r.version)
            for platform in PLATFORMS:
                defaults_b = [
                    b
                    for b in matrix.builds
                    if b.framework == fw
                    and b.pypi_default
                    and platform in b.platforms
                    and _spec(b.versions).contains(rv, prereleases=True)
                ]
                if len(defaults_b) > 1:
                    rows = ", ".join(x.variant for x in defaults_b)
                    out.append(f"{w(r)}: more than one pypi_default build on {platform} ({rows})")

    for img in matrix.cuda_images:
        if matrix.cuda_release(img.cuda) is None or img.cuda.count(".") != 2:
            out.append(f"{w(img)}: cuda {img.cuda} is not in cuda.toml")
        for o in img.oses:
            if o not in os_names:
                out.append(f"{w(img)}: os {o} is not in os_images.toml")
        if img.cudnn is not None:
            lib = _lib_match(matrix.libs, "cudnn", img.cudnn)
            if lib is not None and not _spec(lib.cuda).contains(_ver(img.cuda), prereleases=True):
                out.append(
                    f"{w(img)}: cudnn {img.cudnn} has builds for CUDA {lib.cuda} only ({w(lib)})"
                )
    return out


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
    for img in matrix.cuda_images:
        for lib_name, v in (("cudnn", img.cudnn), ("nccl", img.nccl)):
            if v is not None and _lib_match(matrix.libs, lib_name, v) is None:
                out.append(f"{w(img)}: {lib_name} {v} has no row in {lib_name}.toml")
    return out


@dataclass(frozen=True)
class MatrixReport:
    """What `envbuild matrix check` found: row counts, problems (fatal), warnings (gaps)."""

    counts: dict[str, int]
    problems: tuple[str, ...]
    warnings: tuple[str, ...]
    files: tuple[str, ...]
    overlay_files: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line: "matrix ok: 51 cuda, 24 archs, ... (10 files)"."""
        counts = ", ".join(f"{n} {k}" for k, n in self.counts.items())
        files = f"{len(self.files)} files"
        if self.overlay_files:
            files += f" + {len(self.overlay_files)} overlay files"
        state = "ok" if self.ok else f"{len(self.problems)} problems"
        return f"matrix {state}: {counts} ({files})"

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "counts": dict(self.counts),
            "problems": list(self.problems),
            "warnings": list(self.warnings),
            "files": list(self.files),
            "overlay_files": list(self.overlay_files),
        }


def check_files(files: Mapping[str, str], overlay: Mapping[str, str] | None = None) -> MatrixReport:
    """Everything `matrix check` reports about these files (pure). MatrixError only for a file
    that is not TOML at all."""
    matrix, problems, warnings = collect(files, overlay or None)
    return MatrixReport(
        counts=matrix.counts(),
        problems=tuple(problems),
        warnings=tuple(warnings),
        files=tuple(sorted(files)),
        overlay_files=tuple(sorted(overlay or {})),
    )


# --- loading (thin I/O) --------------------------------------------------------------------------

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


def overlay_dir(overlay: Path | None) -> Path | None:
    """The overlay folder: the argument, else $ENVBUILD_MATRIX_OVERLAY, else none."""
    if overlay is not None:
        return overlay
    env = os.environ.get(OVERLAY_ENV)
    return Path(env) if env else None


def load_sources(overlay: Path | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(built-in files, overlay files) as display name -> text."""
    from envbuild.resources import matrix_dir

    built_in = read_matrix_files(matrix_dir(), label="matrix")
    folder = overlay_dir(overlay)
    extra = read_matrix_files(folder, label=str(folder)) if folder is not None else {}
    return built_in, extra


def load_matrix(*, overlay: Path | None = None) -> Matrix:
    """The built-in matrix merged with the overlay (argument or ENVBUILD_MATRIX_OVERLAY),
    parsed and cross-checked; cached per process. MatrixError (exit 2) on any problem."""
    from envbuild.resources import matrix_dir

    folder = overlay_dir(overlay)
    cache_key = (str(matrix_dir().resolve()), str(folder.resolve()) if folder else "")
    cached = _CACHE.get(cache_key)
    if cached is not None:
        return cached
    built_in, extra = load_sources(folder)
    matrix, problems, _ = collect(built_in, extra or None, warnings=False)
    if problems:
        raise _problems_error(problems)
    _CACHE[cache_key] = matrix
    return matrix


def clear_cache() -> None:
    """Forget loaded matrices (tests that edit matrix files in place)."""
    _CACHE.clear()
