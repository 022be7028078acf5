"""The request keys of a user's project (pure): `[packages] files/extras/groups`, the
`[project]` table (the code copied into the image) and `[smoke] command` (the project's own
smoke step). Every key is documented in docs/request.md.

Paths and ignore patterns are checked as strictly as the rest of the request
(envbuild.request.parse): no quotes, backslashes, `$`, backticks or control characters, because
they end up in Dockerfile and `.dockerignore` text. Commands take any argument but a control
character: they run without a shell and reach a Dockerfile only as a JSON array. Paths are checked here for their shape only (relative); whether they
stay inside the repository is decided where the files are read (envbuild.request.sourcetree).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild.core.errors import UserError
from envbuild.core.models import DependencyFiles, ProjectSettings
from envbuild.core.values import CONTROL_CHARS, check_version
from envbuild.request.fields import (
    fail,
    read_bool,
    read_str,
    read_str_list,
    type_name,
)

PYPROJECT = "pyproject.toml"
SETUP_PY = "setup.py"
UV_LOCK = "uv.lock"
REQUIREMENTS_SUFFIXES = (".txt", ".in")
# PEP 685 extra names / PEP 735 group names, as written (normalised when compared).
_EXTRA_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


# --- a version that comes from git ------------------------------------------------------------

VERSION_ARG = "SETUPTOOLS_SCM_PRETEND_VERSION"
"""The variable setuptools-scm takes a version from when there is no git to read it from
(https://setuptools-scm.readthedocs.io/en/latest/overrides/); hatch-vcs builds through
setuptools-scm (https://github.com/ofek/hatch-vcs), so it takes the same. The project's install
step runs with it: the build context leaves `.git` out (sourcetree.SECRETS)."""
VCS_BACKENDS = ("setuptools-scm", "hatch-vcs")
"""Build requirements that read the version from git (PEP 503 names)."""


@dataclass(frozen=True)
class ProjectVersion:
    """The project's version for its install step, worked out on the host from its git."""

    value: str
    """A PEP 440 version, checked (`checked_version`): it is written into the Dockerfile."""
    source: str
    """Who gave it, in words: "setuptools-scm 10.3.4" (run on the project's git), or the
    variable set where envbuild ran."""
    arg: str = VERSION_ARG


def vcs_backend(pyproject: Mapping[str, Any]) -> str:
    """The build requirement that reads the project's version from git ("setuptools-scm",
    "hatch-vcs"), or "" when the version is written down ([project] version) or nothing in
    [build-system] requires reads git. A requirement that does not parse is left to the
    build, which reports it."""
    if "version" in _table(pyproject, "project"):
        return ""
    requires = _table(pyproject, "build-system").get("requires")
    names = set()
    for text in requires if isinstance(requires, list) else ():
        try:
            names.add(canonicalize_name(Requirement(str(text)).name))
        except InvalidRequirement:
            continue
    tool = _table(pyproject, "tool")
    # hatch-vcs reads git only as [tool.hatch.version] source = "vcs" (its README, Usage).
    hatch_version = _table(_table(tool, "hatch"), "version")
    if "hatch-vcs" in names and hatch_version:
        return "hatch-vcs" if hatch_version.get("source") == "vcs" else ""
    # A version setuptools takes from a file or an attribute ([tool.setuptools.dynamic]) is
    # not git's, even with setuptools-scm in the build requirements.
    if "setuptools-scm" in names and "version" not in _table(_table(tool, "setuptools"), "dynamic"):
        return "setuptools-scm"
    return ""


SCM_COMMAND_KEYS = ("git_describe_command", "scm")
"""[tool.setuptools_scm] keys that name a command setuptools-scm runs as it is (its
`git_describe_command`, and `scm.git.describe_command` since setuptools-scm 8:
https://setuptools-scm.readthedocs.io/en/latest/config/)."""


def scm_commands(pyproject: Mapping[str, Any]) -> list[str]:
    """The [tool.setuptools_scm] keys of SCM_COMMAND_KEYS a pyproject.toml sets: envbuild
    runs setuptools-scm on the host only without them (a project's text never becomes a
    command there)."""
    table = _table(_table(pyproject, "tool"), "setuptools_scm")
    return [key for key in SCM_COMMAND_KEYS if key in table]


def dynamic_files(data: Mapping[str, Any]) -> tuple[str, Any, Any] | None:
    """(backend, the dependencies' files, the extras' {name: files}) of a pyproject.toml whose
    dynamic dependencies its backend reads from files (envbuild/lock/dynamicdeps.py reads
    them); None for any other backend."""
    build = data.get("build-system")
    backend = str(build.get("build-backend", "")) if isinstance(build, Mapping) else ""
    tool = _table(data, "tool")
    if backend.startswith("hatchling"):
        hooks = _table(_table(_table(tool, "hatch"), "metadata"), "hooks")
        if "requirements_txt" not in hooks:
            return None
        hook = _table(hooks, "requirements_txt")
        files = hook.get("files", ["requirements.txt"])
        return "hatch-requirements-txt", files, dict(_table(hook, "optional-dependencies"))
    if backend in ("", "setuptools.build_meta", "setuptools.build_meta:__legacy__"):
        dynamic = _table(_table(tool, "setuptools"), "dynamic")
        deps = dynamic.get("dependencies")
        extras = {k: _file_list(v) for k, v in _table(dynamic, "optional-dependencies").items()}
        if deps is None and not extras:
            return None
        return "setuptools", _file_list(deps) if deps is not None else None, extras
    return None


def _table(data: Any, key: str) -> Mapping[str, Any]:
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _file_list(value: Any) -> Any:
    """`{file = "a"}` / `{file = ["a", "b"]}` -> the names (anything else as it is, refused
    where it is read)."""
    return value.get("file") if isinstance(value, Mapping) else value


def checked_version(value: str, where: str) -> str:
    """`value` when it is a PEP 440 version of the characters a Dockerfile line takes as they
    are (`core.values.check_version`); UserError (exit 2) otherwise, with the way out."""
    try:
        return check_version(value, f"the version {where} gave,")
    except UserError as exc:
        raise UserError(
            exc.message,
            hint=f"set {VERSION_ARG} to the project's version (say 1.2.3), or tag the "
            "project's git with one",
            fields=exc.fields,
        ) from None


def file_kind(path: str) -> str | None:
    """ "pyproject", "setup.py", "uv.lock" or "requirements" by the file's name; None: not one
    of them."""
    name = PurePosixPath(path).name
    if name == PYPROJECT:
        return "pyproject"
    if name == SETUP_PY:
        return "setup.py"
    if name == UV_LOCK:
        return "uv.lock"
    if name.endswith(REQUIREMENTS_SUFFIXES):
        return "requirements"
    return None


def _relative_path(path: str, table: str, key: str, value: str) -> str:
    """A relative POSIX path, as written (the folder it leaves is checked when read)."""
    if value.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", value) or "://" in value:
        raise fail(
            path,
            table,
            key,
            f"{value!r} is not a path relative to the image folder",
            "write it relative to the folder that holds envbuild.toml, for example "
            '"pyproject.toml" or "../../app"',
        )
    return value


def dependency_files(pk: Mapping[str, Any], path: str) -> DependencyFiles:
    """[packages] files, extras, groups."""
    files = read_str_list(path, "packages", "files", pk["files"]) if "files" in pk else ()
    kinds: dict[str, list[str]] = {}
    for item in files:
        _relative_path(path, "packages", "files", item)
        kind = file_kind(item)
        if kind is None:
            raise fail(
                path,
                "packages",
                "files",
                f"{item!r} is not a pyproject.toml, a setup.py, a requirements file (.txt, .in) "
                "or a uv.lock",
                'name the project\'s own file, for example files = ["pyproject.toml"]',
            )
        kinds.setdefault(kind, []).append(item)
    described = [f for kind in ("pyproject", "setup.py") for f in kinds.get(kind, [])]
    if len(described) > 1:
        raise fail(
            path,
            "packages",
            "files",
            f"{' and '.join(repr(f) for f in described)} both describe a project",
            "lock one project per image: name one of them (the pyproject.toml when it has "
            "[project] dependencies)",
        )
    for kind in ("uv.lock",):
        if len(kinds.get(kind, [])) > 1:
            raise fail(
                path,
                "packages",
                "files",
                f"{' and '.join(repr(f) for f in kinds[kind])} are two {kind} files",
                "lock one project per image: name one of them",
            )
    if described and kinds.get("uv.lock"):
        raise fail(
            path,
            "packages",
            "files",
            f"{described[0]!r} and {kinds['uv.lock'][0]!r} both describe the project",
            "name the uv.lock to keep its pins (its pyproject.toml is read with it), or the "
            "pyproject.toml to let envbuild pick versions",
        )
    extras = _names(pk, path, "extras")
    groups = _names(pk, path, "groups")
    if groups and kinds.get("setup.py"):
        raise fail(
            path,
            "packages",
            "groups",
            f"groups are chosen, but {kinds['setup.py'][0]!r} has no dependency groups",
            "drop groups (a setup.py has extras_require only)",
        )
    if (extras or groups) and not (described or kinds.get("uv.lock")):
        key = "extras" if extras else "groups"
        raise fail(
            path,
            "packages",
            key,
            f"{key} are chosen, but files names no pyproject.toml or uv.lock to take them from",
            'add the project\'s file, for example files = ["pyproject.toml"]',
        )
    return DependencyFiles(files=files, extras=extras, groups=groups)


def _names(pk: Mapping[str, Any], path: str, key: str) -> tuple[str, ...]:
    names = read_str_list(path, "packages", key, pk[key]) if key in pk else ()
    for name in names:
        if not _EXTRA_RE.match(name):
            raise fail(
                path,
                "packages",
                key,
                f"{name!r} is not an extra or group name",
                'write the name as the pyproject.toml spells it, for example "train"',
            )
    if len({_normal(n) for n in names}) != len(names):
        raise fail(path, "packages", key, "names the same one twice", "list each once")
    return names


def _normal(name: str) -> str:
    """PEP 685 / PEP 735 name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


# Commands run without a shell and reach a Dockerfile only as a JSON array (exec-form CMD),
# so quotes, `$` and backslashes in an argument are just characters; a line break or control
# character would still break a line somewhere (a Dockerfile, a log, a terminal).
_CONTROL = re.compile("[" + CONTROL_CHARS + "]")


def command_value(path: str, table: str, key: str, value: Any) -> tuple[str, ...]:
    """A command: a string split like a POSIX shell would (`shlex.split`: "python -c 'print(1)'"
    is three arguments) or an array of arguments taken as written; run without a shell."""
    example = f'write {key} = "python -m train --steps 5" or {key} = ["python", "-m", "train"]'
    if isinstance(value, str):
        _no_control(path, table, key, value)
        try:
            args = tuple(shlex.split(value))
        except ValueError as exc:  # an unclosed quote or a trailing backslash
            raise fail(path, table, key, f"{value!r} cannot be split ({exc})", example) from None
    elif isinstance(value, list):
        args = tuple(_argument(path, table, key, item, example) for item in value)
    else:
        raise fail(
            path,
            table,
            key,
            f"expected a string or an array of strings, got {type_name(value)} {value!r}",
            example,
        )
    if not args:
        raise fail(path, table, key, "is empty", f"remove {key} or give it a command")
    if not args[0].strip():
        raise fail(path, table, key, f"{args[0]!r} is not a program", example)
    return args


def _argument(path: str, table: str, key: str, item: Any, example: str) -> str:
    if not isinstance(item, str):
        raise fail(
            path,
            table,
            key,
            f"expected an array of strings, got {type_name(item)} {item!r}",
            example,
        )
    return _no_control(path, table, key, item)


def _no_control(path: str, table: str, key: str, value: str) -> str:
    bad = _CONTROL.search(value)
    if bad:
        raise fail(
            path,
            table,
            key,
            f"{value!r} contains {bad.group()!r}",
            "write the command on one line without control, invisible or bidi characters "
            "(quotes, '$' and backslashes are fine: it runs without a shell)",
        )
    return value


def project_table(
    pj: Mapping[str, Any] | None, path: str, installable: Callable[[str], bool] | None = None
) -> ProjectSettings | None:
    """[project]: None when the table is absent. `installable(path)`: whether the folder has
    a pyproject.toml or setup.py, asked only when `install` is not written (the default is
    to install a project that can be installed, and to copy one that cannot)."""
    if pj is None:
        return None
    source = read_str(path, "project", "path", pj["path"]) if "path" in pj else "."
    _relative_path(path, "project", "path", source)
    ignore = read_str_list(path, "project", "ignore", pj["ignore"]) if "ignore" in pj else ()
    if "install" in pj:
        install = read_bool(path, "project", "install", pj["install"])
    else:
        install = installable is None or installable(source)
    return ProjectSettings(
        path=source,
        install=install,
        command=command_value(path, "project", "command", pj["command"]) if "command" in pj else (),
        ignore=ignore,
    )


# --- what the templates see (pure) ---------------------------------------------------------

PROJECT_DIR = "/app"
"""Where the project's code is in the image (its WORKDIR)."""
# The same characters the request refuses: a lock edited after the fact is checked again.
_SAFE_ARG = re.compile("[^" + CONTROL_CHARS + r"\"'`\\$" + "]+")
_SAFE_WHY = "quotes, backslashes, '$', backticks and control characters are refused"
# A command argument reaches the Dockerfile as a JSON string (json.dumps escapes quotes and
# backslashes); only what would break its line is refused. An empty argument is fine.
_SAFE_COMMAND = re.compile("[^" + CONTROL_CHARS + "]*")


_SOURCE_RE = re.compile(r"[A-Za-z0-9 ._+!-]+")


def _version_values(version: ProjectVersion | None) -> dict[str, str] | None:
    """The project's version for the template, every part checked: they are Dockerfile text."""
    if version is None:
        return None
    if version.arg != VERSION_ARG or not _SOURCE_RE.fullmatch(version.source):
        raise UserError(
            f"the project's version source {version.source!r} cannot go into a Dockerfile",
            hint=f"set {VERSION_ARG} to the project's version where envbuild runs",
        )
    return {
        "arg": version.arg,
        "value": checked_version(version.value, version.source),
        "source": version.source,
    }


def template_values(
    project: ProjectSettings | None, version: ProjectVersion | None = None
) -> dict[str, Any]:
    """The project's values for the Dockerfile templates, checked (UserError, exit 2).
    `version`: the project's version from git, for its install step (None: none needed)."""
    if project is None:
        return {
            "project": False,
            "project_dir": PROJECT_DIR,
            "project_install": False,
            "project_version": None,
            "command": '["python"]',
        }
    for what, values, pattern, refused in (
        ("[project] path", (project.path,), _SAFE_ARG, _SAFE_WHY),
        (
            "[project] command",
            project.command,
            _SAFE_COMMAND,
            "control, invisible and bidi characters are refused",
        ),
        ("[project] ignore", project.ignore, _SAFE_ARG, _SAFE_WHY),
    ):
        for value in values:
            if not isinstance(value, str) or not pattern.fullmatch(value):
                raise UserError(
                    f"{what} {value!r} cannot go into a Dockerfile: {refused}",
                    hint="fix the request (envbuild.toml) and run `envbuild lock <image dir>` "
                    "again",
                    fields={"field": what, "value": str(value)},
                )
    command = list(project.command) or ["python"]
    return {
        "project": True,
        "project_dir": PROJECT_DIR,
        "project_install": project.install,
        "project_version": _version_values(version) if project.install else None,
        # Exec form (a JSON array): no shell between Docker and the command.
        "command": json.dumps(command, ensure_ascii=False),
    }
