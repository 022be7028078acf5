"""`uv pip compile` started before `envbuild lock` knows it needs it: the lock's head start.

Before it can start uv, `envbuild lock` reads the request, loads the matrix, resolves the
stack and imports what that takes (about 0.25 s on a 2-core machine); uv then spends most of
its time waiting on the index (benchmarks/RESULTS.md, section 3). When a folder is locked
again with the same flags and unchanged files, uv's command is almost always the one the
previous lock of that folder ran. So the commands (a lock with a source package runs uv
about five times) start at once, beside envbuild's own work and each other, and a result is
taken only when the command envbuild then builds in that turn is the same one: argv, every
file of uv's working folder, the environment, and the identity (`envbuild.lock.wheelhashes`) of
every wheel in the local find-links folders it reads. Anything else and it is killed with
those after it, and uv runs as it always did: the lock is the same either way, only sooner.

What the last successful lock of a folder ran is kept in the user cache, one small JSON file
per folder and set of flags, written atomically and read only when it is the user's own. A
record names no program of its own: it keeps uv's arguments, and the path and file identity
of the uv it ran, and a head start runs only the uv this run would use (`uvenv.find_uv`),
when it is that path and still that file (docs/reliability.md, "No code from records"). Imports only the standard library, `envbuild.core.usercache`,
`wheelhashes` and `uvenv`: the lock command starts it before it imports the lock path.

This is envbuild's one start-up tuning, and `ENVBUILD_NO_HEADSTART=1` its one off switch
(docs/caches.md): the lock is the same without it, only later.
"""

from __future__ import annotations

import binascii
import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from envbuild.core import interrupts, usercache
from envbuild.lock import wheelhashes
from envbuild.lock.uvenv import find_uv, isolated_env

if TYPE_CHECKING:
    from pathlib import Path  # annotations only: pathlib's import would delay the start

    from envbuild.lock.pins import Runner, RunResult

FOLDER = "headstart"
WORK = "\0work\0"
"""Stands for uv's working folder in a kept command (each run has its own temporary one):
no argument can hold a NUL byte, so nothing real is ever taken for it."""
FORMAT = 4
MAX_AHEAD = 8
"""At most this many commands start ahead (a lock with source packages runs about five)."""
DISABLE_ENV = "ENVBUILD_NO_HEADSTART"
"""Set to 1 to start uv only once envbuild has built its command (the lock is the same)."""


def record_key(image_dir: str | Path, options: Sequence[str]) -> str:
    """What a kept command is for: this envbuild, the folder, the flags."""
    from envbuild import __version__

    return json.dumps([__version__, os.path.realpath(image_dir), list(options)])


def record_path(key: str) -> str:
    """Where the command of the last lock with this `record_key` is kept (a checksum names
    the file; the record holds the whole key, compared exactly)."""
    name = f"{binascii.crc32(key.encode()):08x}"
    return os.path.join(usercache.user_cache_dir(), FOLDER, f"{name}.json")


def inputs_stamp(image_dir: str | Path) -> str:
    """What the image folder's plain files are (name, size, mtime, ctime, inode), without
    opening any: a changed envbuild.toml or lock, or a new file, makes a new stamp. Only
    decides whether to try; the exact comparison decides whether to use."""
    entries = []
    with contextlib.suppress(OSError), os.scandir(image_dir) as it:
        for e in it:
            with contextlib.suppress(OSError):
                if e.is_file():
                    st = e.stat()
                    entries.append([e.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
    return json.dumps(sorted(entries))


def read_record(path: str) -> dict[str, Any] | None:
    """The kept commands, or None when absent, not the user's own, or not what this writes."""
    raw = usercache.read(path)  # the user's own, no FIFO, bounded (fsio.read_input)
    try:
        data = json.loads(raw) if raw is not None else {}
    except (ValueError, RecursionError):
        return None
    ok = (
        isinstance(data, dict)
        and data.get("format") == FORMAT
        and isinstance(data.get("key"), str)
        and isinstance(data.get("inputs"), str)
        and isinstance(data.get("uv"), list)
        and isinstance(data.get("calls"), list)
        and all(_is_call(c) for c in data["calls"])
    )
    return data if ok and data["calls"] else None


def _is_call(call: object) -> bool:
    return (
        isinstance(call, dict)
        and isinstance(call.get("args"), list)
        and all(isinstance(a, str) for a in call["args"])
        and isinstance(call.get("files"), dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in call["files"].items())
        and isinstance(call.get("watch"), list)
        and all(isinstance(p, str) for p in call["watch"])
    )


def read_folder(folder: str | Path) -> dict[str, str]:
    """The text of every plain file in uv's working folder (what envbuild wrote for uv)."""
    out = {}
    for e in sorted(os.scandir(folder), key=lambda e: e.name):
        if e.is_file(follow_symlinks=False):
            with open(e.path, encoding="utf-8", errors="surrogateescape", newline="") as f:
                out[e.name] = f.read()
    return out


def find_links(argv: Sequence[str]) -> list[str]:
    """The `--find-links` values of `argv`: local folders, links pages (in uv's folder) or
    URLs."""
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--find-links"]


# What envbuild.lock.pins.uv_argv and pin write, named here (that module's import would come
# before the start; tests/unit/lock/test_headstart.py checks that they agree). A record whose
# arguments or files are not of this shape starts nothing: through `--python`, a uv config
# file or an option line, a record could otherwise choose a program for uv to run.
_SUBCOMMAND = ["pip", "compile", "requirements.in"]
_FLAGS = frozenset(
    ("--generate-hashes", "--no-python-downloads", "--no-config", "--quiet", "--offline")
)
_VALUED = frozenset(
    (
        "--python-version",
        "--python-platform",
        "--only-binary",
        "--index-url",
        "--extra-index-url",
        "--find-links",
        "--upgrade-package",
        "--no-binary",
    )
)
_FIXED = {
    "--format": "pylock.toml",
    "--output-file": "pylock.toml",
    "--constraint": "constraints.txt",
    "--config-file": "uv-dependency-metadata.toml",
}
_FILE_NAMES = re.compile(
    r"requirements\.in|constraints\.txt|pylock\.toml|uv-dependency-metadata\.toml"
    r"|find-links-[0-9]+\.html"
)
_METADATA_LINE = re.compile(
    r'|\[\[dependency-metadata\]\]|(?:name|version) = "(?:[^"\\]|\\.)*"'
    r'|requires-dist = \[(?:"(?:[^"\\]|\\.)*"(?:, )?)*\]'
)


def envbuild_shaped(args: Sequence[str], files: Mapping[str, str]) -> bool:
    """Whether a kept command (uv's arguments after the program, and the files of its folder)
    is one `envbuild lock` writes: `pip compile requirements.in`, only the options it passes
    (`--python` only as this interpreter), its own file names, no option line in a
    requirements file, and a config file of `[[dependency-metadata]]` tables alone."""
    if list(args[:3]) != _SUBCOMMAND:
        return False
    rest = list(args[3:])
    while rest:
        option = rest.pop(0)
        if option in _FLAGS:
            continue
        if not rest:
            return False
        value = rest.pop(0)
        fine = (
            option in _VALUED
            or _FIXED.get(option) == value
            or (option == "--python" and value == sys.executable)
        )
        if not fine:
            return False
    for name, text in files.items():
        if not _FILE_NAMES.fullmatch(name):
            return False
        lines = text.splitlines()
        if name.endswith((".in", ".txt")) and any(ln.lstrip().startswith("-") for ln in lines):
            return False
        metadata = name.endswith(".toml") and name != "pylock.toml"
        if metadata and not all(_METADATA_LINE.fullmatch(ln) for ln in lines):
            return False
    return True


def generic(argv: Sequence[str], work: str | Path) -> list[str]:
    """`argv` with its working folder written as WORK."""
    return [a.replace(os.fspath(work), WORK) for a in argv]


def specific(argv: Sequence[str], work: str | Path) -> list[str]:
    return [a.replace(WORK, os.fspath(work)) for a in argv]


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
        f.write(text)


def _private_folder() -> str:
    """A new folder only this user can enter, in $TMPDIR or /tmp (tempfile's own import, with
    shutil's archive modules, would be most of this module's start)."""
    base = os.environ.get("TMPDIR") or "/tmp"
    for _ in range(8):
        # The pid in the name: a folder left by a SIGKILLed lock is removed by the next
        # (`envbuild.core.fsio.remove_dead_temp`).
        path = os.path.join(base, f"envbuild-headstart-{os.getpid()}-{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no new folder could be made in {base}")


_FILE_HREF = re.compile(r'href="file://([^"#]+)')


def local_files(argv: Sequence[str]) -> list[str]:
    """Every local file uv may read through the `--find-links` of `argv`: each file in a
    local folder, each `file://` link of a links page (envbuild.lock.wheelhashes writes them)."""
    import html
    from urllib.parse import unquote

    out: set[str] = set()
    for link in find_links(argv):
        if os.path.isdir(link):
            with contextlib.suppress(OSError), os.scandir(link) as it:
                out.update(e.path for e in it if e.is_file())
        elif os.path.isfile(link):
            with contextlib.suppress(OSError, ValueError), open(link, encoding="utf-8") as f:
                out.update(unquote(html.unescape(m)) for m in _FILE_HREF.findall(f.read()))
    return sorted(out)


def identities(paths: Sequence[str]) -> list[object]:
    """The stat identity of each path (None for one that is gone)."""
    return [wheelhashes.file_identity(p) for p in paths]


class Started:
    """uv running in its own working folder, its output going to files beside it. `watch`:
    the local files its command may read (`local_files`), whose identities are taken now."""

    def __init__(
        self,
        argv: Sequence[str],
        files: Mapping[str, str],
        env: Mapping[str, str],
        watch: Sequence[str] = (),
    ):
        self.argv = list(argv)
        self.files = dict(files)
        self.env = dict(env)
        self.watch = list(watch)
        self.wheels = identities(self.watch)
        self.home = _private_folder()
        self.work = os.path.join(self.home, "work")
        self.proc: subprocess.Popen[bytes] | None = None
        self._fds: list[int] = []
        try:
            os.mkdir(self.work)
            for name, text in files.items():
                if "/" in name or name in ("", ".", ".."):
                    raise OSError(f"not a file name: {name!r}")
                _write(os.path.join(self.work, name), text)
            # Files, not pipes: nothing reads uv's output until it ends.
            for name in ("stdout", "stderr"):
                flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                self._fds.append(os.open(os.path.join(self.home, name), flags, 0o600))
            # In envbuild's own process group, not a session of its own: a SIGHUP of the
            # terminal or a SIGKILL of the group ends uv with envbuild (docs/reliability.md,
            # "Signals and processes"); close() kills it when envbuild ends on its own.
            with interrupts.start_child():  # a SIGTERM lands after self.proc is set
                self.proc = subprocess.Popen(
                    specific(argv, self.work),
                    cwd=self.work,
                    env=self.env,
                    stdout=self._fds[0],
                    stderr=self._fds[1],
                )
        except BaseException:
            self.close()
            raise

    def same(self, call: Mapping[str, Any], env: Mapping[str, str]) -> bool:
        """Is `call` (argv, files, watch as the runner records them) with `env` the command
        this runs, reading the same local files, none of them changed since it started? (uv
        may have read a file before it changed: the hash it reports would then be remembered
        for the new bytes, envbuild.lock.wheelhashes.)"""
        if (call["argv"], call["files"], dict(env)) != (self.argv, self.files, self.env):
            return False
        return call["watch"] == self.watch and identities(self.watch) == self.wheels

    def finish(self, into: str | Path) -> tuple[int, str, str]:
        """Wait for uv, copy what it wrote into `into`; (returncode, stdout, stderr)."""
        assert self.proc is not None  # set by __init__, or it raised
        code = self.proc.wait()
        for name, text in read_folder(self.work).items():
            if self.files.get(name) != text:
                _write(os.path.join(into, name), text)
        return code, _read(self._fds[0]), _read(self._fds[1])

    def close(self) -> None:
        """Kill uv if it still runs; remove its folder and output."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.kill()
            self.proc.wait()
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        import shutil  # only here: its import would delay the start

        shutil.rmtree(self.home, ignore_errors=True)


def _read(fd: int) -> str:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0).decode(errors="replace")


class HeadStart:
    """The head start of one `envbuild lock` run (a context manager: leaving it kills what
    still runs). A lock may run uv several times (a source package's rounds, a builder
    stage's pins): each kept command starts at once and is taken in its turn."""

    def __init__(
        self,
        key: str,
        inputs: str,
        started: Sequence[Started | None],
        uv: Sequence[object] = (),
    ) -> None:
        self.key = key
        self.inputs = inputs
        self.started = list(started)
        self.uv = list(uv)
        """[path, file identity] of the uv this run uses (`uv_in_use`); [] when none."""
        self.foreign = False
        """A command of this run was not that uv: nothing of the run is kept."""
        self.taken = 0
        """How many commands came from what was started ahead."""
        self._calls: list[dict[str, Any]] = []

    @property
    def used(self) -> bool:
        return self.taken > 0

    def __enter__(self) -> HeadStart:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close()
        # Kept once the whole lock went through: what failed is not worth starting again.
        if exc_type is None and self.key and self._calls and self.uv and not self.foreign:
            body = {"format": FORMAT, "key": self.key, "inputs": self.inputs, "uv": self.uv}
            body["calls"] = [
                {"args": c["argv"][1:], "files": c["files"], "watch": c["watch"]}
                for c in self._calls
            ]
            text = json.dumps(body, sort_keys=True).encode()
            usercache.write_bytes(record_path(self.key), text)

    def close(self, first: int = 0) -> None:
        """Kill and remove the commands from index `first` on."""
        for i in range(first, len(self.started)):
            started = self.started[i]
            self.started[i] = None
            if started is not None:
                started.close()

    def runner(self, fallback: Runner) -> Runner:
        """Each command is taken from the one started in its place when it is the same;
        once one is not, the rest started ahead are killed and `fallback` runs them all."""

        def run(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> RunResult:
            if not self.key:  # idle: nothing started, nothing to keep
                return fallback(argv, cwd, env)
            call: dict[str, Any] = {"argv": generic(argv, cwd), "files": read_folder(cwd)}
            ours = bool(self.uv) and argv[0] == self.uv[0]
            if not ours or not envbuild_shaped(call["argv"][1:], call["files"]):
                self.foreign = True  # pip, another uv or another command: nothing to keep
                self.close()
                return fallback(argv, cwd, env)
            i = len(self._calls)
            call["watch"] = local_files(argv)
            self._calls.append(call)
            result = self._take(i, call, env, cwd)
            if result is None:
                self.close(i)
                result = fallback(argv, cwd, env)
            return result

        return run

    def _take(
        self, i: int, call: Mapping[str, Any], env: Mapping[str, str], cwd: Path
    ) -> RunResult | None:
        from envbuild.lock.pins import RunResult

        started = self.started[i] if i < len(self.started) else None
        if started is None:
            return None
        self.started[i] = None
        try:
            if not started.same(call, env):
                return None
            self.taken += 1
            return RunResult(*started.finish(cwd))
        finally:
            started.close()


def idle() -> HeadStart:
    """A head start that starts nothing and keeps nothing (`lock --check`)."""
    return HeadStart("", "", ())


def begin(
    image_dir: str | Path,
    options: Sequence[str],
    *,
    environ: Mapping[str, str] | None = None,
    start: Callable[
        [Sequence[str], Mapping[str, str], Mapping[str, str], Sequence[str]], Started
    ] = Started,
) -> HeadStart:
    """Start the commands the last lock of `image_dir` with these `options` ran, when the
    folder's files are as they were then; a HeadStart that starts nothing otherwise."""
    environ = os.environ if environ is None else environ
    if environ.get(DISABLE_ENV) == "1":
        return idle()
    key = record_key(image_dir, options)
    inputs = inputs_stamp(image_dir)
    uv = uv_in_use(environ)
    record = read_record(record_path(key))
    started: list[Started | None] = []
    if (
        record is not None
        and uv
        and record["key"] == key
        and record["inputs"] == inputs
        and record["uv"] == uv
        and all(envbuild_shaped(c["args"], c["files"]) for c in record["calls"])
    ):
        env = isolated_env(environ)
        try:
            for call in record["calls"][:MAX_AHEAD]:
                argv = [str(uv[0]), *call["args"]]  # this run's uv, never the record's choice
                started.append(start(argv, call["files"], env, call["watch"]))
        except (OSError, ValueError):
            pass  # the rest run in their turn, as without a head start
        except BaseException:
            HeadStart(key, inputs, started, uv).close()
            raise
    return HeadStart(key, inputs, started, uv)


def uv_in_use(environ: Mapping[str, str]) -> list[object]:
    """[path, file identity] of the uv this lock would run (`uvenv.find_uv`, as
    `envbuild.lock.pins.select_tool` picks it); [] when it runs pip or finds no uv file. A
    record of another path, or of a file since replaced at that path, starts nothing."""
    if environ.get("ENVBUILD_PYDEPS") == "pip":
        return []
    path = find_uv(environ, sys.executable)
    identity = wheelhashes.file_identity(path) if path else None
    return [path, identity] if identity is not None else []


def lock_options(
    upgrade: bool, offline: bool, upgrade_packages: Sequence[str], environ: Mapping[str, str]
) -> list[str]:
    """The flags a kept command is for (`record_key`), as the lock command reads them. The
    overlay variable is envbuild/matrix/load.py's OVERLAY_ENV, named here: that module's
    import would come before the start."""
    overlay = environ.get("ENVBUILD_MATRIX_OVERLAY", "")
    return [f"upgrade={upgrade}", f"offline={offline}", f"overlay={overlay}", *upgrade_packages]
