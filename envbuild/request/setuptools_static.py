"""What setuptools would make of a project, read without running it (thin I/O): a setup.py's
literal `setup()` arguments (through `ast`, never executed), and whether setuptools' automatic
discovery of a flat layout would refuse the project at build time.

Discovery follows setuptools' documented rules
(https://setuptools.pypa.io/en/latest/userguide/package_discovery.html#automatic-discovery):
without `packages`/`py-modules` (or `package-dir`), a `src/` folder is the src-layout;
otherwise every top-level folder whose name is an identifier is a package (PEP 420: no
`__init__.py` needed) and every top-level `*.py` a module, minus the names setuptools leaves
out (`tests`, `docs`, `examples`, `scripts`, ...); more than one top-level package, or no
package and more than one module, stops the build ("Multiple top-level packages discovered in
a flat-layout").
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuild.core.errors import RequestError
from envbuild.core.fsio import read_input

# setuptools.discovery.FlatLayoutPackageFinder._EXCLUDE and FlatLayoutModuleFinder.DEFAULT_EXCLUDE
_NOT_PACKAGES = (
    "ci",
    "bin",
    "debian",
    "doc",
    "docs",
    "documentation",
    "manpages",
    "news",
    "newsfragments",
    "changelog",
    "test",
    "tests",
    "unit_test",
    "unit_tests",
    "example",
    "examples",
    "scripts",
    "tools",
    "util",
    "utils",
    "python",
    "build",
    "dist",
    "venv",
    "env",
    "requirements",
    "tasks",
    "fabfile",
    "site_scons",
    "benchmark",
    "benchmarks",
    "exercise",
    "exercises",
    "htmlcov",
    "[._]*",
)
_NOT_MODULES = (
    "setup",
    "conftest",
    "test",
    "tests",
    "example",
    "examples",
    "build",
    "toxfile",
    "noxfile",
    "pavement",
    "dodo",
    "tasks",
    "fabfile",
    "[Ss][Cc]onstruct",
    "conanfile",
    "manage",
    "benchmark",
    "benchmarks",
    "exercise",
    "exercises",
    "[._]*",
)
LAYOUT_KEYS = ("packages", "py_modules", "ext_modules", "package_dir")
"""setup() arguments (and, dashed, [tool.setuptools] keys) that turn discovery off."""


@dataclass(frozen=True)
class SetupPy:
    """The literal arguments of a setup.py's `setup()` call."""

    name: str = ""
    install_requires: tuple[str, ...] = ()
    extras_require: Mapping[str, tuple[str, ...]] | None = None
    python_requires: str = ""
    explicit_layout: bool = False
    """It names packages, modules or extensions itself: no automatic discovery."""
    unreadable: tuple[str, ...] = ()
    """The dependency arguments that are not literals (computed when setup.py runs)."""


def read_setup_py(path: Path, rel: str) -> SetupPy:
    """The `setup()` call of `path` (`rel`: its name in messages), parsed, never run."""
    try:
        tree = ast.parse(read_input(path, what="setup.py").decode("utf-8"), filename=rel)
    except (SyntaxError, UnicodeDecodeError, ValueError, MemoryError, RecursionError) as exc:
        # MemoryError, RecursionError: nesting deeper than the parser takes (`-` x 200000)
        raise RequestError(
            f"{rel} cannot be parsed: {exc or type(exc).__name__}",
            hint="fix the file, or list the project's dependencies in [packages] requirements",
            fields={"path": rel},
        ) from None
    call = _setup_call(tree)
    if call is None:
        return SetupPy(unreadable=("setup()",))
    args: dict[str, Any] = {}
    unreadable: list[str] = []
    constants = _module_constants(tree)
    for kw in call.keywords:
        if kw.arg is None:  # setup(**options): anything may be in it
            unreadable.append("**" + ast.unparse(kw.value))
            continue
        value = kw.value
        if isinstance(value, ast.Name) and value.id in constants:
            value = constants[value.id]  # `install_requires=install_requires` (llm-foundry)
        try:
            args[kw.arg] = ast.literal_eval(value)
        except (ValueError, TypeError, MemoryError, RecursionError):
            # TypeError: a literal that cannot be built (`{["a"]: ...}`, an unhashable key)
            args[kw.arg] = None
            if kw.arg in ("install_requires", "extras_require", "python_requires"):
                unreadable.append(kw.arg)
    install: tuple[str, ...] = ()
    extras: Mapping[str, tuple[str, ...]] | None = None
    try:
        install = _requirement_list(args.get("install_requires"), "install_requires")
    except ValueError:
        unreadable.append("install_requires")
    try:
        extras = _extras(args.get("extras_require"))
    except ValueError:
        unreadable.append("extras_require")
    return SetupPy(
        name=str(args["name"]) if isinstance(args.get("name"), str) else "",
        install_requires=install,
        extras_require=extras,
        python_requires=str(args.get("python_requires") or ""),
        explicit_layout=any(k in args for k in LAYOUT_KEYS),
        unreadable=tuple(unreadable),
    )


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    """The names a setup.py binds once, at its top level, and never touches again: `NAME =
    <value>` (or annotated), with NAME stored nowhere else (no other assignment, augmented
    assignment, loop or `with` target), never deleted, never declared `global`, no item or
    attribute of it stored, and no method called on it (`NAME.append(...)`): the value
    setup() gets is the one written. Whether it is a literal is `literal_eval`'s to say."""
    bound: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            bound[target.id] = value
    stores: dict[str, int] = {}
    touched: set[str] = set()
    for walked in ast.walk(tree):
        if isinstance(walked, ast.Name) and isinstance(walked.ctx, ast.Store):
            stores[walked.id] = stores.get(walked.id, 0) + 1
        elif isinstance(walked, ast.Name) and isinstance(walked.ctx, ast.Del):
            touched.add(walked.id)
        elif isinstance(walked, (ast.Subscript, ast.Attribute)) and not isinstance(
            walked.ctx, ast.Load
        ):
            touched.add(_root_name(walked))  # NAME[k] = v, NAME.x = v, del NAME[k]
        elif isinstance(walked, ast.Call) and isinstance(walked.func, ast.Attribute):
            touched.add(_root_name(walked.func))  # NAME.append(...), NAME["k"].extend(...)
        elif isinstance(walked, (ast.Global, ast.Nonlocal)):
            touched.update(walked.names)
    return {
        name: value
        for name, value in bound.items()
        if stores.get(name) == 1 and name not in touched
    }


def _root_name(node: ast.expr) -> str:
    """`a` of `a[1].b`, `a.b.c(...)`; "" when it starts elsewhere (a call's result, a literal)."""
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _setup_call(tree: ast.Module) -> ast.Call | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name == "setup":
                return node
    return None


def _requirement_list(value: Any, what: str) -> tuple[str, ...]:
    """setuptools takes a list of strings or one string of lines."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.splitlines()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} is not a list of strings")
    return tuple(v.strip() for v in value if v.strip() and not v.strip().startswith("#"))


def _extras(value: Any) -> Mapping[str, tuple[str, ...]] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("extras_require is not a dict")
    return {str(k): _requirement_list(v, f"extras_require[{k!r}]") for k, v in value.items()}


# --- automatic discovery -----------------------------------------------------------------------


def uses_setuptools(pyproject: Mapping[str, Any] | None) -> bool:
    """Whether the project builds with setuptools: a setup.py-only project, a pyproject.toml
    without [build-system] or without a build-backend (pip's legacy fallback), or one naming
    setuptools' backend."""
    build = (pyproject or {}).get("build-system")
    if not isinstance(build, dict):
        return True
    backend = build.get("build-backend")
    return backend is None or str(backend).startswith("setuptools.")


def explicit_in_pyproject(pyproject: Mapping[str, Any] | None) -> bool:
    tool = (pyproject or {}).get("tool")
    table = tool.get("setuptools") if isinstance(tool, dict) else None
    keys = ("packages", "py-modules", "ext-modules", "package-dir")
    return isinstance(table, dict) and any(k in table for k in keys)


def flat_layout_problem(dirs: Sequence[str], files: Sequence[str]) -> str | None:
    """What setuptools' discovery refuses in a project whose top level (after the ignore
    rules) holds `dirs` and `files`, or None when it finds one package or module (or src/)."""
    if "src" in dirs:
        return None
    packages = sorted(
        d for d in dirs if d.isidentifier() and not _matches(d, _NOT_PACKAGES)
    ) + sorted(d for d in dirs if d.endswith("-stubs"))
    if len(packages) > 1:
        return f"several top-level packages in a flat layout: {', '.join(packages)}"
    if packages:
        return None
    modules = sorted(
        f[:-3]
        for f in files
        if f.endswith(".py") and f[:-3].isidentifier() and not _matches(f[:-3], _NOT_MODULES)
    )
    if len(modules) > 1:
        return f"several top-level modules in a flat layout: {', '.join(modules)}"
    return None


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)
