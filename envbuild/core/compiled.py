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
is the user's own: one that another user owns or others can write is never loaded.

Nothing in the file can run code (docs/reliability.md, "Caches that cannot hurt"): the
header is JSON, and the value is unpickled with its globals restricted to the classes the
caller `allowed` (the matrix row types), as the pickle documentation's "Restricting Globals"
shows (https://docs.python.org/3/library/pickle.html#restricting-globals): a planted
`os.system` or `builtins.eval` is refused before it is called, and the file dropped. The
file is read through `fsio.read_input` (no FIFO, at most MAX_BYTES), so the unpickler only
ever sees bytes in memory, and only when they are the bytes written (a CRC-32 in the
header: corruption is a miss, never a value of the wrong shape); the value must then be of
the type the caller expects.
"""

from __future__ import annotations

import binascii
import contextlib
import io
import json
import os
import sys
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from envbuild.core import usercache

if TYPE_CHECKING:
    from pathlib import Path

_MAGIC = b"envbuild-compiled 2\n"
"""Version 1 had a pickled header and an unrestricted body: never read again."""
MAX_BYTES = 64 << 20
"""The largest compiled file read (the shipped matrix compiles to about 220 kB)."""

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


def _unpickler() -> Any:
    """The C unpickler class without importing pickle.py (its pure-Python classes are a
    visible part of a short command's time)."""
    try:
        import _pickle

        return _pickle.Unpickler
    except ImportError:  # not CPython
        import pickle

        return pickle.Unpickler


def _restricted_load(data: bytes, allowed: Collection[type]) -> Any:
    """The value pickled in `data`, every global it names being one of `allowed` (classes);
    anything else raises before it is looked up, let alone called."""
    classes = {(cls.__module__, cls.__qualname__): cls for cls in allowed}
    base = _unpickler()

    class Restricted(base):  # type: ignore[misc, valid-type]
        def find_class(self, module: str, name: str) -> Any:
            found = classes.get((module, name))
            if found is None:
                raise ValueError(f"global {module}.{name} is not allowed in a compiled value")
            return found

    return Restricted(io.BytesIO(data)).load()


def read(
    path: str | Path, key: str, *, allowed: Collection[type] = (), kind: type = object
) -> Any | None:
    """The value stored at `path` under `key`; None when absent, stale, corrupt (the file is
    then removed), not the user's own file (`usercache.read`), naming a class outside
    `allowed`, or not an instance of `kind`. Never raises."""
    data = usercache.read(os.fspath(path), limit=MAX_BYTES)
    if data is None:
        return None
    try:
        value = _load_fresh(data, key, allowed)
        if value is None or isinstance(value, kind):
            return value
    except Exception:  # corrupt (truncated, garbage, a class not allowed): dropped, no error
        pass
    with contextlib.suppress(OSError):
        os.unlink(path)
    return None


def _load_fresh(data: bytes, key: str, allowed: Collection[type]) -> Any | None:
    if not data.startswith(_MAGIC):
        return None
    end = data.index(b"\n", len(_MAGIC))
    header = json.loads(data[len(_MAGIC) : end])
    if not isinstance(header, dict) or header.get("key") != key:
        return None
    stamps = header.get("modules")
    if not isinstance(stamps, list) or not _fresh([_stamp_of(s) for s in stamps]):
        return None
    body = data[end + 1 :]
    if header.get("crc32") != binascii.crc32(body):
        raise ValueError("the body is not the one written (corrupt)")
    return _restricted_load(body, allowed)


def _stamp_of(item: Any) -> ModuleStamp:
    module, path, size, mtime_ns = item  # a wrong shape raises: the file is corrupt
    if not (isinstance(path, str) and isinstance(size, int) and isinstance(mtime_ns, int)):
        raise ValueError("a module stamp of the wrong type")
    return (str(module), path, size, mtime_ns)


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
    data = body.getvalue()
    header = {"key": key, "modules": stamps, "crc32": binascii.crc32(data)}
    text = json.dumps(header, separators=(",", ":"))
    usercache.write_bytes(str(path), _MAGIC + text.encode() + b"\n" + data)
