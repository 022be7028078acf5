"""Values kept compiled (pickled) in the user cache folder, so a later process skips the work
that made them (the parsed matrix: `envbuild.matrix.load`).

A cached value is used only when it cannot be stale:
- the caller's `key` names every input and must equal the one stored (the matrix: each
  file's name, size, mtime, ctime and inode in both folders, and envbuild's version);
- every module that defines a class inside the value (found while pickling), and every module
  the caller names as having made it (the parser), must still be the file it was then (path,
  size, mtime_ns): a changed row type or parser never serves old data.
Anything else (a missing, stale or foreign file, a failed write) means "not cached": the
caller rebuilds and the next write replaces the file (atomic rename); a truncated or corrupt
file of the user's is removed on reading. The file
is the user's own: one that another user owns or others can write is never loaded
(unpickling runs code, https://docs.python.org/3/library/pickle.html).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import TYPE_CHECKING, Any

from envbuild.core import usercache

if TYPE_CHECKING:
    from pathlib import Path

_MAGIC = b"envbuild-compiled 1\n"

ModuleStamp = tuple[str, str, int, int]
"""(module name, file, size, mtime_ns)."""


def cache_dir() -> Path:
    """$ENVBUILD_CACHE_DIR, else `$XDG_CACHE_HOME/envbuild`, else `~/.cache/envbuild`."""
    from pathlib import Path

    return Path(usercache.user_cache_dir())


def cache_file(name: str) -> str:
    """`cache_dir() / name` as a string (no pathlib import: `envbuild resolve` reads the
    compiled matrix through it)."""
    return os.path.join(usercache.user_cache_dir(), name)


def _stamp(module: str) -> ModuleStamp | None:
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (module, str(path), st.st_size, st.st_mtime_ns)


def _fresh(stamps: list[ModuleStamp]) -> bool:
    for _module, path, size, mtime_ns in stamps:
        try:
            st = os.stat(path)
        except OSError:
            return False
        if st.st_size != size or st.st_mtime_ns != mtime_ns:
            return False
    return True


def _unpickle() -> Any:
    """`pickle.load` without importing pickle.py (its pure-Python pickler classes are a
    visible part of a short command's time): the C accelerator it would use anyway."""
    try:
        import _pickle

        return _pickle.load
    except ImportError:  # not CPython
        import pickle

        return pickle.load


def read(path: str | Path, key: str) -> Any | None:
    """The value stored at `path` under `key`; None when absent, stale, corrupt (the file is
    then removed) or not the user's own file. Never raises."""
    try:
        with open(path, "rb") as f:
            if not usercache.own_file(f.fileno()):
                return None
            try:
                return _load_fresh(f, key)
            except Exception:  # corrupt (truncated, garbage, a class gone): dropped, no error
                pass
    except OSError:  # absent or unreadable: not cached
        return None
    with contextlib.suppress(OSError):
        os.unlink(path)
    return None


def _load_fresh(f: Any, key: str) -> Any | None:
    if f.read(len(_MAGIC)) != _MAGIC:
        return None
    load = _unpickle()
    header = load(f)
    if not isinstance(header, dict) or header.get("key") != key:
        return None
    if not _fresh(list(header.get("modules", ()))):
        return None
    return load(f)


def write(path: str | Path, key: str, value: Any, *, made_by: tuple[str, ...] = ()) -> None:
    """Store `value` under `key` at `path` (atomic: a reader sees the old file or the new
    one). `made_by`: modules whose code made the value (its parser), checked on read like
    the modules of its classes. Best effort: a cache that cannot be written is skipped."""
    import pickle

    modules: set[str] = set()

    class Recorder(pickle.Pickler):
        """A pickler that notes the module of every class it meets."""

        def reducer_override(self, obj: Any) -> Any:
            cls = obj if isinstance(obj, type) else type(obj)
            modules.add(cls.__module__)
            return NotImplemented

    body = io.BytesIO()
    pickler = Recorder(body, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        pickler.dump(value)
    except Exception:
        return
    stamps = [s for s in map(_stamp, sorted({*modules, *made_by})) if s is not None]
    header = pickle.dumps({"key": key, "modules": stamps}, protocol=pickle.HIGHEST_PROTOCOL)
    usercache.write_bytes(str(path), _MAGIC + header + body.getvalue())
