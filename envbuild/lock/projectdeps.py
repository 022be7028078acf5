"""A project's own dependency files, read for `envbuild lock` (thin I/O; resolving is uv's).

`[packages] files` may name a `pyproject.toml` (its `[project] dependencies`, the chosen
`optional-dependencies` extras and PEP 735 `[dependency-groups]`), requirements files (`-r`
and `-c` lines followed), or a `uv.lock` (exported by `uv export --frozen`, so its exact pins
are kept). What they ask for becomes requirement lines locked together with the framework.

Nothing here runs the project's code: a pyproject.toml is read as TOML (dynamic dependencies
are refused), a uv.lock through uv's own exporter. A requirement on the framework narrows
the framework range the stack is resolved in, so a project that says `torch<2.6` gets a
torch the matrix has below 2.6, or an error that names both sides.

Each file's hash goes into the lock's input hash (`[inputs.files]`), so `lock --check`
notices an edit. For a pyproject.toml only the tables read here count: a new version number
or description does not make the lock stale.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from envbuild.core.errors import PinError, RequestError, UnsatisfiableError
from envbuild.core.fsio import read_input
from envbuild.core.models import ProjectSettings, Request, free_threaded_minor
from envbuild.core.values import URL_RE
from envbuild.lock import dynamicdeps, ownproject, uvenv
from envbuild.lock import pins as pydeps
from envbuild.lock.companions import INDEX_COMPANIONS
from envbuild.lock.projectread import COMMENT, Line, Reader, read_text_input
from envbuild.lock.projectread import requirement as _requirement
from envbuild.request.project import PYPROJECT, file_kind
from envbuild.request.sourcetree import file_sha256, inside_repo

# pip's requirements-file options that name another file; everything else that starts with
# "-" is refused (index options belong in [indexes], so one request locks from one place).
MAX_INCLUDE_DEPTH = 32
"""How deep `-r`/`-c` files and `include-group`s may nest (envbuild.core.documents' nesting
limit for the same reason: deeper is an input's own error, exit 2, not a RecursionError)."""
MAX_EXTRAS = 256
"""Extras one lock expands (each once): a chain of `a = ["me[b]"]` longer than this is no
project's, and would end in a RecursionError."""
_INCLUDE = re.compile(r"^(-r|--requirement|-c|--constraint)(?:\s*=\s*|\s+)(\S+)$")
_INDEX_OPTIONS = (
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "--no-index",
    "--trusted-host",
    "--pre",
    "--only-binary",
    "--no-binary",
    "--prefer-binary",
)
_HASH_OPTION = re.compile(r"\s--hash[=\s]\S+")
SETUPTOOLS_FALLBACK = ("setuptools>=40.8.0", "wheel")
"""The build requirements of a project without [build-system] (PEP 518, "Build-system table"),
as pip falls back to them; `wheel` too, for a setuptools older than 70.1 (no bdist_wheel of
its own), which the image's install (`--no-build-isolation --no-index`) cannot fetch."""
# A local version label of a framework index's build ("+cu128", "+cpu", "+rocm6.4", "+xpu"):
# PyPI has the same release without it, and `==2.9.1` matches either build (PEP 440).
_VARIANT_LABEL = re.compile(
    r"(==\s*[0-9][0-9A-Za-z.!*_-]*)\+(?:cu\d+|cpu|rocm\d[\d.]*|xpu)(?=[\s,;)]|$)"
)


@dataclass(frozen=True)
class ProjectInputs:
    """What a request's project files add to its lock."""

    requirements: tuple[Line, ...] = ()
    constraints: tuple[Line, ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    """(path relative to the image folder, sha256), sorted: the lock's [inputs.files]."""
    uv_lock: str | None = None
    """The uv.lock whose pins are kept, as the request names it."""
    requires_python: tuple[Line, ...] = ()
    """The project's `requires-python` ("pyproject.toml", ">=3.11")."""
    notes: tuple[str, ...] = ()
    """What `lock` prints about lines it changed or dropped (the project's own name, a
    framework index's local label)."""

    @property
    def lines(self) -> tuple[str, ...]:
        return tuple(line.text for line in self.requirements)


def input_files(image_dir: Path, request: Request) -> tuple[tuple[str, str], ...]:
    """(path, sha256) of every project file the lock of `request` reads (no network, no uv):
    what `lock --check` compares with the lock's [inputs.files]."""
    return _read(image_dir, request, export=False).files


def read(
    image_dir: Path, request: Request, *, runner: pydeps.Runner | None = None
) -> ProjectInputs:
    """The requirement lines, constraints and file hashes of `request`'s project files, and
    the build requirements of a project that is installed."""
    return _read(image_dir, request, export=True, runner=runner)


def _read(
    image_dir: Path, request: Request, *, export: bool, runner: pydeps.Runner | None = None
) -> ProjectInputs:
    reader = Reader(image_dir, export, runner, read_pyproject=_pyproject, read_toml=_toml)
    reader.framework = canonicalize_name(Requirement(request.framework).name)
    deps = request.dependency_files
    paths = []
    for rel in deps.files:
        path = inside_repo(image_dir, rel, what="[packages] files entry", where=reader.where)
        _need_file(path, rel, reader.where)
        paths.append((rel, path))
    ownproject.find_own(reader, request, paths)
    uv_lock = None
    for rel, path in paths:
        kind = file_kind(rel)
        if kind == "pyproject":
            reader.own_read.add(path.parent.resolve())
            _pyproject(reader, path, deps.extras, deps.groups)
        elif kind == "setup.py":
            reader.own_read.add(path.parent.resolve())
            ownproject.setup_py(reader, path, deps.extras)
        elif kind == "uv.lock":
            uv_lock = rel
            _uv_lock(reader, path, deps.extras, deps.groups)
        else:
            _requirements_file(reader, path, constraint=False)
    if request.project is not None and request.project.install:
        _build_requirements(reader, request.project)
    return ProjectInputs(
        requirements=tuple(ownproject.without_build_companions(reader)),
        constraints=tuple(reader.constraints),
        files=tuple(sorted(reader.files.items())),
        uv_lock=uv_lock,
        requires_python=tuple(reader.requires_python),
        notes=tuple(reader.notes),
    )


def _need_file(path: Path, rel: str, where: str) -> None:
    if not path.is_file():
        raise RequestError(
            f"{where}: [packages] files: {rel!r} ({path}) is not a file",
            hint="name the project's pyproject.toml, requirements file or uv.lock, relative to "
            "the image folder",
            fields={"path": rel},
        )


def _toml(path: Path, what: str) -> dict[str, Any]:
    from envbuild.request.parse import toml_loads

    try:
        return toml_loads(read_input(path, what=what).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(
            f"{what} {path} is not valid TOML: {exc}",
            hint="fix the file (uv and pip would refuse it too)",
            fields={"path": str(path)},
        ) from None


POETRY_HINT = (
    "export them and name the file in [packages] files: poetry export --format "
    "requirements.txt --output requirements.txt (the poetry-plugin-export plugin; its hashes "
    "are dropped, the lock takes its own), or move them to [project] dependencies (Poetry 2 "
    "reads that table)"
)
"""What to do with a pre-2 Poetry project (https://python-poetry.org/docs/cli/#export,
https://python-poetry.org/blog/announcing-poetry-2.0.0/)."""


def pyproject_digest(data: Mapping[str, Any]) -> str:
    """sha256 over the tables that decide a lock: dependencies, extras, groups, build-system,
    requires-python, the project's name (for extras that name the project itself) and the
    files its backend reads dynamic dependencies from (`dynamicdeps`)."""
    project = data.get("project", {}) if isinstance(data.get("project"), dict) else {}
    relevant = {
        "name": project.get("name"),
        "dependencies": project.get("dependencies"),
        "optional-dependencies": project.get("optional-dependencies"),
        "requires-python": project.get("requires-python"),
        "dynamic": project.get("dynamic"),
        "dependency-groups": data.get("dependency-groups"),
        "build-system": data.get("build-system"),
    }
    files = dynamicdeps.dynamic_files(data)
    dynamic = project.get("dynamic") or []
    if files is not None and ("dependencies" in dynamic or "optional-dependencies" in dynamic):
        # Only where the lock reads them: the digests of every other pyproject.toml (and so
        # the locks made from them) stay as they were.
        relevant["dynamic-files"] = files
    text = json.dumps(relevant, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class _Project:
    """The pyproject.toml being read: its path as the lock names it, its normalised project
    name (a dependency on `name[extra]` is the project's own extra) and its [project] table."""

    rel: str
    name: str
    table: Mapping[str, Any]


def _pyproject(reader: Reader, path: Path, extras: Sequence[str], groups: Sequence[str]) -> None:
    rel = reader.name(path)
    data = _toml(path, "the pyproject.toml")
    reader.files[rel] = pyproject_digest(data)
    table = data.get("project")
    if not isinstance(table, dict):
        poetry = "poetry" in (data.get("tool") or {})
        raise RequestError(
            f"{rel} has no [project] table to take dependencies from"
            + (" (its dependencies are Poetry's [tool.poetry], before Poetry 2)" if poetry else ""),
            hint=POETRY_HINT
            if poetry
            else "name a pyproject.toml with [project] dependencies (PEP 621), or a "
            "requirements file",
            fields={"path": rel},
        )
    table, from_files = _dynamic(reader, path, data, table, rel)
    if table.get("requires-python"):
        reader.requires_python.append(Line(str(table["requires-python"]), rel))
    project = _Project(rel, canonicalize_name(str(table.get("name", ""))), table)
    where = f"{rel} [project] dependencies"
    for text in _strings(table.get("dependencies", []), where):
        _add_line(reader, project, text, where, set())
    for line in from_files:
        _add_line(reader, project, line.text, line.origin, set())
    for extra in extras:
        _add_extra(reader, project, extra, set())
    for group in groups:
        for text, origin in _group(data, group, rel, (), reader.where):
            _add_line(reader, project, text, origin, set())


def _dynamic(
    reader: Reader, path: Path, data: Mapping[str, Any], table: Mapping[str, Any], rel: str
) -> tuple[Mapping[str, Any], list[Line]]:
    """The [project] table with dynamic optional-dependencies read from their files, and the
    lines of dynamic dependencies read from theirs (`dynamicdeps`); RequestError for dynamic
    dependencies a build backend computes."""
    dynamic = table.get("dynamic") or []
    if "dependencies" not in dynamic and "optional-dependencies" not in dynamic:
        return table, []
    found = dynamicdeps.dynamic_files(data)
    deps = found[1] if found is not None else None
    if "dependencies" in dynamic and deps is None:
        raise RequestError(
            f"{rel}: [project] dependencies are dynamic (computed by the build backend)",
            hint="envbuild reads dependencies without running the project's code: list them in "
            "[project] dependencies, read them from a file ([tool.setuptools.dynamic] "
            'dependencies = {file = ["requirements.txt"]}), or name an exported '
            "requirements.txt or a uv.lock",
            fields={"path": rel},
        )
    if found is None:
        return table, []
    backend, _, extras = found
    lines: list[Line] = []
    if "dependencies" in dynamic:
        lines = dynamicdeps.read_files(reader, path, deps, f"{rel} ({backend}) dependencies")
    if "optional-dependencies" in dynamic and isinstance(extras, Mapping):
        read = {
            str(name): [
                line.text
                for line in dynamicdeps.read_files(
                    reader, path, files, f"{rel} ({backend}) optional-dependencies.{name}"
                )
            ]
            for name, files in extras.items()
        }
        table = {**table, "optional-dependencies": read}
    return table, lines


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequestError(
            f"{where} is not an array of strings",
            hint="fix the pyproject.toml (PEP 621)",
            fields={"where": where},
        )
    return list(value)


def _add_line(
    reader: Reader, project: _Project, text: str, origin: str, expanding: set[str]
) -> None:
    """A dependency line; `name[extra]` (the project itself) expands to that extra's lines."""
    req = _requirement(text, origin)
    if project.name and canonicalize_name(req.name) == project.name:
        for extra in sorted(req.extras):
            _add_extra(reader, project, extra, expanding)
        return
    reader.requirements.append(Line(text, origin))


def _add_extra(reader: Reader, project: _Project, extra: str, expanding: set[str]) -> None:
    table = project.table.get("optional-dependencies") or {}
    by_name = {canonicalize_name(k): k for k in table}
    key = by_name.get(canonicalize_name(extra))
    if key is None:
        known = ", ".join(sorted(table)) or "none"
        raise RequestError(
            f"{reader.where}: [packages] extras: {project.rel} has no extra {extra!r} (its "
            f"extras: {known})",
            hint="name an extra of [project.optional-dependencies]",
            fields={"extra": extra, "path": project.rel},
        )
    if key in expanding:
        return  # `all = ["me[a]"]`, `a = ["me[all]"]`: each extra once
    if len(expanding) >= MAX_EXTRAS:
        raise RequestError(
            f"{project.rel}: its extras name the project's own extras more than {MAX_EXTRAS} "
            "times over",
            hint="list the requirements in fewer extras",
            fields={"path": project.rel},
        )
    expanding.add(key)
    where = f"{project.rel} [project.optional-dependencies] {key}"
    for text in _strings(table[key], where):
        _add_line(reader, project, text, where, expanding)


def _group(
    data: Mapping[str, Any], group: str, rel: str, stack: tuple[str, ...], where: str = ""
) -> list[tuple[str, str]]:
    """PEP 735: a group's requirement strings, `{include-group = "x"}` followed. `where`: the
    request file, for a group the request names (not one a group includes)."""
    groups = data.get("dependency-groups") or {}
    by_name = {canonicalize_name(k): k for k in groups}
    key = by_name.get(canonicalize_name(group))
    if key is None:
        known = ", ".join(sorted(groups)) or "none"
        start = f"{where}: [packages] groups: " if where else f"{rel}: include-group: "
        raise RequestError(
            f"{start}{rel} has no dependency group {group!r} (its groups: {known})",
            hint="name a group of [dependency-groups]",
            fields={"group": group, "path": rel},
        )
    if len(stack) >= MAX_INCLUDE_DEPTH:
        raise RequestError(
            f"{rel}: [dependency-groups] {stack[0]} includes groups {MAX_INCLUDE_DEPTH} deep",
            hint=f"include at most {MAX_INCLUDE_DEPTH} groups deep (PEP 735 include-group)",
            fields={"path": rel},
        )
    if key in stack:
        raise RequestError(
            f"{rel}: [dependency-groups] {key} includes itself ({' -> '.join((*stack, key))})",
            hint="fix the include-group cycle (PEP 735)",
            fields={"path": rel},
        )
    out: list[tuple[str, str]] = []
    for item in groups[key] if isinstance(groups[key], list) else []:
        if isinstance(item, str):
            out.append((item, f"{rel} [dependency-groups] {key}"))
        elif isinstance(item, dict) and isinstance(item.get("include-group"), str):
            out += _group(data, item["include-group"], rel, (*stack, key))
    return out


def _build_requirements(reader: Reader, project: ProjectSettings) -> None:
    """The build backend of a project that is installed: `pip install --no-deps
    --no-build-isolation` takes it from the image, so it is locked like everything else."""
    folder = inside_repo(reader.image_dir, project.path, what="[project] path", where=reader.where)
    pyproject = folder / PYPROJECT
    rel = reader.name(pyproject)
    if pyproject.is_file():
        data = _toml(pyproject, "the pyproject.toml")
        reader.files[rel] = pyproject_digest(data)
        ownproject.check_discovery(reader, project, folder, data)
        ownproject.check_compiled(reader, project, folder, data)
        build = data.get("build-system")
        if isinstance(build, dict) and "requires" in build:
            where = f"{rel} [build-system] requires"
            for text in _strings(build["requires"], where):
                _requirement(text, where)
                reader.requirements.append(Line(text, where))
            return
    elif (folder / "setup.py").is_file():
        ownproject.check_discovery(reader, project, folder, None)
        ownproject.check_compiled(reader, project, folder, None)
    else:
        raise RequestError(
            f"{reader.where}: [project] install = true, but {reader.name(folder)} has no "
            "pyproject.toml or setup.py to install",
            hint="write install = false to copy the code without installing it, or point "
            "[project] path at the folder with the pyproject.toml",
            fields={"path": project.path},
        )
    for text in SETUPTOOLS_FALLBACK:
        reader.requirements.append(Line(text, f"{rel} (no [build-system])"))


# --- requirements files ------------------------------------------------------------------------


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) with `\\` continuations joined and comments removed."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        if raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        line = COMMENT.sub("", pending + raw).strip()
        pending = ""
        if line:
            out.append((start, line))
    return out


def _requirements_file(reader: Reader, path: Path, *, constraint: bool, depth: int = 0) -> None:
    rel = reader.name(path)
    if path in reader.seen:
        return
    if depth > MAX_INCLUDE_DEPTH:
        raise RequestError(
            f"{rel}: requirements files include each other (-r/-c) more than "
            f"{MAX_INCLUDE_DEPTH} deep",
            hint=f"name the files in [packages] files instead of a chain over "
            f"{MAX_INCLUDE_DEPTH} long",
            fields={"path": rel},
        )
    reader.seen.add(path)
    text = read_text_input(reader, path)
    for number, line in _logical_lines(text):
        origin = f"{rel} line {number}"
        include = _INCLUDE.match(line)
        if include:
            option, target = include.groups()
            nested = inside_repo(path.parent, target, what=f"{origin}: {option}")
            if not nested.is_file():
                raise RequestError(
                    f"{origin}: {option} {target}: no such file",
                    hint="fix the path (relative to the file that names it)",
                    fields={"origin": origin},
                )
            _requirements_file(
                reader,
                nested,
                constraint=constraint or option in ("-c", "--constraint"),
                depth=depth + 1,
            )
            continue
        if ownproject.own_path_line(reader, path, line, origin):
            continue
        if line.startswith("-"):
            if _framework_index_line(reader, line, origin):
                continue
            _refuse_option(line, origin)
        line = _HASH_OPTION.sub("", " " + line).strip()  # the lock takes its own hashes
        req = _requirement(line, origin, quote=False)
        if not constraint and ownproject.own_requirement(reader, req, line, origin):
            continue
        line = public_pin(reader, line, rel, origin)
        (reader.constraints if constraint else reader.requirements).append(Line(line, origin, rel))


FRAMEWORK_INDEXES = (
    "https://download.pytorch.org/whl",
    "https://storage.googleapis.com/jax-releases/",
)
"""Where a framework's own builds are (the PyTorch index and its old torch_stable.html page,
https://pytorch.org/get-started/previous-versions/; JAX's CUDA wheel pages of its releases
before PyPI carried them, https://docs.jax.dev/en/latest/installation.html). envbuild takes the
framework from the index of the build the stack picks (matrix/torch.toml `index_url`), so a
requirements file's line naming one of them is dropped with a note, not refused."""
_INDEX_TARGET = {"-i": "index_url", "--index-url": "index_url", "-f": "find_links"}


_OPTION_RE = re.compile(r"(-[^\s=]*)(?:=|\s+|$)(.*)")


def _option_value(line: str) -> tuple[str, str]:
    """("--extra-index-url", "https://...") of "--extra-index-url URL" or "...=URL" (any
    whitespace between, as pip takes it)."""
    match = _OPTION_RE.match(line)
    if match is None:
        return line.split()[0], ""
    return match.group(1), match.group(2).strip()


def _framework_index_line(reader: Reader, line: str, origin: str) -> bool:
    """Drop an index line of a framework's own index (FRAMEWORK_INDEXES), with a note; False
    for any other line."""
    option, url = _option_value(line)
    if option not in _INDEX_OPTIONS or not url.startswith(FRAMEWORK_INDEXES):
        return False
    reader.notes.append(
        f"{origin}: {option} {url} is dropped: envbuild installs the framework from the "
        "index of the build the stack picks for the targets and driver ([framework] cuda "
        "narrows its CUDA)"
    )
    return True


def _refuse_option(line: str, origin: str) -> None:
    option, value = _option_value(line)
    if option in ("-e", "--editable"):
        hint = "the project's own code goes in through [project] path; drop the -e line"
    elif option in _INDEX_OPTIONS and URL_RE.fullmatch(value) and not value.endswith("/"):
        # Only a URL [indexes] takes as it is (core.values.check_url): anything else would be
        # a line that fails when followed.
        key = _INDEX_TARGET.get(option.replace("--find-links", "-f"), "extra_index_urls")
        written = f'"{value}"' if key == "index_url" else f'["{value}"]'
        hint = (
            f"move it to envbuild.toml as [indexes] {key} = {written} and drop the line (so "
            "every lock uses the same sources)"
        )
    elif option in _INDEX_OPTIONS:
        hint = "put indexes in [indexes] of envbuild.toml (so every lock uses the same sources)"
    else:
        hint = "keep requirement lines, -r FILE and -c FILE only"
    raise RequestError(
        f"{origin}: the option {option} is not supported in [packages] files",
        hint=hint,
        fields={"origin": origin},
    )


# --- uv.lock -----------------------------------------------------------------------------------


def run_uv(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> pydeps.RunResult:
    """`uv export` as a subprocess (its own runner: tests replace the pin step's, not this)."""
    proc = subprocess.run(
        list(argv), cwd=cwd, env=dict(env), capture_output=True, text=True, check=False
    )
    return pydeps.RunResult(proc.returncode, proc.stdout, proc.stderr)


def uv_export_argv(
    uv: str, project_dir: Path, extras: Sequence[str], groups: Sequence[str]
) -> list[str]:
    """`uv export` of the locked project as plain pins: no hashes (the lock takes its own for
    the image's platform), no project or workspace members (their code goes in through
    [project]), only the groups asked for."""
    argv = [
        uv,
        "export",
        "--frozen",
        "--offline",
        "--no-config",
        "--format",
        "requirements-txt",
        "--no-hashes",
        "--no-header",
        "--no-annotate",
        "--no-emit-workspace",
        "--no-default-groups",
        "--project",
        str(project_dir),
    ]
    for extra in extras:
        argv += ["--extra", extra]
    for group in groups:
        argv += ["--group", group]
    return argv


def _uv_lock(reader: Reader, path: Path, extras: Sequence[str], groups: Sequence[str]) -> None:
    rel = reader.name(path)
    reader.files[rel] = file_sha256(path)
    if not (path.parent / PYPROJECT).is_file():
        raise RequestError(
            f"{rel}: no pyproject.toml next to it (uv reads the project with its lock)",
            hint="name the uv.lock that sits beside the project's pyproject.toml",
            fields={"path": rel},
        )
    if not reader.export:
        return
    uv = pydeps.find_uv()
    if uv is None:
        raise PinError(
            f"reading {rel} needs uv (`uv export`), which is not installed",
            hint="pip install uv (it is in envbuild's dev extra)",
        )
    runner = reader.runner or run_uv
    env = uvenv.isolated_env(os.environ)
    result = runner(uv_export_argv(uv, path.parent, extras, groups), path.parent, env)
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-8:])
        raise PinError(
            f"`uv export` could not read {rel}:\n{tail}",
            hint="run `uv lock` in the project (the lock may be older than its pyproject.toml), "
            "and check the extras and groups named in [packages]",
            fields={"path": rel},
        )
    for number, line in _logical_lines(result.stdout):
        origin = f"{rel} (uv export line {number})"
        if line.startswith("-"):
            raise RequestError(
                f"{origin}: {line!r} is a local or editable package",
                hint="its code goes in through [project]; lock packages from an index only",
                fields={"origin": origin},
            )
        _requirement(line, origin)
        reader.requirements.append(Line(public_pin(reader, line, rel, rel), rel, rel))


def public_pin(reader: Reader, text: str, rel: str, origin: str) -> str:
    """`torch==2.9.1+cu128` (a pin from a framework index) as `torch==2.9.1`: the same
    release, whichever index the stack's build comes from; a different release still
    conflicts with the stack (`narrowed_framework`). Only the framework and its index
    companions are relabelled: `mylib==1.0+cpu` from a private index is another package than
    PyPI's mylib 1.0, and stays as written."""
    public = _VARIANT_LABEL.sub(r"\1", text)
    if public != text:
        name = canonicalize_name(Requirement(text).name)
        if name != reader.framework and name not in INDEX_COMPANIONS:
            return text
        if name == reader.framework:
            reader.relabelled.add(rel)
        reader.notes.append(
            f"{origin}: {text} is locked as {public} (the local label names a build of a "
            "framework index; the stack's build of that release is installed)"
        )
    return public


# --- the framework and Python the project asks for ---------------------------------------------


def framework_lines(inputs: ProjectInputs, framework: str) -> tuple[Line, ...]:
    """The project's requirements on the framework itself."""
    want = canonicalize_name(framework)
    return tuple(
        line
        for line in inputs.requirements
        if canonicalize_name(Requirement(line.text).name) == want
    )


def _public_specifier(req: Requirement) -> SpecifierSet:
    """The specifier with local labels dropped (`==2.4.1+cpu` -> `==2.4.1`): the matrix knows
    releases; the local label is the variant, which the stack chooses."""
    specs = []
    for spec in req.specifier:
        version = spec.version
        if spec.operator in ("==", "===") and "+" in version:
            version = version.split("+", 1)[0]
        specs.append(f"{'==' if spec.operator == '===' else spec.operator}{version}")
    try:
        return SpecifierSet(",".join(specs))
    except InvalidSpecifier:
        return req.specifier


def applies(req: Requirement, python: str | None, platform: str) -> bool:
    """Whether a requirement's marker holds in the image; a marker on the Python version
    counts as holding while the Python is not chosen yet."""
    if req.marker is None:
        return True
    if python is None and "python" in str(req.marker):
        return True
    env = pydeps.target_environment(python or "3.12", platform)
    return Marker(str(req.marker)).evaluate(env)


def narrowed_framework(
    requirement: str, inputs: ProjectInputs, *, python: str | None, platform: str
) -> str:
    """The [framework] requirement with the project's own ranges on the framework added."""
    req = Requirement(requirement)
    changed = False
    for line in framework_lines(inputs, req.name):
        project_req = Requirement(line.text)
        if applies(project_req, python, platform) and str(project_req.specifier):
            req.specifier &= _public_specifier(project_req)
            changed = True
    return str(req) if changed else requirement


def framework_conflict(
    inputs: ProjectInputs,
    requirement: str,
    *,
    version: str,
    variant: str,
    reasons: Sequence[str],
) -> UnsatisfiableError:
    """The project's framework range and the stack's cannot meet: name both and the ways out.
    `version`/`variant`: the stack the request resolves to without the project's range."""
    name = Requirement(requirement).name
    wants = "; ".join(f"{line.origin}: {line.text}" for line in framework_lines(inputs, name))
    if inputs.uv_lock:
        way = (
            f"move the project to {name} {version}: run `uv lock --upgrade-package {name}` (or "
            f'`uv add "{name}=={version}"`) in the project, then `envbuild lock` again'
        )
    else:
        way = f"widen the project's {name} requirement to include {version}"
    return UnsatisfiableError(
        f"the project asks for {wants}, but the stack for this request needs {name} {version} "
        f"({variant}); with the project's range nothing in the matrix fits:\n  "
        + "\n  ".join(reasons),
        hint=f"{way}; or change [framework] requirement or [targets] so that a {name} the "
        "project accepts fits",
        fields={
            "project": wants,
            "stack": f"{name} {version} ({variant})",
            "reasons": list(reasons),
        },
    )


def check_python(inputs: ProjectInputs, python: str) -> None:
    """The image's Python must be one the project accepts (its `requires-python`); a
    free-threaded "3.14t" is version 3.14 to it (PEP 703 changes the ABI, not the version)."""
    version = free_threaded_minor(python) or python
    for line in inputs.requires_python:
        try:
            ok = SpecifierSet(line.text).contains(f"{version}.0", prereleases=True)
        except InvalidSpecifier:
            continue
        if not ok:
            raise UnsatisfiableError(
                f"{line.origin} requires-python = {line.text!r}, but the stack's Python is "
                f"{python}",
                hint="set [image] python to a version the project accepts, or widen its "
                "requires-python",
                fields={"requires_python": line.text, "python": python},
            )


def explain_pin_conflict(
    err: UnsatisfiableError, inputs: ProjectInputs, stack: str
) -> UnsatisfiableError:
    """uv found the project's pins and the stack's wheels incompatible: say that the stack
    keeps its framework build and the project has to follow."""
    if inputs.uv_lock:
        what = f"the pins of {inputs.uv_lock} conflict with the stack ({stack})"
        hint = (
            "the stack keeps its framework build and the CUDA libraries that build pins; "
            "re-lock the project for it (`uv lock --upgrade-package NAME` for the packages "
            "uv names above), or name the pyproject.toml instead of the uv.lock to let "
            "envbuild choose versions"
        )
    else:
        what = f"the project's requirements conflict with the stack ({stack})"
        hint = "widen the project's requirements named above; " + err.hint
    head, _, said = err.message.partition(":\n")
    where = re.search(r" for Python \S+ on \S+$", head)  # pinfailure.classify_failure's header
    return UnsatisfiableError(
        f"{what}{where.group(0) if where else ''}:\n{(said or head).strip()}",
        hint=hint,
        fields={**err.fields, "stack": stack, "uv_lock": inputs.uv_lock},
    )
