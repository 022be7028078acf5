"""Requires-Dist CUDA pins -> facts: the CUDA toolkit, cuDNN and NCCL of a wheel, and its
variant name (cuXY)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from packaging.utils import (
    canonicalize_name,
)
from packaging.version import Version

from envbuild.cuda.wheels import CUDNN_WHEEL, NCCL_WHEEL, RUNTIME_WHEEL, TOOLKIT_WHEEL
from envbuild.matrix.refresh.index import CoreMetadata, applies, exact_pin, lower_bound

# -- CUDA pins -> facts -----------------------------------------------------------------------


@dataclass(frozen=True)
class CudaPins:
    """What a wheel's Requires-Dist says about its CUDA libraries."""

    cuda_major: int | None = None
    toolkit: str | None = None
    """Pinned `cuda-toolkit` release ("13.0.2"), when the wheel pins the meta-package."""
    runtime: str | None = None
    """Pinned (or lowest allowed) `nvidia-cuda-runtime` component version ("12.6.77")."""
    cudnn: str | None = None
    nccl: str | None = None
    exact: bool = True
    """False when any of these is the lower bound of a range."""
    evidence: tuple[str, ...] = ()
    """The Requires-Dist lines they came from (without markers)."""


def cuda_pins(meta: CoreMetadata, *, extra: str = "", python: str = "3.12") -> CudaPins:
    """CUDA facts from the requirements that apply on Linux x86_64 (with `extra`)."""
    major: int | None = None
    toolkit = runtime = cudnn = nccl = None
    exact = True
    evidence: list[str] = []
    for req in meta.requires_dist:
        if not applies(req, extra=extra, python=python):
            continue
        name = canonicalize_name(req.name)
        pin = exact_pin(req)
        value = pin if pin is not None else lower_bound(req)
        if value is None:
            continue
        hit = True
        if name == TOOLKIT_WHEEL:
            toolkit = value
            major = Version(value).major
        elif m := RUNTIME_WHEEL.fullmatch(name):
            runtime = value
            major = int(m.group(1)) if m.group(1) else Version(value).major
        elif m := CUDNN_WHEEL.fullmatch(name):
            cudnn = value
            major = major or int(m.group(1))
        elif m := NCCL_WHEEL.fullmatch(name):
            nccl = value
            major = major or int(m.group(1))
        else:
            hit = False
        if hit:
            exact = exact and pin is not None
            evidence.append(f"{req.name}{req.specifier}")
    return CudaPins(major, toolkit, runtime, cudnn, nccl, exact, tuple(sorted(evidence)))


def toolkit_runtime_pins(toolkits: Mapping[str, CoreMetadata]) -> dict[str, str]:
    """cuda-toolkit release -> the `nvidia-cuda-runtime*` version its extras pin."""
    out: dict[str, str] = {}
    for version, meta in toolkits.items():
        for req in meta.requires_dist:
            if RUNTIME_WHEEL.fullmatch(canonicalize_name(req.name)):
                pin = exact_pin(req)
                if pin is not None:
                    out[version] = pin
                    break
    return out


def toolkit_for_runtime(runtime: str, runtime_pins: Mapping[str, str]) -> str | None:
    """The oldest CUDA toolkit release that ships this runtime component.

    Several updates can ship the same runtime (12.6.2 and 12.6.3 both pin 12.6.77); the library
    in the image is the same, so the oldest one's driver floor is the true one.
    """
    want = Version(runtime)
    hits = [
        Version(tk)
        for tk, pin in runtime_pins.items()
        if Version(pin).release == want.release[: len(Version(pin).release)]
        and not Version(tk).is_prerelease
    ]
    return _short(min(hits)) if hits else None


def _short(v: Version) -> str:
    # cuda-toolkit 12.8.2.0 / 13.0.3.0 are toolkit 12.8.2 / 13.0.3 (a trailing packaging .0).
    release = list(v.release)
    while len(release) > 3 and release[-1] == 0:
        release.pop()
    return ".".join(str(p) for p in release)


def cuda_of(pins: CudaPins, runtime_pins: Mapping[str, str]) -> str | None:
    if pins.toolkit:
        return _short(Version(pins.toolkit))
    if pins.runtime:
        return toolkit_for_runtime(pins.runtime, runtime_pins)
    return None


def variant_of(cuda: str | None, pins: CudaPins) -> str | None:
    """ "cu128" from the CUDA release; falls back to the runtime's major.minor."""
    version = cuda or pins.runtime
    if version is None:
        return None
    v = Version(version)
    return f"cu{v.major}{v.minor}"
