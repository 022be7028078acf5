"""What the indexes have that the matrix lacks: PyTorch index variants, nvidia/cuda registry
tag families."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import (
    InvalidWheelFilename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from envbuild.matrix import (
    CudaImage,
    Matrix,
)
from envbuild.matrix.refresh.index import IndexFile, _is_linux

# -- PyTorch index ----------------------------------------------------------------------------

_LOCAL_VARIANT = re.compile(r"^(cu\d+|cpu|rocm[\d.]+|xpu)$")


def index_variants(files: Iterable[IndexFile], *, machine: str = "x86_64") -> dict[str, set[str]]:
    """release -> variants ("cu128", "cpu") from `+local` wheel versions on the PyTorch index."""
    out: dict[str, set[str]] = {}
    for f in files:
        if not f.filename.endswith(".whl"):
            continue
        try:
            _name, version, _b, tags = parse_wheel_filename(f.filename)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if version.is_prerelease or not any(_is_linux(t.platform, machine) for t in tags):
            continue
        local = version.local or ""
        if _LOCAL_VARIANT.match(local):
            out.setdefault(version.public, set()).add(local)
    return out


def variant_findings(
    framework: str, variants: Mapping[str, set[str]], matrix: Matrix
) -> tuple[str, ...]:
    """Variants the index has that no matrix build covers (a human adds them with archs)."""
    out: list[str] = []
    for release in sorted(variants, key=Version):
        for variant in sorted(variants[release]):
            covered = any(
                b.framework == framework
                and b.variant == variant
                and _spec_contains(b.versions, release)
                for b in matrix.builds
            )
            if not covered:
                out.append(
                    f"{framework} {release}+{variant} is on the PyTorch index; no matrix build"
                )
    return tuple(out)


def _spec_contains(spec: str, version: str) -> bool:
    try:
        return SpecifierSet(spec).contains(version, prereleases=True)
    except InvalidSpecifier:
        return False


# -- registry tags ----------------------------------------------------------------------------

_CUDA_TAG = re.compile(
    r"^(?P<cuda>\d+\.\d+\.\d+)-(?P<flavour>base|runtime|devel|cudnn\d*-runtime|cudnn\d*-devel)"
    r"-(?P<os>[a-z]+\d+(?:\.\d+)?)$"
)


def cuda_tag_families(tags: Iterable[str]) -> dict[str, tuple[set[str], set[str]]]:
    """nvidia/cuda tags -> {cuda: (oses, flavours)}; flavours as the matrix names them
    (base, runtime, devel, cudnn; "cudnn-devel" counts as devel+cudnn)."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    for tag in tags:
        m = _CUDA_TAG.match(tag)
        if not m:
            continue
        oses, flavours = out.setdefault(m["cuda"], (set(), set()))
        oses.add(m["os"])
        flavour = m["flavour"]
        flavours.add("cudnn" if flavour.startswith("cudnn") else flavour)
    return out


def image_findings(
    families: Mapping[str, tuple[set[str], set[str]]], matrix: Matrix
) -> tuple[str, ...]:
    """New nvidia/cuda versions and OSes the matrix lacks. Not rows: a tag list does not give
    the image's NVIDIA_REQUIRE_CUDA or its cuDNN, which a `CudaImage` row needs. Only OSes the
    matrix has an `os_images.toml` row for count (nvidia/cuda also ships ubi, rockylinux, ...)
    when the matrix has any."""
    known: dict[str, CudaImage] = {img.cuda: img for img in matrix.cuda_images}
    wanted = {o.os for o in matrix.os_images}
    out: list[str] = []
    for cuda in sorted(families, key=Version):
        oses, flavours = families[cuda]
        if wanted:
            oses = oses & wanted
            if not oses:
                continue
        img = known.get(cuda)
        if img is None:
            flav, on = ", ".join(sorted(flavours)), ", ".join(sorted(oses))
            out.append(f"nvidia/cuda {cuda}: new ({flav} on {on})")
            continue
        new_os = sorted(oses - set(img.oses))
        if new_os:
            out.append(f"nvidia/cuda {cuda}: new OS tags {', '.join(new_os)}")
    return tuple(out)
