"""Per framework channel (PyPI default, PyTorch index): releases and builds -> matrix rows."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from packaging.version import Version

from envbuild.matrix import (
    FrameworkBuild,
    FrameworkRelease,
)
from envbuild.matrix.refresh.cuda import cuda_of, cuda_pins, variant_of
from envbuild.matrix.refresh.index import (
    CoreMetadata,
    Wheel,
    free_threaded_specifier,
    python_specifier,
)

PYPI_ONLY_NOTE = (
    "PyPI only: archs unknown (not in the metadata); non-default variants need the PyTorch index"
)
RANGE_NOTE = (
    "PyPI only: CUDA, cuDNN and NCCL are the lower bounds of Requires-Dist ranges; archs unknown"
)


# -- frameworks -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Channel:
    """One PyPI project that carries a framework's CUDA build, and how to read its pins."""

    framework: str
    project: str
    extra: str
    """The extra whose Requires-Dist carries the CUDA pins ("" = the base requirements)."""
    variant: str | None
    """Fixed variant name; None = derived from the CUDA pin ("cu128")."""
    requirement: str
    pypi_default: bool
    exact: bool
    """True when the project pins exact versions (torch); False for ranges (jax, tensorflow)."""


# Which projects publish which facts; sources: torch wheels' Requires-Dist (pins since 1.13),
# jax docs/installation.md (`jax[cuda12]`/`jax[cuda13]` -> jax-cudaNN-plugin[with-cuda]),
# tensorflow.org/install/pip (`tensorflow[and-cuda]`).
CHANNELS: dict[str, tuple[Channel, ...]] = {
    "torch": (Channel("torch", "torch", "", None, "torch=={version}", True, True),),
    "jax": (
        Channel(
            "jax",
            "jax-cuda12-plugin",
            "with-cuda",
            "cuda12",
            "jax[cuda12]=={version}",
            False,
            False,
        ),
        Channel(
            "jax",
            "jax-cuda13-plugin",
            "with-cuda",
            "cuda13",
            "jax[cuda13]=={version}",
            False,
            False,
        ),
    ),
    "tensorflow": (
        Channel(
            "tensorflow",
            "tensorflow",
            "and-cuda",
            "and-cuda",
            "tensorflow[and-cuda]=={version}",
            False,
            False,
        ),
    ),
}
TOOLKIT_PROJECT = "cuda-toolkit"


@dataclass(frozen=True)
class ReleaseData:
    """What was fetched for one release of one channel."""

    version: str
    wheels: tuple[Wheel, ...]
    metadata_wheel: Wheel | None
    metadata: CoreMetadata | None


@dataclass(frozen=True)
class ChannelData:
    channel: Channel
    index_url: str
    """The Simple API page it was read from."""
    releases: tuple[ReleaseData, ...]


@dataclass(frozen=True)
class Derived:
    """Rows derived from one source, with what could not be derived."""

    releases: tuple[FrameworkRelease, ...] = ()
    builds: tuple[FrameworkBuild, ...] = ()
    skipped: tuple[str, ...] = ()
    findings: tuple[str, ...] = ()
    """Facts worth a human look that are not rows (new variants, new image tags)."""
    floors: bool = False
    """The builds' CUDA/cuDNN/NCCL are lower bounds of ranges, not what the build carries."""


def derive_channel(data: ChannelData, *, runtime_pins: Mapping[str, str], seen: str) -> Derived:
    """Release rows and PyPI-default build rows of one channel.

    Builds are grouped per minor series: "==2.7.*" when every release of the series seen has
    the same facts, else one row per release ("==2.7.0").
    """
    ch = data.channel
    releases: list[FrameworkRelease] = []
    per_release: list[tuple[Version, FrameworkBuild]] = []
    skipped: list[str] = []
    for rd in data.releases:
        if not rd.wheels:
            continue
        requires_python = (
            rd.metadata.requires_python
            if rd.metadata
            else next((w.file.requires_python for w in rd.wheels if w.file.requires_python), None)
        )
        releases.append(
            _with_extras(
                FrameworkRelease(
                    framework=ch.framework,
                    version=rd.version,
                    python=python_specifier(rd.wheels, requires_python),
                    free_threaded=free_threaded_specifier(rd.wheels),
                    source=data.index_url,
                    confidence="high",
                    yanked=all(w.file.yanked for w in rd.wheels),
                ),
                seen=seen,
            )
        )
        if rd.metadata is None or rd.metadata_wheel is None:
            skipped.append(f"{ch.framework} {rd.version}: no core metadata read")
            continue
        python = _newest_python(rd.metadata_wheel)
        pins = cuda_pins(rd.metadata, extra=ch.extra, python=python)
        if pins.cudnn is None and pins.runtime is None and pins.toolkit is None:
            skipped.append(
                f"{ch.framework} {rd.version}: no CUDA wheels in Requires-Dist (CUDA libraries "
                "bundled in the wheel or not on PyPI); its pins cannot be derived from PyPI"
            )
            continue
        cuda = cuda_of(pins, runtime_pins)
        variant = ch.variant or variant_of(cuda, pins)
        if variant is None:
            skipped.append(f"{ch.framework} {rd.version}: cannot tell the CUDA variant")
            continue
        if cuda is None and pins.runtime is not None:
            # No cuda-toolkit release pins this runtime (a range floor like 12.5.82): the
            # runtime's major.minor is still the CUDA minor; the matrix reads "12.5" as "update
            # unknown" and takes the newest 12.5.x row's floor (the conservative one).
            rt = Version(pins.runtime)
            cuda = f"{rt.major}.{rt.minor}"
        build = FrameworkBuild(
            framework=ch.framework,
            versions=f"=={rd.version}",
            variant=variant,
            cuda=cuda,
            cudnn=pins.cudnn,
            nccl=pins.nccl,
            archs=(),
            requirement=ch.requirement,
            index_url=None,
            pypi_default=ch.pypi_default,
            source=f"{rd.metadata_wheel.file.url} (core metadata: Requires-Dist)",
            confidence="medium" if ch.exact and pins.exact else "low",
        )
        per_release.append((Version(rd.version), build))
    builds = _group_builds(per_release, seen=seen, exact=ch.exact)
    return Derived(tuple(releases), tuple(builds), tuple(skipped), floors=not ch.exact)


def _newest_python(w: Wheel) -> str:
    minors = [int(m.group(1)) for t in w.tags if (m := re.fullmatch(r"cp3(\d+)", t.interpreter))]
    return f"3.{max(minors)}" if minors else "3.12"


def _facts(b: FrameworkBuild) -> tuple[Any, ...]:
    return (b.variant, b.cuda, b.cudnn, b.nccl, b.requirement, b.pypi_default, b.confidence)


def _group_builds(
    per_release: Sequence[tuple[Version, FrameworkBuild]], *, seen: str, exact: bool
) -> list[FrameworkBuild]:
    by_series: dict[tuple[int, int, str], list[tuple[Version, FrameworkBuild]]] = {}
    for v, b in per_release:
        by_series.setdefault((v.major, v.minor, b.variant), []).append((v, b))
    out: list[FrameworkBuild] = []
    note = PYPI_ONLY_NOTE if exact else RANGE_NOTE
    for (major, minor, _variant), items in sorted(by_series.items()):
        items.sort(key=lambda vb: vb[0])
        if len({_facts(b) for _, b in items}) == 1:
            newest = items[-1][1]
            out.append(
                _with_extras(replace(newest, versions=f"=={major}.{minor}.*"), seen=seen, note=note)
            )
        else:
            out.extend(_with_extras(b, seen=seen, note=note) for _, b in items)
    return out


_ROW_FIELDS: dict[type, frozenset[str]] = {}


def _with_extras(row: Any, *, seen: str, note: str | None = None) -> Any:
    """Set `seen` (and `note`) where the row type has such fields: the matrix schema decides."""
    names = _ROW_FIELDS.setdefault(type(row), frozenset(f.name for f in fields(row)))
    changes: dict[str, Any] = {}
    if "seen" in names:
        changes["seen"] = seen
    if note is not None and "note" in names:
        changes["note"] = note
    return replace(row, **changes) if changes else row
