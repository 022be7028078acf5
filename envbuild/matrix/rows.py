"""The matrix's row types and the `Matrix` value with its lookups (pure).

One row type per table of a `matrix/*.toml` file (see matrix/README.md for the schema). Every
row carries `source` (and `confidence` where the source is secondary). Rows have a stable
`key` ("cuda:12.8.1", "build:torch:==2.7.*:cu128") and a `fingerprint` (sha256 of the row's
canonical JSON); a lock's input hash covers the fingerprints of the rows its stack used, so
editing one of those rows makes the lock stale and editing any other row does not.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuild.core.models import CUDA_FLAVOURS
from envbuild.core.models import PLATFORMS as PLATFORMS  # re-exported: build rows list these

MATRIX_SCHEMA_VERSION = 1
"""The newest `schema_version` of a matrix file this envbuild reads."""

CONFIDENCES = ("high", "medium", "low")
IMAGE_FLAVOURS = CUDA_FLAVOURS
"""The `nvidia/cuda` image flavours a cuda_images row may list (defined in models)."""


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


_LATER_FIELDS: dict[str, frozenset[str]] = {
    "Arch": frozenset({"last_driver_branch"}),
    "FrameworkRelease": frozenset({"variants_known"}),
    "FrameworkBuild": frozenset({"cudnn_range", "min_cc"}),
    "LibRelease": frozenset({"forward_compatible"}),
}
"""Fields added after the first matrix schema: they enter a row's fingerprint only when set,
so adding a field to the schema does not make every existing lock stale."""


_NOT_LOCKED: dict[str, frozenset[str]] = {
    "Arch": frozenset({"memory_gib", "memory_source"}),
    "FrameworkRelease": frozenset({"free_threaded"}),
}
"""Fields kept out of every fingerprint, so a change to them leaves every lock fresh: the memory
fit of a smoke report reads `memory_gib`, no lock decision does; `free_threaded` was added
after locks were committed and a free-threaded lock's wheels are uv's cp3XXt pins, whose
hashes the build checks (a lock of a release without them fails at `envbuild lock`)."""


def fingerprint_of(row: object) -> str:
    """sha256 of a row's canonical JSON (sorted keys, no whitespace)."""
    data = asdict(row)  # type: ignore[call-overload]
    for name in _NOT_LOCKED.get(type(row).__name__, frozenset()):
        data.pop(name, None)
    later = _LATER_FIELDS.get(type(row).__name__, frozenset())
    for f in fields(row):  # type: ignore[arg-type]
        if f.name in later and data[f.name] == f.default:
            del data[f.name]
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    import hashlib  # here: its OpenSSL start-up is a visible part of a short command's time

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
    last_driver_branch: int | None = None
    """The newest driver branch that still supports it (Kepler R470; Maxwell, Pascal, Volta
    R580); None = still supported. A driver of a later branch cannot run this GPU."""
    memory_gib: tuple[tuple[str, float], ...] = ()
    """(GPU name, memory in GiB) per model of this arch, from NVIDIA's datasheets: the name is one
    of `gpus`, optionally with its memory variant ("A100 80GB"). The memory fit of a smoke
    report (`envbuild.smoke.fit`) holds peaks against these."""
    memory_source: str = ""
    """Where memory_gib comes from (required with it: the datasheet URLs)."""

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
    variants_known: bool = True
    """False when only some of the release's CUDA variants could be read (the others exist
    but are not in the matrix): picks from it say so."""
    free_threaded: str | None = None
    """Specifier of the free-threaded Pythons with Linux wheels (ABI tag cp314t: "==3.14.*");
    None = no such wheels recorded, so a request for "3.14t" is refused for this release."""

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
    cudnn_range: str | None = None
    """The cuDNN range the build's installer resolves ("nvidia-cudnn-cu12>=9.3.0.75,<10" ->
    ">=9.3.0.75,<10"); `cudnn` is then its floor. The resolver plans with the newest cuDNN of
    the range that supports the targets."""
    min_cc: str | None = None
    """The framework's documented minimum compute capability when it is above what the archs
    imply (JAX's CUDA 12 wheels: SM 5.2 although they carry sm_50 code)."""

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
    forward_compatible: bool = False
    """cuDNN 9: a subset of operation graphs runs on GPUs newer than max_cc, so a GPU above
    it is a note, not a refusal; below min_cc is always unsupported."""

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
    nvlink_busbw_gbs: float | None = None
    """All-reduce bus bandwidth NCCL reaches over this SKU's NVLink without NVLink SHARP
    (NCCL_NVLS_ENABLE=0), nccl-tests' busbw; None where the SKU has no NVLink figure."""
    confidence: str = "high"
    note: str = ""

    @property
    def key(self) -> str:
        return f"baseline:{self.gpu}"


@dataclass(frozen=True)
class HostPlatform:
    """GPUs that only come in hosts of another CPU architecture (GH200: Grace, aarch64)."""

    gpus: tuple[str, ...]
    """Names of arch rows' `gpus` ("GH200", "DGX Spark")."""
    platform: str
    """The host's machine name (`uname -m`): "aarch64"."""
    source: str
    jetpack_index: str | None = None
    """Tegra (Jetson): where framework builds for it exist when PyPI has none."""
    confidence: str = "high"
    note: str = ""

    @property
    def key(self) -> str:
        return f"host_platform:{self.gpus[0] if self.gpus else '?'}"


@dataclass(frozen=True)
class OtherVendorGpu:
    """Accelerators that are not NVIDIA GPUs (envbuild builds CUDA images only)."""

    vendor: str
    gpus: tuple[str, ...]
    """Names or name prefixes ("MI300X", "Gaudi")."""
    source: str
    confidence: str = "high"
    note: str = ""

    @property
    def key(self) -> str:
        return f"not_nvidia:{self.vendor}"


@dataclass(frozen=True)
class KnownIssue:
    """A published failure of a framework's builds on some GPUs that the general rules would
    accept (TensorFlow's PTX failing to JIT on sm_120)."""

    framework: str
    versions: str
    """Specifier of the affected releases."""
    archs: tuple[str, ...]
    """The target architectures it hits ("sm_120")."""
    effect: str
    """"no_ptx_jit": reaching these targets through the build's PTX does not work."""
    reason: str
    """One line, as printed: what fails."""
    source: str
    confidence: str = "high"
    note: str = ""

    @property
    def key(self) -> str:
        return f"issue:{self.framework}:{self.versions}:{','.join(self.archs)}"


ISSUE_EFFECTS = ("no_ptx_jit",)


@dataclass(frozen=True)
class NgcImage:
    """One NGC framework container release (nvcr.io/nvidia/pytorch:25.12-py3) and what its
    release notes say it holds. Fields the page does not give stay None."""

    image: str
    """The exact reference: "nvcr.io/nvidia/pytorch:25.12-py3"."""
    release: str
    """NGC's yy.mm: "25.12"."""
    framework: str
    """The import name: "torch", "jax", "tensorflow"."""
    framework_version: str
    """As the release notes print it: "2.10.0a0+b4e4ee81d3"."""
    cuda: str
    """ "13.1.0"."""
    source: str
    python: str | None = None
    """ "3.12"."""
    os: str | None = None
    """ "ubuntu24.04"."""
    cudnn: str | None = None
    nccl: str | None = None
    driver: str | None = None
    """The release notes' "requires NVIDIA Driver release N or later"."""
    compat_drivers: tuple[str, ...] = ()
    """Data-center drivers the notes allow through forward compatibility: "535.86" stands
    for "535.86 (or later R535)"."""
    min_cc: str | None = None
    """The notes' "supports CUDA compute capability X and later"."""
    confidence: str = "high"
    note: str = ""

    @property
    def key(self) -> str:
        return f"ngc:{self.image}"


GPU_SEGMENTS = ("datacenter", "workstation", "consumer", "mobile", "jetson")


@dataclass(frozen=True)
class ListedGpu:
    """One GPU of NVIDIA's compute-capability list (https://developer.nvidia.com/cuda-gpus and
    https://developer.nvidia.com/cuda-legacy-gpus), as `matrix/gpu_list.toml` holds it: written
    by `envbuild.matrix.refresh.gpu_list` from the snapshot under `matrix/evidence/`."""

    name: str
    """As the list spells it: "Quadro RTX 8000", "GeForce RTX 4090", "NVIDIA GB10 (DGX Spark)"."""
    cc: str
    """ "7.5"; also one the matrix has no [[arch]] for ("3.0"): such a GPU is named, then refused."""
    segment: str
    """One of GPU_SEGMENTS (the list's column, with mobile parts apart)."""
    source: str
    confidence: str = "high"
    note: str = ""

    @property
    def key(self) -> str:
        return f"gpu:{self.name}"


PYTHON_LIBCS = ("gnu",)
"""The C libraries a managed Python build may be for (every modelled OS image is glibc)."""


@dataclass(frozen=True)
class PythonBuild:
    """One python-build-standalone (PBS) CPython that the lock's uv installs into an image
    whose OS ships no such Python (`matrix/python_builds.toml`, generated from uv's own
    download metadata by `envbuild.matrix.refresh.python_builds`)."""

    python: str
    """The request's Python spec it serves: "3.9", "3.14t" (free-threaded)."""
    version: str
    """The exact CPython release: "3.14.7"."""
    platform: str
    """ "x86_64" or "aarch64"."""
    uv_key: str
    """uv's download key: "cpython-3.14.7+freethreaded-linux-x86_64-gnu"."""
    release: str
    """The PBS release (its tag, a date): "20260814"."""
    url: str
    """The archive (install_only_stripped where PBS publishes one, else the full build)."""
    sha256: str
    """The archive's sha256 (hex), as uv's metadata gives it; uv checks it on install."""
    source: str
    libc: str = "gnu"
    confidence: str = "high"
    note: str = ""

    @property
    def key(self) -> str:
        return f"python_build:{self.python}:{self.platform}"


Row = CudaRelease | Arch | FrameworkRelease | FrameworkBuild | LibRelease | CudaImage
AnyRow = (
    Row
    | OsImage
    | GpuBaseline
    | HostPlatform
    | OtherVendorGpu
    | KnownIssue
    | NgcImage
    | ListedGpu
    | PythonBuild
)


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
    host_platforms: tuple[HostPlatform, ...] = ()
    other_vendors: tuple[OtherVendorGpu, ...] = ()
    issues: tuple[KnownIssue, ...] = ()
    ngc_images: tuple[NgcImage, ...] = ()
    listed_gpus: tuple[ListedGpu, ...] = ()
    """NVIDIA's compute-capability list by name (matrix/gpu_list.toml)."""
    python_builds: tuple[PythonBuild, ...] = ()
    """Managed Pythons for images whose OS ships none that fits (matrix/python_builds.toml)."""
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
            self.host_platforms,
            self.other_vendors,
            self.issues,
            self.ngc_images,
            self.listed_gpus,
            self.python_builds,
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
            "ngc_images": len(self.ngc_images),
            "listed_gpus": len(self.listed_gpus),
            "python_builds": len(self.python_builds),
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

    def ngc_image(self, ref: str) -> NgcImage | None:
        """The NGC row of an image reference, exact ("nvcr.io/nvidia/pytorch:25.12-py3"), also
        with a digest after the tag ("...-py3@sha256:..."). The engine ignores the tag of such a
        reference, so the lock uses a row found this way only to check a probe of the image
        (envbuild/app/lock_base.py), never in place of one."""
        name = ref.split("@", 1)[0]
        return next((row for row in self.ngc_images if row.image == name), None)

    def python_build(self, python: str, platform: str) -> PythonBuild | None:
        """The managed Python for a request's Python spec ("3.14t") and machine, if any."""
        return next(
            (b for b in self.python_builds if b.python == python and b.platform == platform),
            None,
        )

    def lib(self, library: str, version: str) -> LibRelease | None:
        """The cudnn/nccl row a build's version refers to: exact, else the longest row whose
        version is a release prefix of it ("9.10.2" covers "9.10.2.21")."""
        return _lib_match(self.libs, library, version)


def _major_of(version: object) -> int | None:
    if isinstance(version, str) and re.match(r"^\d+\.", version):
        return int(version.split(".", 1)[0])
    return None


def _minor_of(version: str) -> str:
    parts = version.split(".")
    return ".".join(parts[:2])


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
