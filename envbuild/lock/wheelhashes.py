"""The sha256 of local wheelhouse files, remembered between locks, so uv does not hash them
again.

`uv pip compile --format pylock.toml --generate-hashes` reads and hashes every local
find-links wheel it picks on every run (torch-cpu's 192 MB wheel: about 1 s, measured with
strace: `requirements.txt` output takes the hash from uv's cache, PEP 751 output does not).
A flat page of links (PEP 503's `#sha256=` fragment, a `--find-links` form uv documents) that
names the same files with their hashes makes uv use the hash it is given instead.

The hashes come from uv's own earlier output, never computed here, and are kept per file
under its full `stat` identity (path, device, inode, size, mtime and ctime in ns): a file that
was replaced or rewritten is a miss, and uv hashes it as before. A wrong hash could not go
unnoticed anyway: the image build installs with `--require-hashes`. The cache file is the
user's own (`usercache.own_file`); anything unreadable means "no hashes".
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

from envbuild.core import usercache

FILE_NAME = "wheel-hashes.json"
LIMIT = 2000
"""Entries kept; past it the file starts over."""

Identity = list[int]


def _path() -> str:
    return os.path.join(usercache.user_cache_dir(), FILE_NAME)


def file_identity(path: str) -> Identity | None:
    """The file's stat identity (device, inode, size, mtime and ctime in ns); None if gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def load() -> dict[str, tuple[Identity, str]]:
    """path -> (identity, sha256 hex) as stored; {} when absent, foreign or corrupt."""
    try:
        with open(_path(), "rb") as f:
            if not usercache.own_file(f.fileno()):
                return {}
            data = json.loads(f.read())
        return {
            str(k): (list(v[0]), str(v[1]))
            for k, v in data.items()
            if isinstance(v, list) and len(v) == 2
        }
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def known(path: str, stored: Mapping[str, tuple[Identity, str]]) -> str | None:
    """The stored sha256 of `path` when the file is still the one it was taken from."""
    entry = stored.get(path)
    if entry is None:
        return None
    identity = file_identity(path)
    return entry[1] if identity is not None and identity == entry[0] else None


def snapshot(links: Iterable[str]) -> dict[str, Identity]:
    """The identity of every wheel in the local wheels-only folders of `links`, taken before
    uv runs: a hash uv reports is stored only for a file that did not change meanwhile."""
    out: dict[str, Identity] = {}
    for link in links:
        for path in wheels_only(link) or ():
            identity = file_identity(path)
            if identity is not None:
                out[path] = identity
    return out


def remember(
    pairs: Iterable[tuple[str, str]],
    stored: Mapping[str, tuple[Identity, str]],
    before: Mapping[str, Identity],
) -> None:
    """Store (path, sha256 hex) pairs taken from uv's output; best effort. A file whose
    identity is not the one `before` took (rewritten while uv ran, or not seen then) is left
    out: uv may have hashed the old bytes, or copied the hash it was handed."""
    pairs = list(pairs)
    new = dict(stored)
    changed = False
    for path, digest in pairs:
        identity = file_identity(path)
        if identity is None or identity != before.get(path) or new.get(path) == (identity, digest):
            continue
        new[path] = (identity, digest)
        changed = True
    if not changed:
        return
    if len(new) > LIMIT:
        new = {p: new[p] for p, _ in pairs if p in new}
    body = {k: [v[0], v[1]] for k, v in sorted(new.items())}
    usercache.write_bytes(_path(), json.dumps(body).encode())


def wheels_only(folder: str) -> list[str] | None:
    """The folder's wheel files (sorted, absolute), or None when it is not a local folder of
    wheels only (sdists and anything else stay with uv's own reading of the folder)."""
    if "://" in folder or not os.path.isabs(folder):
        return None
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return None
    files = []
    for e in entries:
        if not (e.name.endswith(".whl") and e.is_file()):
            return None
        files.append(os.path.join(folder, e.name))
    return files


def file_url(path: str) -> str:
    # The characters of wheel names kept as they are, so uv reports the same URL either way.
    from urllib.parse import quote  # here: envbuild/lock/headstart.py imports this module early

    return "file://" + quote(path, safe="/+!~")


def links_page(files: Iterable[str], stored: Mapping[str, tuple[Identity, str]]) -> str | None:
    """A flat links page of `files`, with `#sha256=` for those whose hash is known; None when
    none is (then the folder itself is the better find-links: nothing to gain)."""
    import html  # only here: what starts `lock` early (envbuild/lock/headstart.py) needs none

    lines = []
    hinted = False
    for path in files:
        href = file_url(path)
        digest = known(path, stored)
        if digest is not None:
            href += f"#sha256={digest}"
            hinted = True
        name = html.escape(os.path.basename(path))
        lines.append(f'<a href="{html.escape(href, quote=True)}">{name}</a><br>')
    if not hinted:
        return None
    return "<!DOCTYPE html>\n<html><body>\n" + "\n".join(lines) + "\n</body></html>\n"


def local_path(url: str) -> str | None:
    """The path of a file:// URL (or an absolute path), else None."""
    if url.startswith("file:"):
        from urllib.parse import unquote, urlsplit

        return unquote(urlsplit(url).path)
    return url if url.startswith("/") else None
