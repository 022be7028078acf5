"""Is this package location a URL or a local folder? Decided here, once.

A location is remote when it is an http:// or https:// URL; everything else is local: a
`file://` URL or a plain path (relative paths are taken from the image folder). Remote
locations travel in the lock and into the build; local ones are read at lock time only and
reach a build through `--find-links DIR`.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

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


def resolve_local(location: str, base: Path) -> str:
    """A remote URL as it is; a local location as an absolute path, relative ones from `base`."""
    path = local_path(location)
    if path is None:
        return location
    return str((base / path).resolve())
