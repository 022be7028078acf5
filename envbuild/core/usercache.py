"""The user cache folder and the two rules every file in it follows.

Files (docs/caches.md lists each, what it holds and how to clear it): the compiled matrix
(`envbuild.core.compiled`), the hashes of local wheel files (`envbuild.lock.wheelhashes`),
the uv commands of a folder's last lock (`envbuild.lock.headstart`) and smoke passes
(`envbuild.build.passes`). Each is written atomically (`write_bytes`) and read only when it
is the user's own (`own`), through the input reader (`read`: no FIFO, bounded); a missing
or unreadable one means "not cached", never an error.
"""

from __future__ import annotations

import contextlib
import os

from envbuild.core import fsio
from envbuild.core.errors import UserError

CACHE_DIR_ENV = "ENVBUILD_CACHE_DIR"


def user_cache_dir() -> str:
    """$ENVBUILD_CACHE_DIR, else `$XDG_CACHE_HOME/envbuild`, else `~/.cache/envbuild`."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return override
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "envbuild")


MAX_BYTES = 64 << 20
"""The largest cache file read (the compiled matrix is about 220 kB, the wheel hashes at
their LIMIT about 600 kB)."""


def own(st: os.stat_result) -> bool:
    """A cache file is used only when it is the user's own and nobody else can write it: what
    it says decides what envbuild trusts (a hash, a pass, a compiled value)."""
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def read(path: str, *, limit: int = MAX_BYTES) -> bytes | None:
    """The bytes of a cache file, read through the input reader (`fsio.read_input`: opened
    without blocking, a FIFO, device or folder refused, at most `limit` bytes) when it is the
    user's own (`own`); None for anything else (absent, unreadable, refused): not cached."""
    try:
        return fsio.read_input(path, what="the cache file", limit=limit, accept=own)
    except (OSError, UserError):
        return None


def write_bytes(path: str, data: bytes) -> None:
    """Atomic, best-effort write of a cache file (mode 0600, in a 0700 folder): a reader sees
    the old file or the new one; a folder that cannot be written means no cache."""
    import tempfile

    tmp = ""
    try:
        folder = os.path.dirname(path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
