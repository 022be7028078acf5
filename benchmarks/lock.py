"""Section 3 of `make bench`: `envbuild lock` beside `uv pip compile --generate-hashes` on the
same requirements, Python, platform and indexes (what a user would run by hand), per example
in images/, samples interleaved."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ENVBUILD,
    ROOT,
    UV,
    Row,
    Section,
    _checked,
    _log,
    _timed,
    interleaved,
    row,
)

LOCK_GOAL = 1.3
"""`envbuild lock` against `uv pip compile --generate-hashes` on the same input, warm cache."""
PEER_NAME = "`uv pip compile --generate-hashes`"


def _requirements_txt_pins(text: str) -> dict[str, str]:
    from packaging.utils import canonicalize_name

    pins = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;\\]+)", line)
        if m:
            pins[str(canonicalize_name(m.group(1)))] = m.group(2)
    return pins


def peer_lock_command(
    lock: Any, request: Any, *, image_dir: Path, uv: Sequence[str] = ("uv",)
) -> tuple[list[str], str]:
    """(argv, requirements.in text) of the peer: `pydeps.peer_compile_command`, plus
    `--no-binary NAME` for each package the lock takes from its sdist (images/torch-ext's
    envbuild-vecadd, which has no wheel). That is what a user adds by hand so that
    `--only-binary :all:` does not refuse the package (uv honours `--no-binary NAME` after it,
    as pip does); uv reads the sdist's static metadata, so nothing is built. envbuild passes
    the same flag, with the dependencies it read from the sdist as uv's `dependency-metadata`
    (`envbuild/app/lock_source.py`)."""
    from envbuild.app import lock_project as project_lock
    from envbuild.lock import pins as pydeps

    argv, requirements = pydeps.peer_compile_command(lock, request, image_dir=image_dir, uv=uv)
    for name in sorted(p.name for p in lock.packages if p.sdist):
        argv += ["--no-binary", name]
    # A project's own files ([packages] files: images/torch-project's pyproject.toml with its
    # extras, and the build backend its install needs): the same lines envbuild reads from
    # them and hands uv, so both resolve the same set.
    project = project_lock.read_inputs(image_dir, request)
    if project is not None:
        requirements += "".join(f"{line}\n" for line in project.lines)
    return argv, requirements


def peer_build_command(lock: Any, argv: Sequence[str]) -> tuple[list[str], str] | None:
    """(argv, build.in text) of the peer's second command for a lock with a builder stage
    (images/torch-ext): what a user who wants that stage's pins too runs by hand after the
    first, with the same options. It pins the toolchain (NVIDIA's toolkit wheels, as
    `envbuild.cuda.extensions.toolchain_requirements` words them) and the sdists' build
    requirements against the first command's output (`--constraint requirements.txt`), as
    `envbuild lock` pins its [build] packages against the image's own pins. None without one."""
    from envbuild.cuda import extensions

    build = lock.build
    if build is None:
        return None
    runtime = [p for p in lock.packages if not p.sdist]
    wanted: list[str] = []
    if build.toolchain == "wheels":
        wanted += extensions.toolchain_requirements(lock.stack.cuda or "", runtime)
    wanted += sorted({r for p in lock.packages if p.sdist for r in p.build_requires})
    out: list[str] = []
    skip = 0
    for a in argv:  # the first command's options, less its own --no-binary names
        if skip:
            skip -= 1
        elif a == "--no-binary":
            skip = 1
        else:
            out.append({"requirements.in": "build.in", "requirements.txt": "build.txt"}.get(a, a))
    return [*out, "--constraint", "requirements.txt"], "\n".join(wanted) + "\n"


def _as_pylock(argv: Sequence[str], output: str) -> list[str]:
    """`argv` writing PEP 751 (what envbuild reads from uv) to `output` instead."""
    i = list(argv).index("--output-file")
    return [*argv[:i], "--format", "pylock.toml", "--output-file", output, *argv[i + 2 :]]


@dataclass
class LockPair:
    """One example's folder for envbuild and the peer's folder beside it."""

    name: str
    work: Path
    image_dir: Path
    peer_dir: Path
    argv: list[str]
    second: tuple[list[str], str] | None
    peer_env: dict[str, str]

    @property
    def lock_file(self) -> Path:
        return self.image_dir / "envbuild.lock"

    def envbuild(
        self, cache: str, *, keep: bool = False, ahead: bool = True
    ) -> Callable[[], object]:
        """`envbuild lock` with uv's cache `cache`; without `keep` the lock is removed first;
        `ahead=False`: without its head start (ENVBUILD_NO_HEADSTART=1), as a first lock."""
        env = {**os.environ, "UV_CACHE_DIR": str(self.work / "caches" / cache)}
        env["ENVBUILD_NO_HEADSTART"] = "" if ahead else "1"

        def go() -> None:
            if not keep:
                self.lock_file.unlink(missing_ok=True)
            _checked([ENVBUILD, "lock", str(self.image_dir)], env=env)

        return go

    def peer(
        self, cache: str, *, keep: bool = False, extra: Sequence[str] = (), pylock: bool = False
    ) -> Callable[[], object]:
        """The peer's command(s), with `extra` arguments; `pylock`: writing PEP 751."""
        env = {**self.peer_env, "UV_CACHE_DIR": str(self.work / "caches" / cache)}
        first = _as_pylock(self.argv, "pylock.toml") if pylock else self.argv
        commands = [[*first, *extra]]
        if self.second is not None:
            second = _as_pylock(self.second[0], "pylock.build.toml") if pylock else self.second[0]
            commands.append([*second, *extra])
        outputs = (
            ("pylock.toml", "pylock.build.toml") if pylock else ("requirements.txt", "build.txt")
        )

        def go() -> None:
            if not keep:
                for name in outputs:
                    (self.peer_dir / name).unlink(missing_ok=True)
            for command in commands:
                _checked(command, env=env, cwd=self.peer_dir)

        return go


def _prepare(name: str, work: Path) -> tuple[LockPair, float]:
    """The example copied, locked once from cold (the lock the peer's commands come from: a
    committed lock may be stale against today's matrix); (pair, that first lock's time)."""
    from envbuild.lock import format as lockfile
    from envbuild.lock import uvenv
    from envbuild.request.parse import load_request

    image_dir = work / name
    shutil.copytree(ROOT / "images" / name, image_dir)
    peer_dir = work / f"{name}-uv"
    peer_dir.mkdir()
    (image_dir / "envbuild.lock").unlink(missing_ok=True)  # cold: no lock yet either
    env = {**os.environ, "UV_CACHE_DIR": str(work / "caches" / "e0")}
    first = _timed(lambda: _checked([ENVBUILD, "lock", str(image_dir)], env=env))
    lock = lockfile.loads((image_dir / "envbuild.lock").read_text())
    argv, requirements = peer_lock_command(
        lock, load_request(image_dir), image_dir=image_dir, uv=(UV,)
    )
    (peer_dir / "requirements.in").write_text(requirements)
    second = peer_build_command(lock, argv)
    if second is not None:
        (peer_dir / "build.in").write_text(second[1])
    # The peer runs with the same scrubbed environment envbuild gives uv (no PIP_*/UV_* index
    # settings from this machine), so both see the same indexes.
    peer_env = uvenv.isolated_env(os.environ)
    return LockPair(name, work, image_dir, peer_dir, argv, second, peer_env), first


def _measure(pair: LockPair, repeat: int, cold_repeat: int, first: float) -> dict[str, Any]:
    """Every sample of one example: cold pairs (who goes first alternating), warm, re-lock
    and --check, each set interleaved."""
    cold: dict[str, list[float]] = {"e": [first], "p": [_timed(pair.peer("p0"))]}
    for k in range(1, cold_repeat):
        order = [("e", pair.envbuild(f"e{k}")), ("p", pair.peer(f"p{k}"))]
        for who, fn in order if k % 2 else reversed(order):
            cold[who].append(_timed(fn))
    # The peer told which interpreter to use, as envbuild tells uv (`pydeps.pin`): what is
    # left of the difference is not uv's search for a Python.
    told = ["--python", sys.executable]
    warm = interleaved(
        {
            "e": pair.envbuild("e0"),
            "p": pair.peer("p0"),
            "n": pair.envbuild("e0", ahead=False),
            "u": pair.peer("p0", pylock=True),
            "t": pair.peer("p0", extra=told),
        },
        repeat,
        warmup=0,
    )
    relock = interleaved(
        {"e": pair.envbuild("e0", keep=True), "p": pair.peer("p0", keep=True)},
        repeat,
        warmup=0,
    )
    check = [ENVBUILD, "lock", "--check", str(pair.image_dir)]
    checks = interleaved({"e": lambda: _checked(check)}, repeat)["e"]
    return {"cold": cold, "warm": warm, "relock": relock, "check": checks}


def _rows(name: str, m: dict[str, Any]) -> list[Row]:
    cold, warm, relock = m["cold"], m["warm"], m["relock"]
    return [
        row(f"{name}: cold (empty uv cache)", cold["e"], cold["p"], peer_name=PEER_NAME),
        row(
            f"{name}: warm (uv's and envbuild's caches filled, no lock file)",
            warm["e"],
            warm["p"],
            peer_name=PEER_NAME,
            goal=LOCK_GOAL,
        ),
        row(
            f"{name}: warm, a first lock of the folder (no head start)",
            warm["n"],
            warm["p"],
            peer_name=PEER_NAME,
            note="ENVBUILD_NO_HEADSTART=1: uv starts once envbuild has built its command",
        ),
        row(
            f"{name}: warm, against uv writing envbuild's format",
            warm["e"],
            warm["u"],
            peer_name="the same + `--format pylock.toml`",
            note="uv's own cost of PEP 751 output, which envbuild reads",
        ),
        row(
            f"{name}: warm, against uv told the interpreter",
            warm["e"],
            warm["t"],
            peer_name="the same + `--python` (as envbuild passes it)",
            note="uv then does not search PATH for a Python (pyenv's shims on this machine)",
        ),
        row(
            f"{name}: re-lock, nothing changed (lock / requirements.txt present)",
            relock["e"],
            relock["p"],
            peer_name=PEER_NAME,
            goal=LOCK_GOAL,
        ),
        row(f"{name}: `lock --check` (no network)", m["check"], note="no peer equivalent"),
    ]


def bench_lock_one(name: str, work: Path, repeat: int, cold_repeat: int) -> tuple[list[Row], str]:
    from envbuild.lock import format as lockfile

    pair, first = _prepare(name, work)
    measured = _measure(pair, repeat, cold_repeat, first)
    lock = lockfile.loads(pair.lock_file.read_text())
    ours = {p.name: p.version for p in lock.packages}
    theirs = _requirements_txt_pins((pair.peer_dir / "requirements.txt").read_text())
    same = (
        "same pins"
        if ours == theirs
        else f"pins differ: {sorted(set(ours.items()) ^ set(theirs.items()))[:6]}"
    )
    fw = lock.stack.framework
    two = (
        "; the peer is two commands, the second pinning the builder stage (toolchain wheels "
        "and build requirements) against the first's output, as envbuild's lock does"
        if pair.second is not None
        else ""
    )
    note = (
        f"{name}: {fw.name} {fw.version} ({fw.variant}), {len(ours)} packages, {same} as the peer"
    )
    return _rows(name, measured), note + two


ARGV_NOTE = (
    "Peer command: `envbuild.lock.pins.peer_compile_command` (the lock's requirements, "
    "`--python-version`, `--python-platform <arch>-manylinux_2_28`, `--only-binary :all:`, "
    "the same index order and find-links; output requirements.txt), with `--no-binary NAME` "
    "for a package the lock takes from its sdist (`peer_lock_command`: torch-ext's "
    "envbuild-vecadd; uv reads its static metadata), and for a lock with a builder stage "
    "a second command pinning that stage against the first's output "
    "(`peer_build_command`). envbuild's time also covers resolving the stack, the base "
    "image digest look-up (no lock yet) and writing the lock; `--check` reads no network."
)
AHEAD_NOTE = (
    "How envbuild keeps within its goal (envbuild/lock/headstart.py): the uv commands the last "
    "lock of the folder ran, with the same flags and unchanged files, start as soon as "
    "click has read the command line, all at once, and each result is taken only when the command "
    "then built is byte-identical; and uv is told the interpreter (`--python`) instead of "
    "searching PATH for one. What was run is kept in envbuild's user cache: the warm rows "
    "have it (the lock file itself is removed before each sample, the folder is otherwise as "
    "it was). A first lock of a folder, or the first after an edit, has no head start: the "
    "row 'a first lock of the folder' measures that case, the first cold sample is one, and "
    "so is the first re-lock sample (it finds the lock the warm samples left)."
)
CACHE_NOTE = (
    "Cold means uv's cache is empty; envbuild's own user cache (compiled matrix, "
    "the sha256 of local wheelhouse files, `envbuild/lock/wheelhashes.py`) is the user's "
    "and warm. That remembered hash is why torch-cpu's and torch-project's cold locks beat "
    "a cold uv: given a links page with the hash, uv reads only the 192 MB torch wheel's "
    "metadata; given the folder, it takes the whole file into its cache."
)


def bench_lock(repeat: int, cold_repeat: int, examples: Sequence[str]) -> Section:
    rows: list[Row] = []
    notes: list[str] = []
    for name in examples:
        _log(f"lock: {name}")
        with tempfile.TemporaryDirectory(prefix="envbuild-bench-lock-") as tmp:
            try:
                r, note = bench_lock_one(name, Path(tmp), repeat, cold_repeat)
            except Exception as err:  # report, keep measuring the others
                notes.append(f"{name}: FAILED: {err}")
                continue
        rows += r
        notes.append(note)
    return {
        "title": "3. Lock (vs `uv pip compile --generate-hashes`, same requirements and platform)",
        "rows": rows,
        "notes": [ARGV_NOTE, AHEAD_NOTE, CACHE_NOTE, *notes],
    }
