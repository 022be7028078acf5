"""Values kept compiled (pickled) in the user cache folder, so a later process skips the work
that made them (the parsed matrix: `envbuild.matrix.load`).

A cached value is used only when it cannot be stale:
- the caller's `key` names every input (the matrix: a hash of the files' text, the overlay and
  envbuild's version) and must match the one stored;
- every module that defines a class inside the value (found while pickling), and every module
  the caller names as having made it (the parser), must still be the file it was then (path,
  size, mtime_ns): a changed row type or parser never serves old data.
Anything else (a missing, truncated, corrupt or foreign file, a failed write) means "not
cached": the caller rebuilds and the next write replaces the file (atomic rename). The file
is the user's own: one that another user owns or others can write is never loaded
(unpickling runs code, https://docs.python.org/3/library/pickle.html).
"""

from __future__ import annotations

import binascii
import contextlib
import io
import os
import pickle
import sys
from pathlib import Path
from typing import Any

CACHE_DIR_ENV = "ENVBUILD_CACHE_DIR"
_MAGIC = b"envbuild-compiled 1\n"

ModuleStamp = tuple[str, str, int, int]
"""(module name, file, size, mtime_ns)."""


def cache_dir() -> Path:
    """$ENVBUILD_CACHE_DIR, else `$XDG_CACHE_HOME/envbuild`, else `~/.cache/envbuild`."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envbuild"


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


class _Recorder(pickle.Pickler):
    """A pickler that notes the module of every class it meets."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.modules: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        cls = obj if isinstance(obj, type) else type(obj)
        self.modules.add(cls.__module__)
        return NotImplemented


def read(path: Path, key: str) -> Any | None:
    """The value stored at `path` under `key`; None when absent, stale, corrupt or not the
    user's own file."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                return None
            if f.read(len(_MAGIC)) != _MAGIC:
                return None
            header = pickle.load(f)
            if not isinstance(header, dict) or header.get("key") != key:
                return None
            if not _fresh(list(header.get("modules", ()))):
                return None
            return pickle.load(f)
    except Exception:  # a corrupt cache is a miss, never an error
        return None


def write(path: Path, key: str, value: Any, *, made_by: tuple[str, ...] = ()) -> None:
    """Store `value` under `key` at `path` (atomic: a reader sees the old file or the new
    one). `made_by`: modules whose code made the value (its parser), checked on read like
    the modules of its classes. Best effort: a cache that cannot be written is skipped."""
    body = io.BytesIO()
    pickler = _Recorder(body)
    try:
        pickler.dump(value)
    except Exception:
        return
    stamps = [s for s in map(_stamp, sorted({*pickler.modules, *made_by})) if s is not None]
    header = pickle.dumps({"key": key, "modules": stamps}, protocol=pickle.HIGHEST_PROTOCOL)
    _write_bytes(path, _MAGIC + header + body.getvalue())


# --- dataclass methods --------------------------------------------------------------------
#
# Python before 3.13 compiles every method a dataclass generates (__init__, __repr__, __eq__,
# __hash__, and __setattr__/__delattr__ when frozen) from source text while the module that
# defines the class is imported: `dataclasses._create_fn` calls `exec(text, ...)`. With
# envbuild's frozen value types (models, matrix rows, resolver state) that compiling was the
# largest part of a short command's time (benchmarks/RESULTS.md, CLI start). The CLI keeps
# the code objects, keyed by their exact source text and the interpreter, in the user cache,
# as Python keeps a module's code in a .pyc: same text, same code, only not compiled again.

_DC_STORED: dict[str, bytes] = {}
"""Source text -> marshalled code, as read from the file (unmarshalled one by one on use:
turning every stored code object back at start-up would cost more than it saves)."""
_DC_NEW: dict[str, bytes] = {}
_DC_STATE: dict[str, Path | None] = {}
_DC_LIMIT = 4000
"""Entries kept; past it the file starts over (each envbuild version adds its own texts)."""


def _dataclass_code_path() -> Path:
    tag = sys.implementation.cache_tag or "python"
    # marshal's format belongs to one interpreter build: its version string names the file.
    build = binascii.crc32(sys.version.encode())
    return cache_dir() / f"dataclass-code-{tag}-{build:08x}.marshal"


def _load_dataclass_code(path: Path) -> None:
    import marshal

    with contextlib.suppress(Exception), open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_uid == os.getuid() and not st.st_mode & 0o022:
            loaded = marshal.loads(f.read())
            if isinstance(loaded, dict):
                _DC_STORED.update(loaded)


def _exec_cached(source: Any, globals: Any = None, locals: Any = None) -> None:
    """`exec` for `dataclasses`: a source text seen before runs its cached code object."""
    import marshal

    if isinstance(source, str):
        if "path" not in _DC_STATE:  # the first dataclass of this process: read the file
            _DC_STATE["path"] = path = _dataclass_code_path()
            _load_dataclass_code(path)
        stored = _DC_STORED.get(source)
        code = None
        if stored is not None:
            with contextlib.suppress(Exception):
                code = marshal.loads(stored)
        if code is None:
            # dont_inherit: compiled as dataclasses.py's own exec compiles it (no __future__
            # flags of this module), under the same file name.
            code = compile(source, "<string>", "exec", dont_inherit=True)
            _DC_STORED[source] = _DC_NEW[source] = marshal.dumps(code)
        source = code
    exec(source, globals, locals)


def reuse_dataclass_code() -> None:
    """Route `dataclasses`' exec through the code cached in the user cache folder; new texts
    are written back at exit. Call once, before the modules that define dataclasses are
    imported (the CLI's `main`). Best effort: a missing or bad file is compiled anew."""
    import atexit
    import dataclasses

    if getattr(dataclasses, "exec", None) is _exec_cached:
        return
    # `exec` is looked up in the module's globals before the builtins.
    dataclasses.exec = _exec_cached  # type: ignore[attr-defined]
    atexit.register(_save_dataclass_code)


def _save_dataclass_code() -> None:
    import marshal

    path = _DC_STATE.get("path")
    if not _DC_NEW or path is None:
        return
    keep = _DC_STORED if len(_DC_STORED) <= _DC_LIMIT else _DC_NEW
    _write_bytes(path, marshal.dumps(keep))


def _write_bytes(path: Path, data: bytes) -> None:
    """Atomic, best-effort write of a cache file (mode 0600 in a 0700 folder)."""
    import tempfile

    tmp = ""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
