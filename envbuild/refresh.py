"""`envbuild matrix refresh`, the pure part: index data in, matrix rows and findings out.

No I/O here: `envbuild.pypi` fetches (PyPI Simple API, core metadata, the PyTorch index, registry
tag lists) and hands the texts to these functions; `api.matrix_refresh` writes the result.

What PyPI alone tells (PEP 691 file lists + each wheel's core metadata):
- a framework's releases, their Requires-Python and Linux wheel Python tags -> the python
  specifier of a `FrameworkRelease`;
- the variant `pip install torch` gets on Linux x86_64, from the wheel's Requires-Dist:
  `nvidia-cudnn-cu1x==X` (cuDNN), `nvidia-nccl-cu1x==Y` (NCCL), and `nvidia-cuda-runtime-cu1x==Z`
  or `cuda-toolkit[...]==W` (CUDA) -> variant `cuXY`. A runtime component version (12.6.77) is
  mapped to the toolkit release (12.6.2) through the `cuda-toolkit` meta-package's own pins.
What PyPI does not tell: the GPU architectures a build carries and the non-default variants
(`+cu118`, `+cu128`): those need the PyTorch index. Build rows derived from PyPI alone therefore
have `archs = []` and `confidence = "medium"`; a CUDA build without archs is incomplete and the
resolver leaves it out (it cannot prove the targets' GPUs are covered). For jax and TensorFlow
the CUDA pins are ranges (`>=9.10.2.21,<10`): the rows record the lower bounds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields, replace
from email.parser import HeaderParser
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urldefrag, urljoin

from packaging.markers import UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from envbuild.cudawheels import CUDNN_WHEEL, NCCL_WHEEL, RUNTIME_WHEEL, TOOLKIT_WHEEL
from envbuild.matrix import (
    CudaImage,
    FrameworkBuild,
    FrameworkRelease,
    Matrix,
)

SOURCES = ("pypi", "pytorch-index", "registry")
FRAMEWORKS = ("torch", "jax", "tensorflow")
PYPI_ONLY_NOTE = (
    "PyPI only: archs unknown (not in the metadata); non-default variants need the PyTorch index"
)
RANGE_NOTE = (
    "PyPI only: CUDA, cuDNN and NCCL are the lower bounds of Requires-Dist ranges; archs unknown"
)


# -- index files ------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexFile:
    """One file an index lists (PEP 691 JSON or PEP 503 HTML)."""

    filename: str
    url: str
    requires_python: str | None = None
    yanked: bool = False
    sha256: str | None = None
    core_metadata: bool | dict[str, str] = False
    """PEP 658/714: True or {"sha256": ...} when `<url>.metadata` exists."""
    upload_time: str | None = None


def parse_simple_json(data: Mapping[str, Any]) -> tuple[IndexFile, ...]:
    """Files of a PEP 691 project page."""
    out: list[IndexFile] = []
    for f in data.get("files", []):
        hashes = f.get("hashes") or {}
        meta = f.get("core-metadata", f.get("data-dist-info-metadata", False))
        out.append(
            IndexFile(
                filename=str(f["filename"]),
                url=str(f["url"]),
                requires_python=f.get("requires-python") or None,
                yanked=bool(f.get("yanked", False)),
                sha256=hashes.get("sha256"),
                core_metadata=meta if isinstance(meta, dict) else bool(meta),
                upload_time=f.get("upload-time"),
            )
        )
    return tuple(out)


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[dict[str, str | None], str]] = []
        self._attrs: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._attrs = dict(attrs)
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._attrs is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._attrs is not None:
            self.links.append((self._attrs, "".join(self._text).strip()))
            self._attrs = None


def parse_simple_html(text: str, base_url: str) -> tuple[IndexFile, ...]:
    """Files of a PEP 503 project page (the PyTorch index serves only HTML)."""
    parser = _LinkParser()
    parser.feed(text)
    out: list[IndexFile] = []
    for attrs, label in parser.links:
        href = attrs.get("href")
        if not href:
            continue
        url, frag = urldefrag(urljoin(base_url, href))
        sha = frag.split("=", 1)[1] if frag.startswith("sha256=") else None
        meta_attr = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))
        meta: bool | dict[str, str] = False
        if meta_attr is not None:
            algo, _, digest = meta_attr.partition("=")
            meta = {algo: digest} if digest else True
        out.append(
            IndexFile(
                filename=label or url.rsplit("/", 1)[-1],
                url=url,
                requires_python=attrs.get("data-requires-python") or None,
                yanked="data-yanked" in attrs,
                sha256=sha,
                core_metadata=meta,
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class Wheel:
    file: IndexFile
    project: str
    version: Version
    tags: frozenset[Tag]


def wheels_for(
    files: Iterable[IndexFile], *, machine: str = "x86_64", prereleases: bool = False
) -> dict[Version, list[Wheel]]:
    """Linux (manylinux/linux) wheels for `machine`, grouped by release (local part dropped:
    `2.7.1+cu128` -> 2.7.1)."""
    out: dict[Version, list[Wheel]] = {}
    for f in files:
        if not f.filename.endswith(".whl"):
            continue
        try:
            name, version, _build, tags = parse_wheel_filename(f.filename)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if version.is_prerelease and not prereleases:
            continue
        if not any(_is_linux(t.platform, machine) for t in tags):
            continue
        release = Version(version.public)
        out.setdefault(release, []).append(Wheel(f, str(name), release, tags))
    return out


def _is_linux(platform: str, machine: str) -> bool:
    return platform.endswith(f"_{machine}") and (
        platform.startswith("manylinux") or platform == f"linux_{machine}"
    )


def python_specifier(wheels: Sequence[Wheel], requires_python: str | None) -> str:
    """ ">=3.10,<3.15" from the CPython tags of the Linux wheels (cp314t counts as 3.14), tightened
    by Requires-Python's lower bound; Requires-Python alone for pure-Python wheels."""
    minors: set[int] = set()
    for w in wheels:
        for t in w.tags:
            m = re.fullmatch(r"cp3(\d+)", t.interpreter)
            if m:
                minors.add(int(m.group(1)))
    if not minors:
        return str(SpecifierSet(requires_python or ""))
    low, high = min(minors), max(minors)
    if requires_python:
        try:
            spec = SpecifierSet(requires_python)
        except InvalidSpecifier:
            spec = SpecifierSet()
        while low <= high and not spec.contains(f"3.{low}", prereleases=True):
            low += 1
    return f">=3.{low},<3.{high + 1}"


def pick_metadata_wheel(wheels: Sequence[Wheel]) -> Wheel:
    """The wheel whose metadata speaks for a release: the newest CPython, non-free-threaded
    (all Linux x86_64 wheels of a torch release carry the same CUDA pins)."""

    def rank(w: Wheel) -> tuple[int, int, str]:
        best = max(
            (
                (int(m.group(1)), 0 if t.abi.endswith("t") else 1)
                for t in w.tags
                if (m := re.fullmatch(r"cp3(\d+)", t.interpreter))
            ),
            default=(0, 0),
        )
        return (best[1], best[0], w.file.filename)

    return max(wheels, key=rank)


# -- core metadata ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CoreMetadata:
    name: str
    version: str
    requires_python: str | None
    requires_dist: tuple[Requirement, ...]


def parse_metadata(text: str) -> CoreMetadata:
    """The headers of a METADATA file (RFC 822 style); the description body is ignored."""
    msg = HeaderParser().parsestr(text, headersonly=True)
    reqs: list[Requirement] = []
    for raw in msg.get_all("Requires-Dist") or []:
        try:
            reqs.append(Requirement(str(raw)))
        except InvalidRequirement:
            continue
    return CoreMetadata(
        name=str(msg.get("Name", "")),
        version=str(msg.get("Version", "")),
        requires_python=str(msg["Requires-Python"]) if msg.get("Requires-Python") else None,
        requires_dist=tuple(reqs),
    )


def applies(req: Requirement, *, extra: str = "", machine: str = "x86_64", python: str) -> bool:
    """Does the requirement apply on Linux `machine` with `python` and `extra` asked for?"""
    if req.marker is None:
        return True
    env = {
        "platform_system": "Linux",
        "sys_platform": "linux",
        "os_name": "posix",
        "platform_machine": machine,
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": extra,
    }
    try:
        return bool(req.marker.evaluate(env))
    except UndefinedEnvironmentName:
        return False


def exact_pin(req: Requirement) -> str | None:
    """ "==12.8.90" or "==12.8.90.*" -> "12.8.90"; None for ranges."""
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "==="):
        return specs[0].version.removesuffix(".*")
    return None


def lower_bound(req: Requirement) -> str | None:
    """The `>=` bound of a range ("9.10.2.21" of ">=9.10.2.21,<10"), or the exact pin."""
    pin = exact_pin(req)
    if pin is not None:
        return pin
    lows = [s.version for s in req.specifier if s.operator in (">=", "~=")]
    return max(lows, key=Version) if lows else None


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


# -- diff against the matrix ------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    key: str
    field: str
    old: Any
    new: Any
    source: str = ""

    def __str__(self) -> str:
        return f"{self.key}: {self.field} {self.old!r} -> {self.new!r}"


@dataclass(frozen=True)
class Plan:
    """What a refresh would do.

    `new_releases` are appended to `matrix/<framework>.toml`. `pending_builds` are derived
    but not written: a CUDA build row needs the archs the build carries, which neither PyPI nor
    the index tells (matrix.py rejects a CUDA build without archs so the resolver never guesses
    GPU coverage); a human adds them with the archs (`torch.cuda.get_arch_list()` in the wheel).
    `changes` are facts of existing rows that differ from the source: reported for review,
    never rewritten (rewriting a row changes its fingerprint and makes locks on it stale).
    """

    new_releases: tuple[FrameworkRelease, ...] = ()
    pending_builds: tuple[FrameworkBuild, ...] = ()
    changes: tuple[Change, ...] = ()
    unchanged: int = 0
    skipped: tuple[str, ...] = ()
    findings: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    """Sources that could not be reached."""


RELEASE_FACTS = ("python", "yanked")
BUILD_FACTS = ("variant", "cuda", "cudnn", "nccl")


def plan_changes(matrix: Matrix, derived: Sequence[Derived]) -> Plan:
    """Compare derived rows with the matrix (see `Plan`)."""
    releases = {r.key: r for r in matrix.releases}
    new_releases: list[FrameworkRelease] = []
    pending: dict[str, FrameworkBuild] = {}
    changes: list[Change] = []
    unchanged = 0
    derived_keys: set[str] = set()
    for d in derived:
        for r in d.releases:
            if r.key in derived_keys:
                continue  # the same release read from a second channel (jax cuda12 / cuda13)
            derived_keys.add(r.key)
            old = releases.get(r.key)
            if old is None:
                new_releases.append(r)
                releases[r.key] = r
                continue
            diffs = [
                Change(r.key, f, getattr(old, f), getattr(r, f), r.source)
                for f in RELEASE_FACTS
                if not _same_fact(f, getattr(old, f), getattr(r, f))
            ]
            changes.extend(diffs)
            unchanged += not diffs
        for b in d.builds:
            spec = SpecifierSet(b.versions)
            versions = [r.version for r in d.releases if spec.contains(r.version, prereleases=True)]
            covering = _covering_builds(matrix.builds, b, versions)
            if len(covering) < len(versions):
                # Some release of this build has no matrix row for its variant: a human adds
                # one (with archs); the releases that do have one are still compared below.
                pending.setdefault(b.key, b)
            compared: set[str] = set()
            for old_b in covering.values():
                if old_b.key in compared:
                    continue
                compared.add(old_b.key)
                diffs = [
                    Change(old_b.key, f, getattr(old_b, f), getattr(b, f), b.source)
                    for f in BUILD_FACTS
                    if getattr(b, f) is not None
                    and not (
                        _within_floor(f, getattr(old_b, f), getattr(b, f))
                        if d.floors
                        else _same_fact(f, getattr(old_b, f), getattr(b, f))
                    )
                ]
                changes.extend(diffs)
                unchanged += not diffs
    return Plan(
        new_releases=tuple(sorted(new_releases, key=lambda r: (r.framework, Version(r.version)))),
        pending_builds=tuple(pending.values()),
        changes=tuple(changes),
        unchanged=unchanged,
        skipped=tuple(s for d in derived for s in d.skipped),
        findings=tuple(s for d in derived for s in d.findings),
    )


def _covering_builds(
    builds: Sequence[FrameworkBuild], new: FrameworkBuild, versions: Sequence[str]
) -> dict[str, FrameworkBuild]:
    """release -> the existing row that describes the same thing for it: the same variant, or
    (for a PyPI-default build) the row the matrix marks as the PyPI default, so a changed
    default variant shows up as a changed fact. Releases without such a row are left out."""
    out: dict[str, FrameworkBuild] = {}
    for v in versions:
        for b in builds:
            if b.framework != new.framework or not _spec_contains(b.versions, v):
                continue
            if b.variant == new.variant or (new.pypi_default and b.pypi_default):
                out.setdefault(v, b)
    return out


def _within_floor(name: str, old: Any, floor: str) -> bool:
    """For range pins (jax, tensorflow): the matrix value is fine unless it is below the floor
    pip enforces (None = the matrix does not say, which a floor does not contradict)."""
    if old is None or name == "variant":
        return old is None or old == floor
    try:
        o, f = Version(str(old)).release, Version(floor).release
    except InvalidVersion:
        return False
    n = min(len(o), len(f))
    return o[:n] >= f[:n]


def _same_fact(name: str, old: Any, new: Any) -> bool:
    if old == new:
        return True
    if name == "python" and isinstance(old, str) and isinstance(new, str):
        try:
            return SpecifierSet(old) == SpecifierSet(new)
        except InvalidSpecifier:
            return False
    if name == "cuda" and isinstance(old, str) and isinstance(new, str):
        # The matrix may name the update ("12.6.3") or only the minor ("12.6") where PyPI gives
        # the first toolkit release that ships the same runtime ("12.6.2"): the same build.
        return Version(old).release[:2] == Version(new).release[:2]
    if name in ("cudnn", "nccl") and isinstance(old, str) and isinstance(new, str):
        # "9.10.2" in the matrix names the release whose full build number is "9.10.2.21".
        o, n = Version(old).release, Version(new).release
        return n[: len(o)] == o
    return False


# -- TOML output ------------------------------------------------------------------------------

FILE_INJECTED = ("framework",)
"""Fields a framework file sets once at the top (`framework = "torch"`), never per row."""


def row_table(row: Any) -> dict[str, Any]:
    """A row as a TOML table: dataclass fields in declaration order; None, file-level fields
    and values equal to the field default left out; tuples as arrays."""
    out: dict[str, Any] = {}
    for f in fields(row):
        value = getattr(row, f.name)
        if value is None or f.name in FILE_INJECTED:
            continue
        if f.default is not MISSING and value == f.default and f.name != "confidence":
            continue
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def render_rows(table: str, rows: Sequence[Any]) -> str:
    """`[[table]]` blocks for the rows, as tomlkit writes them, one blank line apart."""
    import tomlkit

    chunks = []
    for row in rows:
        item = tomlkit.table()
        for k, v in row_table(row).items():
            item.add(k, v)
        aot = tomlkit.aot()
        aot.append(item)
        doc = tomlkit.document()
        doc.add(table, aot)
        chunks.append(tomlkit.dumps(doc).strip("\n"))
    return "\n\n".join(chunks) + "\n" if chunks else ""


def new_framework_file(framework: str) -> str:
    """The header of a `matrix/<framework>.toml` that does not exist yet."""
    return (
        f"# {framework} releases and builds (schema: matrix/README.md).\n"
        "schema_version = 1\n"
        f'framework = "{framework}"\n'
    )


def append_rows(text: str, table: str, rows: Sequence[Any]) -> str:
    """The file's text with the rows appended at the end: every existing byte is kept, so the
    change reviews as a pure addition. (TOML allows `[[release]]` entries after other tables.)"""
    if not rows:
        return text
    sep = "" if not text else ("\n" if text.endswith("\n") else "\n\n")
    return text + sep + render_rows(table, rows)


def summary_lines(plan: Plan) -> list[str]:
    """The diff summary `matrix refresh` prints (deterministic order)."""
    out = [f"new releases (appended): {len(plan.new_releases)}"]
    out += [f"  + {r.key}  python {r.python}" for r in plan.new_releases]
    out.append(f"derived builds (not written: archs unknown): {len(plan.pending_builds)}")
    out += [
        f"  * {b.key}  cuda {b.cuda} cudnn {b.cudnn} nccl {b.nccl} [{b.confidence}]"
        for b in plan.pending_builds
    ]
    out.append(f"changed facts (reported, not rewritten): {len(plan.changes)}")
    out += [f"  ~ {c}" for c in plan.changes]
    out.append(f"unchanged rows: {plan.unchanged}")
    if plan.findings:
        out.append(f"findings: {len(plan.findings)}")
        out += [f"  ? {f}" for f in plan.findings]
    if plan.skipped:
        out.append(f"skipped: {len(plan.skipped)}")
        out += [f"  - {s}" for s in plan.skipped]
    return out


def plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "new_releases": [{"key": r.key, **row_table(r)} for r in plan.new_releases],
        "pending_builds": [{"key": b.key, **row_table(b)} for b in plan.pending_builds],
        "changes": [
            {"key": c.key, "field": c.field, "old": c.old, "new": c.new, "source": c.source}
            for c in plan.changes
        ],
        "unchanged": plan.unchanged,
        "findings": list(plan.findings),
        "skipped": list(plan.skipped),
        "warnings": list(plan.warnings),
    }


# -- the whole run ----------------------------------------------------------------------------

DEFAULT_SINCE = {"torch": "2.0", "jax": "0.4.31", "tensorflow": "2.15"}
"""How far back a refresh reads when the matrix has no release of the framework yet: torch
2.0 (CUDA pins in Requires-Dist on x86_64 since 1.13), jax 0.4.31 (first jax-cuda12-plugin
with the `with-cuda` extra), tensorflow 2.15 (first `and-cuda` extra). Source: PyPI metadata,
shared/reference/compat-facts.toml."""


def since_for(framework: str, matrix: Matrix) -> str:
    """Read from the oldest release the matrix has (so its rows are re-checked), else the
    default floor."""
    versions = [Version(r.version) for r in matrix.releases if r.framework == framework]
    return str(min(versions)) if versions else DEFAULT_SINCE[framework]


@dataclass(frozen=True)
class RefreshResult:
    plan: Plan
    written: tuple[str, ...]
    """Files changed (none for --dry-run)."""
    dry_run: bool
    sources_ok: tuple[str, ...]
    sources_failed: tuple[tuple[str, str], ...]
    """(source, why) for every source that could not be read."""

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "dry_run": self.dry_run,
            "written": list(self.written),
            "sources_ok": list(self.sources_ok),
            "sources_failed": [{"source": s, "message": m} for s, m in self.sources_failed],
            **plan_json(self.plan),
        }
