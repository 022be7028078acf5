"""The user cache folder, and dataclass methods kept compiled in it.

Python before 3.13 compiles every method a dataclass generates (`__init__`, `__repr__`,
`__eq__`, `__hash__`, and `__setattr__`/`__delattr__` when frozen) from source text while the
module that defines the class is imported: `dataclasses._create_fn` calls `exec(text, ...)`.
For envbuild's frozen value types (models, matrix rows, resolver state) that compiling was
the largest part of a short command's time (benchmarks/RESULTS.md, CLI start). The CLI keeps
the code objects in the user cache, keyed by their exact source text and the interpreter
version, as Python keeps a module's code in a .pyc: the same text gives the same code, only
it is not compiled again.

Imports only what `import click` already loaded: `envbuild --help` pays nothing for it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

CACHE_DIR_ENV = "ENVBUILD_CACHE_DIR"

_STORED: dict[str, bytes] = {}
"""Source text -> marshalled code, as read from the file (unmarshalled one at a time on use:
turning every stored code object back at start-up would cost more than it saves)."""
_NEW: dict[str, bytes] = {}
_STATE: dict[str, str] = {}
LIMIT = 4000
"""Entries kept; past it the file starts over (each envbuild version adds its own texts)."""


def user_cache_dir() -> str:
    """$ENVBUILD_CACHE_DIR, else `$XDG_CACHE_HOME/envbuild`, else `~/.cache/envbuild`."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return override
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "envbuild")


def own_file(fd: int) -> bool:
    """A cache file is used only when it is the user's own and nobody else can write it:
    loading one (pickle, marshal) runs what it holds."""
    st = os.fstat(fd)
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


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


def dataclass_code_path(scope: str = "") -> str:
    """The file of one scope (a command's name; "" for none). One file per command: a
    command reads only the code of the classes it defines, not every command's (reading the
    file is most of what reusing the code costs)."""
    # marshal's format belongs to one Python version: its tag and hexversion name the file.
    name = f"dataclass-code-{sys.implementation.cache_tag}-{sys.hexversion:x}"
    if scope:
        name += f"-{scope}"
    return os.path.join(user_cache_dir(), name + ".marshal")


def _load(path: str) -> None:
    import marshal

    with contextlib.suppress(Exception), open(path, "rb") as f:
        if own_file(f.fileno()):
            loaded = marshal.loads(f.read())
            if isinstance(loaded, dict):
                _STORED.update(loaded)


def _exec_cached(source: Any, globals: Any = None, locals: Any = None) -> None:
    """`exec` for `dataclasses`: a source text seen before runs its stored code object."""
    import marshal

    if isinstance(source, str):
        if "path" not in _STATE:  # the first dataclass of this process: read the file
            _STATE["path"] = path = dataclass_code_path(_STATE.get("scope", ""))
            _load(path)
        stored = _STORED.get(source)
        code = None
        if stored is not None:
            with contextlib.suppress(Exception):
                code = marshal.loads(stored)
        if code is None:
            # dont_inherit: compiled as dataclasses.py's own exec compiles it (without this
            # module's __future__ flags), under the same file name.
            code = compile(source, "<string>", "exec", dont_inherit=True)
            _STORED[source] = _NEW[source] = marshal.dumps(code)
        source = code
    exec(source, globals, locals)


def reuse_dataclass_code(scope: str = "") -> None:
    """Route `dataclasses`' exec through the stored code; new texts are written back at exit.
    Call once, before the modules that define dataclasses are imported (the CLI's `main`).
    `scope`: which file (`dataclass_code_path`); a name of letters, digits and dashes.
    Best effort: a missing or bad file means compiling as Python does."""
    import atexit
    import dataclasses

    if getattr(dataclasses, "exec", None) is _exec_cached:
        return
    if scope.isascii() and scope.replace("-", "").isalnum():
        _STATE["scope"] = scope
    # `exec` in dataclasses.py is a global name: the module's globals come before builtins.
    dataclasses.exec = _exec_cached  # type: ignore[attr-defined]
    atexit.register(_save)


def _save() -> None:
    import marshal

    path = _STATE.get("path")
    if not _NEW or path is None:
        return
    keep = _STORED if len(_STORED) <= LIMIT else _NEW
    write_bytes(path, marshal.dumps(keep))
