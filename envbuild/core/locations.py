"""Is this package location a URL or a local folder? Decided here, once.

A location is remote when it is an http:// or https:// URL; everything else is local: a
`file://` URL or a plain path (relative paths are taken from the image folder). Remote
locations travel in the lock and into the build; local ones are read at lock time only and
reach a build through `--find-links DIR`.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    NormalizedName,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

REMOTE_SCHEMES = ("http", "https")


def is_remote(location: str) -> bool:
    """True for an http(s):// URL (an index, a find-links page, a package's source)."""
    return urlsplit(location).scheme.lower() in REMOTE_SCHEMES


def local_path(location: str) -> Path | None:
    """The local path a location names (`file://` URL or plain path); None for anything
    else (an http(s):// URL, another scheme)."""
    parts = urlsplit(location)
    if parts.scheme.lower() == "file":
        return Path(unquote(parts.path))
    if "://" in location:
        return None
    return Path(location)


def unreadable_kind(location: str) -> str | None:
    """What a local location is when it exists but is neither a regular file nor a folder
    ("a FIFO", "a character device", ...): uv, reading it, would wait for a writer for ever
    or never reach its end. None for a file, a folder, a missing path or a URL."""
    import os
    import stat

    from envbuild.core.fsio import file_kind

    path = local_path(location)
    if path is None:
        return None
    try:
        mode = os.stat(path).st_mode  # through links: what uv would open
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return file_kind(mode)


def resolve_local(location: str, base: Path) -> str:
    """A remote URL as it is; a local location as an absolute path, relative ones from `base`."""
    path = local_path(location)
    if path is None:
        return location
    return str((base / path).resolve())


_ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".zip")


def is_direct_url(source: str) -> bool:
    """True when a locked package's source is the file itself (a `name @ URL` requirement: its
    path ends in a distribution file name), not an index or a find-links folder."""
    path = urlsplit(source).path if "://" in source else source
    return path.lower().endswith(_ARCHIVE_SUFFIXES)


def folder_distributions(
    folder: Path, *, sdists: bool = True
) -> set[tuple[NormalizedName, Version]]:
    """(normalised name, version) of each wheel (and sdist, unless `sdists` is False) at the
    top level of a local folder (where pip's and uv's --find-links look); empty when it is no
    folder. The one reader of what a wheel folder holds: the lock's wheelhouse rules and the
    build context's check."""
    held: set[tuple[NormalizedName, Version]] = set()
    try:
        entries = sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError:
        return held
    for path in entries:
        try:
            if path.name.endswith(".whl"):
                name, version, *_ = parse_wheel_filename(path.name)
            elif sdists:
                name, version = parse_sdist_filename(path.name)
            else:
                continue
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        held.add((name, version))
    return held
