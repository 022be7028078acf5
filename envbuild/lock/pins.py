"""Transitive Python pins with hashes for the image's platform, delegated (never resolved here).

uv is the resolver (`uv pip compile --format pylock.toml --generate-hashes --python-version
--python-platform`): fast, it reads PEP 658 `.metadata` instead of downloading wheels, and it
resolves for another platform and Python than the one it runs on. Its PEP 751 output lists the
exact files for the target with their sha256 and URL, so nothing needs re-deriving. pip's
`install --dry-run --report` with `--only-binary :all: --platform --python-version` is the
fallback when uv is missing (one hash per package: the file pip picked for the target).

Previous picks are kept the way uv keeps them for `-o FILE`: an existing output file is read as
preferences (uv docs, "Locking requirements": "uv will prefer the versions in the output file").
`--upgrade-package NAME` lifts the preference for NAME (uv's `-P`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from packaging.markers import InvalidMarker, Marker
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuild.core import fsio, interrupts
from envbuild.core.errors import PinError
from envbuild.core.locations import resolve_local
from envbuild.core.models import Lock, LockedPackage, Request, free_threaded_minor
from envbuild.lock import uvenv, wheelhashes
from envbuild.lock.pinfailure import classify_failure
from envbuild.lock.uvenv import isolated_env

PYPI_SIMPLE = "https://pypi.org/simple"
# manylinux_2_28 (glibc 2.28) is the oldest tag torch >= 2.6 wheels use and every OS in the
# matrix (debian12 glibc 2.36, ubuntu22.04 2.35, ubuntu24.04 2.39) satisfies it.
MANYLINUX = "manylinux_2_28"


@dataclass(frozen=True)
class PinRequest:
    """What to pin: requirements for one platform and Python, from which indexes."""

    requirements: tuple[str, ...]
    python: str
    """ "3.12"."""
    platform: str = "x86_64"
    index_url: str | None = None
    """None = PyPI."""
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    """URLs or absolute paths."""
    preferences: tuple[LockedPackage, ...] = ()
    """Previously locked picks; kept where they still satisfy the requirements."""
    upgrade_packages: tuple[str, ...] = ()
    offline: bool = False
    constraints: tuple[str, ...] = ()
    """`name==version` lines the resolution must keep (a framework base's installed packages)."""
    source_packages: tuple[str, ...] = ()
    """Names that may be locked from their sdist (no wheel fits); every other name stays
    wheel-only."""
    dependency_metadata: tuple[DependencyMetadata, ...] = ()
    """What the source packages depend on, read from their sdists, so uv never builds one to
    learn it (uv's `dependency-metadata` setting)."""


@dataclass(frozen=True)
class DependencyMetadata:
    """One sdist's dependencies as uv's `dependency-metadata` table states them
    (https://docs.astral.sh/uv/reference/settings/#dependency-metadata)."""

    name: str
    version: str | None
    """None: for every version (used to pick one without reading its dependencies yet)."""
    requires_dist: tuple[str, ...] = ()


CONSTRAINTS_FILE = "constraints.txt"
DEPENDENCY_METADATA_FILE = "uv-dependency-metadata.toml"


@dataclass(frozen=True)
class RunResult:
    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[Sequence[str], Path, Mapping[str, str]], RunResult]
"""(argv, cwd, env) -> result. Tests pass a fake that replays recorded output."""


@dataclass(frozen=True)
class PinResult:
    packages: tuple[LockedPackage, ...]
    tool: str
    """ "uv" or "pip"."""
    sdist_urls: tuple[tuple[str, str], ...] = ()
    """(name, URL or path) of each package locked from its sdist."""
    warnings: tuple[str, ...] = ()
    """What uv warned of while it pinned (a requested extra the locked version lacks), said
    again by `lock`: on success uv's stderr is otherwise never shown."""


def run_subprocess(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> RunResult:
    """Run the resolver; PinError (exit 3) when it cannot be started at all (missing, not
    executable, a folder) or its output is not text. A SIGTERM at any moment stops it: one
    during its start is held until the child is ours to kill (`envbuild.core.interrupts`)."""
    held = interrupts.start_child()
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError as exc:
        held.release()
        raise _cannot_run(argv, exc.strerror) from None
    with proc:
        try:
            held.release()
            out, err = proc.communicate()
        except UnicodeDecodeError:
            proc.kill()
            raise _cannot_run(argv, "its output is not UTF-8 text") from None
        except BaseException:  # SIGTERM (Terminated), Ctrl-C: uv must not outlive envbuild
            proc.kill()
            raise
    return RunResult(proc.returncode, out, err)


def _cannot_run(argv: Sequence[str], reason: str | None) -> PinError:
    return PinError(
        f"cannot run {argv[0]}: {reason}",
        hint="install uv (pip install uv), or point ENVBUILD_UV at a working uv",
        fields={"tool": str(argv[0])},
    )


# --- tool selection ----------------------------------------------------------------------------


def find_uv() -> str | None:
    """uv next to the running Python (the venv's dev extra), then on PATH; ENVBUILD_UV wins
    (`uvenv.find_uv`: the head start starts only this uv)."""
    return uvenv.find_uv(os.environ, sys.executable)


def _has_pip() -> bool:
    import importlib.util

    return importlib.util.find_spec("pip") is not None


def select_tool(prefer: str | None = None) -> tuple[str, list[str]]:
    """("uv", [uv]) or ("pip", [python, -m, pip]); `prefer` (or ENVBUILD_PYDEPS) forces one."""
    prefer = prefer or os.environ.get("ENVBUILD_PYDEPS") or None
    if prefer not in (None, "uv", "pip"):
        raise PinError(
            f"unknown Python resolver {prefer!r}",
            hint="set ENVBUILD_PYDEPS to uv or pip (or unset it)",
        )
    if prefer in (None, "uv"):
        uv = find_uv()
        if uv:
            return "uv", [uv]
        if prefer == "uv":
            raise PinError(
                "uv was asked for but is not installed",
                hint="pip install uv (it is in envbuild's dev extra), or unset ENVBUILD_PYDEPS",
            )
    if _has_pip():
        return "pip", [sys.executable, "-m", "pip"]
    raise PinError(
        "neither uv nor pip is available to pin Python packages",
        hint="pip install uv (envbuild delegates Python resolution to uv, pip as fallback)",
    )


# --- uv ----------------------------------------------------------------------------------------

PREFERENCES_FILE = "pylock.toml"


def plain_cpython() -> str | None:
    """This interpreter, when uv may be told to use it: a CPython with the GIL. uv still takes
    the implementation and the free-threading ABI from its interpreter when given a target
    version and platform, and the image's Python is a CPython with the GIL (PyPy or a
    free-threaded 3.13t would change the tags it picks for); None: uv finds its own."""
    import sysconfig

    if sys.implementation.name != "cpython" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None
    return sys.executable or None


def free_threaded_cpython(python: str, uv: Sequence[str] = ()) -> str | None:
    """A free-threaded CPython of this minor for uv to read the cp314t ABI from: `uv pip
    compile --python-version` takes no "t" (uv 0.13.9: "found `t`, which is not part of a
    valid version"; by design, astral-sh/uv#21149: "select it through `--python=3.14t`") and
    takes the free-threading ABI from its interpreter. "python3.14t" on PATH, else the one
    `uv python find 3.14t` finds (uv's own managed installs, which `uv python install 3.14t`
    puts in its data folder, not necessarily on PATH); it never downloads one."""
    import shutil

    found = shutil.which(f"python{python}")
    if found or not uv:
        return found
    argv = [*uv, "python", "find", "--no-config", "--no-python-downloads", python]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=30, env=isolated_env(os.environ)
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = done.stdout.strip()
    return path if done.returncode == 0 and path and os.path.isfile(path) else None


def _free_threaded_tool(
    req: PinRequest, name: str, base: list[str], prefer: str | None
) -> tuple[str, list[str], str | None]:
    """(tool, its argv, uv's interpreter) for a free-threaded `req`: uv with a python3.14t of
    this machine, else pip, which takes the ABI as `--abi cp314t` and needs no such Python;
    PinError (exit 3) when uv was asked for by name or pip cannot do this lock."""
    if name == "pip":
        return name, base, None
    found = free_threaded_cpython(req.python, base)
    if found:
        return name, base, found
    abi = "cp" + req.python.replace(".", "")
    why = (
        f"pinning {req.python} wheels with uv needs a free-threaded CPython {req.python} on "
        f"this machine (uv reads the {abi} ABI from an interpreter), and python{req.python} is "
        "not on PATH or among uv's Pythons"
    )
    install = (
        f"`uv python install {req.python}`, which uv then finds, or your OS's "
        f"python{req.python} on PATH"
    )
    if (prefer or os.environ.get("ENVBUILD_PYDEPS")) == "uv":
        raise PinError(
            why,
            hint=f"install one ({install}), or unset "
            "ENVBUILD_PYDEPS=uv to let pip pin it (pip takes --abi)",
        )
    blocker = (
        "--offline"
        if req.offline
        else "source packages"
        if req.source_packages
        else None
        if _has_pip()
        else "no pip in envbuild's environment"
    )
    if blocker:
        raise PinError(
            f"{why}; pip, which needs none, cannot do this lock ({blocker})",
            hint=f"install one ({install}), then run envbuild lock again",
        )
    return "pip", [sys.executable, "-m", "pip"], None


def uv_argv(uv: Sequence[str], req: PinRequest, *, interpreter: str | None = None) -> list[str]:
    """The `uv pip compile` command line; run in a folder holding requirements.in.
    `interpreter`: the Python uv is told to use instead of looking for one (see `pin`)."""
    argv = [
        *uv,
        "pip",
        "compile",
        "requirements.in",
        "--format",
        "pylock.toml",
        "--output-file",
        PREFERENCES_FILE,
        "--generate-hashes",
        "--python-version",
        # uv takes a version only; a free-threaded ABI comes from its interpreter (`pin`).
        free_threaded_minor(req.python) or req.python,
        "--python-platform",
        f"{req.platform}-{MANYLINUX}",
        # Images install wheels only: no compiler in them, and building an sdist to read its
        # metadata would run arbitrary code at lock time. Source packages are the named
        # exceptions (uv honours --no-binary NAME after --only-binary :all:, as pip does);
        # their metadata comes from DEPENDENCY_METADATA_FILE, so nothing is built.
        "--only-binary",
        ":all:",
        "--index-url",
        req.index_url or PYPI_SIMPLE,
        "--no-python-downloads",
        # uv.toml / pyproject [tool.uv] of wherever the command runs must not add indexes.
        "--no-config",
        # Not --quiet: it hides uv's warnings too, among them a requested extra that the
        # locked version lacks (`uv_warnings` passes those on). Only stderr gets more lines.
    ]
    for url in req.extra_index_urls:
        argv += ["--extra-index-url", url]
    for link in req.find_links:
        argv += ["--find-links", link]
    for name in sorted(req.upgrade_packages):
        argv += ["--upgrade-package", name]
    if req.offline:
        argv.append("--offline")
    if req.constraints:
        argv += ["--constraint", CONSTRAINTS_FILE]
    for name in sorted(req.source_packages):
        argv += ["--no-binary", name]
    if req.dependency_metadata:
        argv += ["--config-file", DEPENDENCY_METADATA_FILE]
    if interpreter:
        argv += ["--python", interpreter]
    return argv


def dependency_metadata_text(entries: Sequence[DependencyMetadata]) -> str:
    """uv.toml text with one [[dependency-metadata]] table per source package."""
    lines: list[str] = []
    for e in sorted(entries, key=lambda e: e.name):
        lines += ["[[dependency-metadata]]", f"name = {json.dumps(e.name)}"]
        if e.version is not None:
            lines.append(f"version = {json.dumps(e.version)}")
        lines += [f"requires-dist = {json.dumps(list(e.requires_dist))}", ""]
    return "\n".join(lines)


def peer_compile_command(
    lock: Lock, request: Request, *, image_dir: Path, uv: Sequence[str] = ("uv",)
) -> tuple[list[str], str]:
    """(argv, requirements.in text) of plain `uv pip compile --generate-hashes` on exactly what
    `envbuild lock` pinned for `lock`: the same requirements, Python, platform tag, binary-only
    policy and index order (the lock records the indexes after the framework's index was put
    first; local find-links come from the request, resolved against `image_dir` as the lock
    step does). Only the output differs: requirements.txt with hashes, no preferences. Used by
    benchmarks/lock.py as the peer envbuild's lock is measured against; run argv in a folder
    holding requirements.in. The installer the lock pins (`Lock.installer`) is asked for in
    the same resolution, as `envbuild lock` asks for it."""
    installer = tuple(p.name for p in lock.installer)
    req = PinRequest(
        requirements=(lock.stack.framework.requirement, *request.packages, *installer),
        python=lock.stack.python,
        platform=lock.platform,
        index_url=lock.indexes.index_url,
        extra_index_urls=lock.indexes.extra_index_urls,
        find_links=tuple(resolve_local(link, image_dir) for link in request.indexes.find_links),
    )
    argv = uv_argv(uv, req)
    # A user's command writes requirements.txt (uv's default format); pylock.toml and the
    # output file are envbuild's, not part of what is resolved.
    i = argv.index("--format")
    del argv[i : i + 4]  # --format pylock.toml --output-file pylock.toml
    argv[i:i] = ["--output-file", "requirements.txt"]
    return argv, "\n".join(req.requirements) + "\n"


def preferences_text(preferences: Sequence[LockedPackage]) -> str:
    """A minimal PEP 751 file uv reads as preferences (only names and versions matter)."""
    lines = ['lock-version = "1.0"', 'created-by = "envbuild"', ""]
    for p in sorted(preferences, key=lambda p: p.name):
        lines += ["[[packages]]", f'name = "{p.name}"', f'version = "{p.version}"', ""]
    return "\n".join(lines)


def target_environment(python: str, platform: str) -> dict[str, str]:
    """PEP 508 marker environment of the image (CPython on Linux). A free-threaded "3.14t" is
    python_version "3.14" to markers (PEP 703 changes the ABI tag, not the version)."""
    python = free_threaded_minor(python) or python
    return {
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "os_name": "posix",
        "platform_machine": platform,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": f"{python}.0",
        "python_version": python,
        "sys_platform": "linux",
    }


def parse_pylock(text: str, req: PinRequest) -> tuple[LockedPackage, ...]:
    """uv's PEP 751 output -> LockedPackage per package that applies to the target; PinError
    (exit 3) when it is not a pylock.toml of the shape uv writes (a broken or foreign uv)."""
    from envbuild.core.documents import DocumentError

    try:
        return _parse_pylock(text, req)
    except (DocumentError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PinError(
            f"uv's answer is not a pylock.toml envbuild can read ({type(exc).__name__}: "
            f"{str(exc)[:200]})",
            hint="check the uv it runs (`uv --version`; ENVBUILD_UV names another), or "
            "reinstall it: pip install uv",
        ) from None


def _parse_pylock(text: str, req: PinRequest) -> tuple[LockedPackage, ...]:
    from envbuild.request.parse import toml_loads

    data = toml_loads(text)
    env = target_environment(req.python, req.platform)
    out: list[LockedPackage] = []
    for p in data.get("packages", []):
        marker = p.get("marker")
        if marker:
            try:
                if not Marker(marker).evaluate(env):
                    continue
            except InvalidMarker:
                pass  # keep it: uv resolved it for this platform
        files = list(p.get("wheels", []))
        sdist = not files and "sdist" in p
        if sdist:
            files = [p["sdist"]]
        hashes = sorted(
            {f"sha256:{f['hashes']['sha256']}" for f in files if "sha256" in f.get("hashes", {})}
        )
        url = files[0].get("url", "") if files else ""
        source = source_of(url, req, index=p.get("index"))
        archive = p.get("archive")
        if not files and isinstance(archive, dict):
            # A direct-URL requirement (`name @ URL`): PEP 751 records the file itself as an
            # archive, with its hash; the lock's source is that URL (a local path as file://).
            hashes = (
                [f"sha256:{archive['hashes']['sha256']}"]
                if "sha256" in archive.get("hashes", {})
                else []
            )
            source = archive.get("url") or Path(str(archive.get("path", ""))).absolute().as_uri()
        out.append(
            LockedPackage(
                name=str(canonicalize_name(p["name"])),
                version=str(p["version"]),
                hashes=tuple(hashes),
                source=source,
                sdist=sdist,
            )
        )
    return tuple(sorted(out, key=lambda x: x.name))


def sdist_urls(text: str) -> dict[str, str]:
    """name -> the URL (or path) of the sdist uv locked it from, for packages locked from
    source."""
    from envbuild.request.parse import toml_loads

    out = {}
    for p in toml_loads(text).get("packages", []):
        sdist = p.get("sdist")
        if not p.get("wheels") and isinstance(sdist, dict):
            where = sdist.get("url") or sdist.get("path") or ""
            out[str(canonicalize_name(p["name"]))] = str(where)
    return out


def source_of(url: str, req: PinRequest, *, index: str | None = None) -> str:
    """The index (or find-links entry) a file came from, as the request names it."""
    if index:
        return str(index).rstrip("/")
    indexes = [req.index_url or PYPI_SIMPLE, *req.extra_index_urls]
    if url.startswith("file:") or url.startswith("/"):
        path = urlsplit(url).path if url.startswith("file:") else url
        for link in req.find_links:
            base = urlsplit(link).path if link.startswith("file:") else link
            if path.startswith(base.rstrip("/") + "/"):
                return link
        return req.find_links[0] if req.find_links else "file"
    host = urlsplit(url).netloc
    for ix in indexes:
        ix_host = urlsplit(ix).netloc
        # PyPI serves files from files.pythonhosted.org, not from pypi.org.
        if host == ix_host or (host == "files.pythonhosted.org" and ix_host == "pypi.org"):
            return ix.rstrip("/")
    for link in req.find_links:
        if host and urlsplit(link).netloc == host:
            return link
    return indexes[0].rstrip("/")


def _hinted_find_links(
    links: Sequence[str], work: Path, hashes: Mapping[str, wheelhashes.Record]
) -> tuple[str, ...]:
    """`links` with each local folder of wheels whose hashes are known replaced by a links
    page naming the same files with their sha256 (`envbuild.lock.wheelhashes`: uv then does not
    hash them again)."""
    out = []
    for i, link in enumerate(links):
        files = wheelhashes.wheels_only(link)
        page = wheelhashes.links_page(files, hashes) if files else None
        if page is None:
            out.append(link)
            continue
        path = work / f"find-links-{i}.html"
        path.write_text(page)
        out.append(str(path))
    return tuple(out)


_LOCAL_WHEEL = re.compile(
    r'\{ url = "(file://[^"]+)"[^{}]*hashes = \{ sha256 = "([0-9a-f]{64})" \}'
)
"""A local wheel in uv's pylock.toml output, as uv writes it: one inline table per file. A
line this does not match is only a hash not remembered (uv hashes that file next time)."""


def _local_wheel_hashes(text: str, links: Sequence[str]) -> list[tuple[str, str]]:
    """(path, sha256 hex) of each wheel uv picked from a local find-links folder."""
    folders = [link.rstrip("/") + "/" for link in links if wheelhashes.wheels_only(link)]
    out = []
    for m in _LOCAL_WHEEL.finditer(text) if folders else ():
        path = wheelhashes.local_path(m.group(1))
        if path and path.endswith(".whl") and any(path.startswith(d) for d in folders):
            out.append((path, m.group(2)))
    return out


# --- pip (fallback) ----------------------------------------------------------------------------


_OLDEST_GLIBC_MINOR = {"x86_64": 5, "aarch64": 17}
"""The first manylinux glibc of each architecture (PEP 600: manylinux1 is 2_5; aarch64 wheels
start at manylinux2014, 2_17)."""
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
"""PEP 599/571/513's names for glibc 2.17, 2.12 and 2.5 (PEP 600 keeps them as aliases)."""


def pip_platforms(platform: str) -> list[str]:
    """Every platform tag a manylinux_2_28 image takes, newest first. pip's `--platform` is the
    one tag it is given (pip 26.3 expands only manylinux2014/2010, not PEP 600 names), so
    `--platform manylinux_2_28_x86_64` alone finds no torch: its nvidia-* dependencies are
    tagged manylinux_2_12/2_17/2_27 (`pip install --dry-run` of torch 2.10.0, 2026-12-03:
    "No matching distribution found for nvidia-cuda-nvrtc-cu12==12.8.93"). uv expands its
    `--python-platform` itself."""
    newest = int(MANYLINUX.rsplit("_", 1)[1])
    tags = []
    for minor in range(newest, _OLDEST_GLIBC_MINOR.get(platform, 17) - 1, -1):
        tags.append(f"manylinux_2_{minor}_{platform}")
        if minor in _LEGACY_MANYLINUX:
            tags.append(f"{_LEGACY_MANYLINUX[minor]}_{platform}")
    return tags


def pip_argv(pip: Sequence[str], req: PinRequest, report: str) -> list[str]:
    # pip < 24 refuses --platform without --target even for --dry-run; nothing is installed.
    argv = [
        *pip,
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--report",
        report,
        "--only-binary",
        ":all:",
        *[arg for tag in pip_platforms(req.platform) for arg in ("--platform", tag)],
        "--python-version",
        free_threaded_minor(req.python) or req.python,
        # pip, unlike uv, takes the ABI as an option: a free-threaded lock needs no cp314t here.
        *(["--abi", "cp" + req.python.replace(".", "")] if free_threaded_minor(req.python) else []),
        "--implementation",
        "cp",
        "--index-url",
        req.index_url or PYPI_SIMPLE,
        "--target",
        "target",
        "--requirement",
        "requirements.in",
    ]
    for url in req.extra_index_urls:
        argv += ["--extra-index-url", url]
    for link in req.find_links:
        argv += ["--find-links", link]
    if req.constraints:
        argv += ["--constraint", CONSTRAINTS_FILE]
    return argv


def parse_pip_report(text: str, req: PinRequest) -> tuple[LockedPackage, ...]:
    """pip's `--report` JSON (format version 1) -> LockedPackage per install item."""
    data = json.loads(text)
    out = []
    for item in data.get("install", []):
        meta = item["metadata"]
        info = item.get("download_info", {})
        hashes = info.get("archive_info", {}).get("hashes", {})
        sha = hashes.get("sha256")
        url = info.get("url", "")
        out.append(
            LockedPackage(
                name=str(canonicalize_name(meta["name"])),
                version=str(meta["version"]),
                hashes=(f"sha256:{sha}",) if sha else (),
                source=source_of(url, req),
            )
        )
    return tuple(sorted(out, key=lambda x: x.name))


# --- entry point -------------------------------------------------------------------------------


def pin(
    req: PinRequest,
    *,
    runner: Runner | None = None,
    tool: str | None = None,
) -> PinResult:
    """Pin `req` transitively with hashes through uv (pip as fallback)."""
    runner = runner or run_subprocess
    name, base = select_tool(tool)
    interpreter = plain_cpython()
    if free_threaded_minor(req.python):
        name, base, interpreter = _free_threaded_tool(req, name, base, tool)
    env = isolated_env(os.environ)
    sdists: tuple[tuple[str, str], ...] = ()
    warned: tuple[str, ...] = ()
    fsio.remove_dead_temp()  # what a SIGKILLed lock left
    with tempfile.TemporaryDirectory(prefix=fsio.temp_prefix("envbuild-pin-")) as tmp:
        work = Path(tmp)
        (work / "requirements.in").write_text("\n".join(req.requirements) + "\n")
        if req.constraints:
            (work / CONSTRAINTS_FILE).write_text("\n".join(req.constraints) + "\n")
        if req.dependency_metadata:
            (work / DEPENDENCY_METADATA_FILE).write_text(
                dependency_metadata_text(req.dependency_metadata)
            )
        if name == "uv":
            if req.preferences:
                (work / PREFERENCES_FILE).write_text(preferences_text(req.preferences))
            before = wheelhashes.snapshot(req.find_links)
            hashes = wheelhashes.load() if before else {}
            links = _hinted_find_links(req.find_links, work, hashes)
            # uv wants an interpreter only to build sdists, which it never does here
            # (--only-binary; source packages come with their metadata): naming the one
            # envbuild runs on spares uv its search of PATH, which on a pyenv machine runs
            # pyenv's shell shims (0.25 s of a 0.7 s lock, benchmarks/RESULTS.md, section 3).
            argv = uv_argv(base, replace(req, find_links=links), interpreter=interpreter)
            result = runner(argv, work, env)
            if result.returncode != 0:
                raise classify_failure("uv", result.stderr, req)
            out = work / PREFERENCES_FILE
            text = out.read_text() if out.exists() else result.stdout
            packages = parse_pylock(text, req)
            if before:
                wheelhashes.remember(_local_wheel_hashes(text, req.find_links), hashes, before)
            sdists = tuple(sorted(sdist_urls(text).items()))
            warned = uv_warnings(result.stderr)
        else:
            if req.offline:
                raise PinError(
                    "--offline needs uv: pip has no offline resolution from its cache",
                    hint="pip install uv, or lock without --offline",
                )
            if req.source_packages:
                raise PinError(
                    f"locking {', '.join(req.source_packages)} from source needs uv: pip "
                    "would run the sdist's build backend to read its dependencies",
                    hint="pip install uv (it is in envbuild's dev extra), or unset "
                    "ENVBUILD_PYDEPS=pip",
                )
            result = runner(pip_argv(base, req, "report.json"), work, env)
            if result.returncode != 0:
                raise classify_failure("pip", result.stderr, req)
            report = work / "report.json"
            packages = parse_pip_report(report.read_text() if report.exists() else "{}", req)
    if not packages:
        raise PinError(
            f"{name} returned no packages for {list(req.requirements)}",
            hint="run with ENVBUILD_DEBUG=1 and report it",
        )
    return PinResult(packages=packages, tool=name, sdist_urls=sdists, warnings=warned)


# uv's warnings about what it locked, which `lock` says again; the rest (a managed Python it
# could not download, the Python it builds with: envbuild builds nothing) is noise here.
_UV_WARNINGS = re.compile(r"does not have an extra named|is yanked", re.IGNORECASE)


def uv_warnings(stderr: str) -> tuple[str, ...]:
    """uv's `warning: ...` lines about the packages it locked (transformer-engine 0.0.0,
    PyPI's placeholder, "does not have an extra named `pytorch`"; a yanked version), each once,
    prefixed with uv."""
    seen: list[str] = []
    for line in stderr.splitlines():
        text = line.strip()
        if text.lower().startswith("warning: ") and _UV_WARNINGS.search(text):
            said = f"uv: {text[len('warning: ') :]}"
            if said not in seen:
                seen.append(said)
    return tuple(seen[:20])


# --- what the framework's own wheel metadata pinned --------------------------------------------


def same_release(matrix_value: str, wheel_value: str) -> bool:
    """ "9.10.2" (matrix) agrees with "9.10.2.21" (wheel): compare on the matrix's precision."""
    try:
        a = Version(matrix_value).release
        b = Version(wheel_value).release
    except InvalidVersion:
        return matrix_value == wheel_value
    n = min(len(a), len(b))
    return a[:n] == b[:n]
