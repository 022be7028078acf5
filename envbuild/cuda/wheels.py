"""Which pip wheel is which CUDA library: the one place that knows the names (pure).

The frameworks' PyPI wheels pin their CUDA libraries as `nvidia-*` wheels (torch <= 2.10,
JAX, TensorFlow `and-cuda`) or through the `cuda-toolkit` meta-package (torch >= 2.11); the
versions of those wheels are the libraries the framework loads at run time. The lock takes
cuDNN/NCCL from them (lockfile), the smoke plan expects them (smoke), and `matrix refresh`
derives rows from them (refresh).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from envbuild.core.models import LockedPackage

CUDNN_WHEEL = re.compile(r"^nvidia-cudnn-cu(\d+)$")
"""nvidia-cudnn-cu12, nvidia-cudnn-cu13 (group 1: the CUDA major)."""
NCCL_WHEEL = re.compile(r"^nvidia-nccl-cu(\d+)$")
RUNTIME_WHEEL = re.compile(r"^nvidia-cuda-runtime(?:-cu(\d+))?$")
"""nvidia-cuda-runtime-cu12, and the unsuffixed nvidia-cuda-runtime of CUDA 13."""
TOOLKIT_WHEEL = "cuda-toolkit"
BUILD_CUDA_PACKAGES = (TOOLKIT_WHEEL, "cuda-bindings", "cuda-pathfinder")
"""What a framework build pins for its CUDA besides `nvidia-*` wheels: torch 2.11.0+cu128
depends on cuda-bindings and cuda-toolkit[cublas, ...] (huggingface/lerobot's uv.lock, read
2026-12-04), and cuda-bindings on cuda-pathfinder."""


def is_build_cuda_package(name: str) -> bool:
    """Is this (normalised) distribution one of a framework build's CUDA packages: an
    `nvidia-*` wheel or BUILD_CUDA_PACKAGES? Another build of the same release pins its own."""
    return name.startswith("nvidia-") or name in BUILD_CUDA_PACKAGES


@dataclass(frozen=True)
class CudaLibs:
    """CUDA libraries as the resolved wheels pin them (the framework's metadata decides)."""

    cudnn: str | None = None
    nccl: str | None = None
    cuda_runtime: str | None = None
    """nvidia-cuda-runtime(-cuXX) version: "12.8.90" (its major.minor is the CUDA minor)."""
    cuda_toolkit: str | None = None
    """The `cuda-toolkit` meta-package version torch >= 2.11 pins: "13.0.2"."""


def cuda_libs(packages: Iterable[LockedPackage]) -> CudaLibs:
    """The CUDA library versions among locked (normalised-name) packages."""
    libs: dict[str, str] = {}
    for p in packages:
        if CUDNN_WHEEL.match(p.name):
            libs["cudnn"] = p.version
        elif NCCL_WHEEL.match(p.name):
            libs["nccl"] = p.version
        elif RUNTIME_WHEEL.match(p.name):
            libs["cuda_runtime"] = p.version
        elif p.name == TOOLKIT_WHEEL:
            libs["cuda_toolkit"] = p.version
    return CudaLibs(**libs)
