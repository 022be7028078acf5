"""The sha256 of local wheelhouse files, remembered between locks, so uv does not hash them
again.

`uv pip compile --format pylock.toml --generate-hashes` reads and hashes every local
find-links wheel it picks on every run (torch-cpu's 192 MB wheel: about 1 s, measured with
strace: `requirements.txt` output takes the hash from uv's cache, PEP 751 output does not).
A flat page of links (PEP 503's `#sha256=` fragment, a `--find-links` form uv documents) that
names the same files with their hashes makes uv use the hash it is given instead.

The hashes come from uv's own earlier output and are kept per file under its full `stat`
identity (path, device, inode, size, mtime and ctime in ns) and the time that identity was
taken, before uv read the file. A record is trusted only while the file's bytes are the ones
it describes (docs/reliability.md, "Caches that cannot hurt"): an unchanged identity is
enough only when the file's last change was RACY_S before the identity was taken (as git's
index treats "racily clean" files, https://git-scm.com/docs/racy-git: a rewrite within one
timestamp tick keeps every stat field); any other case (an older record without that time, a
recent change, another identity) is a doubt, and the file is hashed here and must match. A
wrong hash could not go unnoticed anyway (the build installs with `--require-hashes`), but
it would be written into the lock. The cache file is read as an input
(`usercache.read`: the user's own, no FIFO, bounded); anything unreadable means "no hashes".
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from envbuild.core import usercache

FILE_NAME = "wheel-hashes.json"
LIMIT = 2000
"""Entries kept; past it the file starts over."""
RACY_S = 2
"""A file changed less than this before its identity was taken may change again without a
new identity (coarse timestamps: one jiffy on Linux, 2 s on FAT); its record is re-hashed."""

Identity = list[int]
Record = tuple[Identity, str, int]
"""(identity, sha256 hex, when the identity was taken in ns since the epoch; 0: unknown)."""


@dataclass(frozen=True)
class Snapshot:
    """The identities of the local wheels before uv ran, and when they were taken."""

    identities: dict[str, Identity] = field(default_factory=dict)
    taken_ns: int = 0

    def __bool__(self) -> bool:
        return bool(self.identities)


def _path() -> str:
    return os.path.join(usercache.user_cache_dir(), FILE_NAME)


def file_identity(path: str) -> Identity | None:
    """The file's stat identity (device, inode, size, mtime and ctime in ns); None if gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def load() -> dict[str, Record]:
    """path -> record as stored; {} when absent, foreign or corrupt."""
    data = usercache.read(_path())
    try:
        doc = json.loads(data) if data is not None else {}
        return {str(k): _record(v) for k, v in doc.items() if isinstance(v, list) and len(v) >= 2}
    except (ValueError, TypeError, AttributeError, RecursionError):
        return {}


def _record(value: list[object]) -> Record:
    identity, digest = value[0], value[1]
    taken = value[2] if len(value) > 2 else 0
    if not (isinstance(identity, list) and all(type(i) is int for i in identity)):
        raise TypeError("an identity is a list of integers")
    return identity, str(digest), taken if type(taken) is int else 0


def file_sha256(path: str) -> str | None:
    """The sha256 of a regular file's bytes (streamed), or None when it cannot be read; a
    FIFO or device is not opened for reading (O_NONBLOCK, then fstat)."""
    import hashlib

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.sha256()
        try:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        except OSError:
            return None
    return digest.hexdigest()


def _racy(identity: Identity, taken_ns: int) -> bool:
    changed = max(identity[3], identity[4])  # mtime, ctime (utime can move mtime, not ctime)
    return not taken_ns or changed >= taken_ns - RACY_S * 10**9


def known(path: str, stored: Mapping[str, Record]) -> str | None:
    """The stored sha256 of `path` when the file still holds the bytes it was taken from:
    trusted on its identity alone when that is unchanged and not racy, else (a doubt, or a
    cheap miss: another identity) only when the file hashes to it now."""
    entry = stored.get(path)
    if entry is None:
        return None
    identity = file_identity(path)
    if identity is None:
        return None
    if identity == entry[0] and not _racy(identity, entry[2]):
        return entry[1]
    return entry[1] if file_sha256(path) == entry[1] else None


def snapshot(links: Iterable[str]) -> Snapshot:
    """The identity of every wheel in the local wheels-only folders of `links`, taken before
    uv runs: a hash uv reports is stored only for a file that did not change meanwhile."""
    taken_ns = time.time_ns()
    out: dict[str, Identity] = {}
    for link in links:
        for path in wheels_only(link) or ():
            identity = file_identity(path)
            if identity is not None:
                out[path] = identity
    return Snapshot(out, taken_ns)


def remember(
    pairs: Iterable[tuple[str, str]],
    stored: Mapping[str, Record],
    before: Snapshot,
) -> None:
    """Store (path, sha256 hex) pairs taken from uv's output; best effort. A file whose
    identity is not the one `before` took (rewritten while uv ran, or not seen then) is left
    out: uv may have hashed the old bytes, or copied the hash it was handed."""
    pairs = list(pairs)
    new = dict(stored)
    changed = False
    for path, digest in pairs:
        identity = file_identity(path)
        if identity is None or identity != before.identities.get(path):
            continue
        old = new.get(path)
        if old is not None and old[:2] == (identity, digest) and not _racy(identity, old[2]):
            continue  # the same record, already trusted on its identity: nothing to write
        new[path] = (identity, digest, before.taken_ns)
        changed = True
    if not changed:
        return
    if len(new) > LIMIT:
        new = {p: new[p] for p, _ in pairs if p in new}
    body = {k: list(v) for k, v in sorted(new.items())}
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


def links_page(files: Iterable[str], stored: Mapping[str, Record]) -> str | None:
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
