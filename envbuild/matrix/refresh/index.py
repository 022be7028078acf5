"""PyPI index data -> wheels and core metadata: PEP 691 JSON and PEP 503 HTML file lists,
Linux wheel Python tags, Requires-Dist pins."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

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


def free_threaded_specifier(wheels: Sequence[Wheel]) -> str | None:
    """ "==3.14.*" or ">=3.13,<3.15" from the free-threaded ABI tags (cp314t, PEP 703) of the
    Linux wheels; None when there are none."""
    minors = sorted(
        {
            int(m.group(1))
            for w in wheels
            for t in w.tags
            if (m := re.fullmatch(r"cp3(\d+)t", t.abi)) is not None
        }
    )
    if not minors:
        return None
    if len(minors) == 1:
        return f"==3.{minors[0]}.*"
    return f">=3.{minors[0]},<3.{minors[-1] + 1}"


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
