"""The compatibility matrix: row types, strict parsing and cross-checks (pure), loading (thin I/O).

One concern per file under `matrix/` (see matrix/README.md for the schema of each file).
Every row carries `source` (and `confidence` where the source is secondary). Rows have a
stable `key` ("cuda:12.8.1", "build:torch:2.7:cu128") and a `fingerprint` (sha256 of the
row's canonical JSON); a lock's input hash covers the fingerprints of the rows its stack used,
so editing one of those rows makes the lock stale and editing any other row does not.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field


def fingerprint_of(row: object) -> str:
    """sha256 of a row's canonical JSON (sorted keys, no whitespace)."""
    data = asdict(row)  # type: ignore[call-overload]
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


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
    """The first CUDA whose nvcc can target it (sm_XX); None = before the matrix starts."""
    last_cuda: str | None
    """The last CUDA that can target it; None = still supported."""
    source: str
    confidence: str = "high"

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
    """The CUDA the build was made with ("12.8.0"); None for CPU builds."""
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

    @property
    def key(self) -> str:
        return f"build:{self.framework}:{self.versions}:{self.variant}"


@dataclass(frozen=True)
class LibRelease:
    """A cuDNN or NCCL release and the CUDA majors/GPUs it supports."""

    library: str
    """ "cudnn" or "nccl"."""
    version: str
    cuda: str
    """Specifier of the CUDA versions it has builds for."""
    source: str
    min_cc: str | None = None
    max_cc: str | None = None
    confidence: str = "high"

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

    @property
    def key(self) -> str:
        return f"image:nvidia/cuda:{self.cuda}"

    def ref(self, flavour: str, os: str) -> str:
        # Tag scheme: <version>-<flavour>-<os>; the cudnn flavour is "cudnn-runtime"
        # (and "cudnn-devel"); source: hub.docker.com/r/nvidia/cuda supported tags.
        tag_flavour = "cudnn-runtime" if flavour == "cudnn" else flavour
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

    @property
    def key(self) -> str:
        return f"baseline:{self.gpu}"


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
    """row key -> "file:row" where it was read (for messages)."""

    def fingerprints(self) -> dict[str, str]:
        """row key -> fingerprint, for every row."""
        out: dict[str, str] = {}
        for group in (
            self.cuda,
            self.archs,
            self.releases,
            self.builds,
            self.libs,
            self.cuda_images,
            self.os_images,
            self.baselines,
        ):
            for row in group:
                out[row.key] = fingerprint_of(row)
        return out
