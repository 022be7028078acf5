"""The project itself among its own dependency files (thin I/O, part of envbuild.lock.projectdeps):
its name or folder in a requirements file (`mylib`, `-e .`), a setup.py read for its
dependencies, what setuptools would refuse to build, and the CUDA libraries of a framework
build the stack replaces.

A requirements file of the same repository often lists the library it belongs to (an
`examples/requirements.txt` with `mylib` or `-e ..`): that is the project, as uv treats its
workspace members, not a package to fetch from an index. It is dropped with a note; when the
project is installed from the checkout ([project] install), its own dependencies are read from
its pyproject.toml (or setup.py) instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envbuild.core.errors import RequestError
from envbuild.core.models import ProjectSettings, Request
from envbuild.cuda.wheels import is_build_cuda_package
from envbuild.lock.projectread import Line, Reader, requirement
from envbuild.request import setuptools_static as static
from envbuild.request.project import PYPROJECT
from envbuild.request.sourcetree import file_sha256, inside_repo, top_level

SETUP_PY = "setup.py"
_PATH_LINE = re.compile(
    r"^(?:(?:-e|--editable)(?:\s*=\s*|\s+))?(?P<path>\.{1,2}(?:/[^\s\[]*)?|/[^\s\[]+)"
    r"(?:\[(?P<extras>[^\]]*)\])?$"
)


def find_own(reader: Reader, request: Request, files: Sequence[tuple[str, Path]]) -> None:
    """The project's own name(s): the [project] folder's, and those of the pyproject.toml or
    setup.py that [packages] files names."""
    folders = [path.parent for rel, path in files if Path(rel).name in (PYPROJECT, SETUP_PY)]
    if request.project is not None:
        folder = inside_repo(
            reader.image_dir, request.project.path, what="[project] path", where=reader.where
        )
        if request.project.install:
            reader.installed = folder.resolve()
        folders.append(folder)
    for folder in folders:
        name = _project_name(reader, folder)
        if name:
            reader.own.setdefault(name, folder.resolve())


def _project_name(reader: Reader, folder: Path) -> str:
    if (folder / PYPROJECT).is_file():
        table = _read_toml(reader, folder / PYPROJECT, "the pyproject.toml").get("project")
        if isinstance(table, dict) and isinstance(table.get("name"), str):
            return canonicalize_name(table["name"])
    if (folder / SETUP_PY).is_file():
        return canonicalize_name(static.read_setup_py(folder / SETUP_PY, reader.name(folder)).name)
    return ""


def own_requirement(reader: Reader, req: Requirement, line: str, origin: str) -> bool:
    """True when `req` names the project itself (then dropped, with a note)."""
    folder = reader.own.get(canonicalize_name(req.name))
    if folder is None:
        return False
    _own(reader, folder, sorted(req.extras), line, origin)
    return True


def own_path_line(reader: Reader, file: Path, line: str, origin: str) -> bool:
    """True for `-e .`, `..[train]` and the like when the path is the project's folder."""
    match = _PATH_LINE.match(line)
    if match is None:
        return False
    folder = (file.parent / match["path"]).resolve()
    if folder not in reader.own.values():
        return False
    extras = [e.strip() for e in (match["extras"] or "").split(",") if e.strip()]
    _own(reader, folder, extras, line, origin)
    return True


def _own(reader: Reader, folder: Path, extras: Sequence[str], line: str, origin: str) -> None:
    note = f"{origin}: {line} is the project itself ({reader.name(folder) or '.'}), not a package"
    if folder != reader.installed:
        note += " to lock; it is not installed (set [project] install = true to install it)"
    elif folder in reader.own_read:
        note += " to lock; it is installed from the checkout"
    else:
        reader.own_read.add(folder)
        if (folder / PYPROJECT).is_file():
            _read_pyproject(reader, reader, folder / PYPROJECT, extras, ())
            source = PYPROJECT
        else:
            setup_py(reader, folder / SETUP_PY, extras)
            source = SETUP_PY
        note += (
            f" to lock; it is installed from the checkout, its dependencies are read from "
            f"{reader.name(folder / source)}"
        )
    reader.notes.append(note)


def setup_py(reader: Reader, path: Path, extras: Sequence[str]) -> None:
    """A setup.py's literal `install_requires` and the chosen `extras_require` (never run)."""
    rel = reader.name(path)
    setup = static.read_setup_py(path, rel)
    # Extras computed when setup.py runs (llm-foundry's) matter only when some are asked for.
    unreadable = [u for u in setup.unreadable if u != "extras_require" or extras]
    if unreadable:
        raise RequestError(
            f"{rel}: {', '.join(unreadable)} of its setup() call is not a literal "
            "(computed when setup.py runs, which envbuild never does)",
            hint="list the project's dependencies in [packages] requirements (the framework's "
            "own range goes in [framework] requirement), or in a requirements file named in "
            "[packages] files, and drop setup.py from files",
            fields={"path": rel},
        )
    reader.files[rel] = file_sha256(path)
    if setup.python_requires:
        reader.requires_python.append(Line(setup.python_requires, rel))
    lines = [(text, f"{rel} install_requires") for text in setup.install_requires]
    table = setup.extras_require or {}
    by_name = {canonicalize_name(k): k for k in table}
    for extra in extras:
        key = by_name.get(canonicalize_name(extra))
        if key is None:
            raise RequestError(
                f"{reader.where}: [packages] extras: {rel} has no extra {extra!r} (its extras: "
                f"{', '.join(sorted(table)) or 'none'})",
                hint="name an extra of its extras_require",
                fields={"extra": extra, "path": rel},
            )
        lines += [(text, f"{rel} extras_require {key}") for text in table[key]]
    for text, origin in lines:
        req = requirement(text, origin)
        if not own_requirement(reader, req, text, origin):
            reader.requirements.append(Line(text, origin, rel))


def check_discovery(
    reader: Reader, project: ProjectSettings, folder: Path, pyproject: dict[str, object] | None
) -> None:
    """Refuse, before anything is built, a project that setuptools' automatic discovery would
    refuse when the image installs it."""
    if not reader.export:  # `lock --check` only compares inputs
        return
    if not static.uses_setuptools(pyproject) or static.explicit_in_pyproject(pyproject):
        return
    if (folder / SETUP_PY).is_file():
        setup = static.read_setup_py(folder / SETUP_PY, reader.name(folder / SETUP_PY))
        if setup.explicit_layout or setup.unreadable:
            return  # setup() names what to install (or may: it is not a literal)
    dirs, files = top_level(folder, project.ignore)
    problem = static.flat_layout_problem(dirs, files)
    if problem is None:
        return
    raise RequestError(
        f"{reader.where}: [project] install = true, but setuptools would refuse to build "
        f"{reader.name(folder) or '.'} in the image: {problem} (its automatic discovery "
        "cannot tell which to install)",
        hint='name them in its pyproject.toml: [tool.setuptools] packages = ["mypkg"] (or '
        "py-modules = [...]; move the others into [project] ignore), or write install = false "
        "in [project] to copy the code without installing it",
        fields={"path": project.path, "problem": problem},
    )


# Build backends that compile (their docs: scikit-build-core, meson-python, maturin,
# py-build-cmake); a pure one is never refused here.
_COMPILING_BACKENDS = ("scikit_build_core", "mesonpy", "maturin", "py_build_cmake")


def check_compiled(
    reader: Reader, project: ProjectSettings, folder: Path, pyproject: dict[str, object] | None
) -> None:
    """Refuse, before anything is built, a project whose own install compiles extensions
    (facebookresearch/detectron2: `ext_modules=get_extensions()` of CUDAExtension): the image
    installs the project in its last stage, which has no compiler, so `pip install /app`
    would fail in the build. One whose extensions are all `optional=True` (NVIDIA/Megatron-LM's
    pybind11 helper) installs without them, which a note says."""
    if not reader.export:  # `lock --check` only compares inputs
        return
    why = _compiles(folder, pyproject)
    if not why:
        return
    name = reader.name(folder) or "."
    if why.endswith("optional"):
        reader.notes.append(
            f"{name}: {why[: -len(' optional')]}, marked optional=True: the image installs the "
            "project without it (its last stage has no compiler)"
        )
        return
    raise RequestError(
        f"{reader.where}: [project] install = true, but {name} compiles extensions when it is "
        f"installed ({why}), and the image installs the project in its last stage, which has "
        "no compiler (envbuild compiles only dependencies' sdists, in a builder stage)",
        hint="write install = false in [project] to copy the code without installing it, or "
        "build the project's wheel where a compiler is, put it in a folder of [indexes] "
        "find_links and require it in [packages] requirements",
        fields={"path": project.path, "why": why},
    )


def _compiles(folder: Path, pyproject: dict[str, object] | None) -> str:
    """Why installing the project compiles code ("" when it does not); "... optional" when
    every extension is optional. Read from setup.py's text and pyproject.toml, never run."""
    from envbuild.core.fsio import read_input

    build = (pyproject or {}).get("build-system")
    backend = str(build.get("build-backend") or "") if isinstance(build, dict) else ""
    if backend.startswith(_COMPILING_BACKENDS):
        return f"its build backend is {backend}"
    tool = (pyproject or {}).get("tool")
    table = tool.get("setuptools") if isinstance(tool, dict) else None
    if isinstance(table, dict) and "ext-modules" in table:
        return "its pyproject.toml names [tool.setuptools] ext-modules"
    setup = folder / SETUP_PY
    if not setup.is_file():
        return ""
    text = read_input(setup, what="setup.py").decode("utf-8", "replace")
    marker = next((m for m in _EXTENSION_MARKERS if m in text), None)
    if marker is None:
        return ""
    why = f"its setup.py names {marker.rstrip('(')}"
    optional = "optional=True" in text and not any(m in text for m in _NEVER_OPTIONAL)
    return f"{why} optional" if optional else why


_EXTENSION_MARKERS = ("CUDAExtension", "CppExtension", "cythonize", "ext_modules", "Extension(")
# torch's extension builders are the project's CUDA kernels: never optional to the project.
_NEVER_OPTIONAL = ("CUDAExtension", "CppExtension")


def without_build_companions(reader: Reader) -> list[Line]:
    """The requirements, minus the CUDA pins (`nvidia-*`, cuda-toolkit, cuda-bindings:
    `cuda.wheels.is_build_cuda_package`) of a file whose framework pin came from a framework
    index (`torch==2.9.1+cu128`): they are that build's CUDA libraries, and the stack's build
    of the release brings its own."""
    if not reader.relabelled:
        return list(reader.requirements)
    kept: list[Line] = []
    dropped: dict[str, list[str]] = {}
    for line in reader.requirements:
        req = Requirement(line.text)
        if line.file in reader.relabelled and is_build_cuda_package(canonicalize_name(req.name)):
            dropped.setdefault(line.file, []).append(f"{req.name}{req.specifier}")
            continue
        kept.append(line)
    for file, texts in dropped.items():
        reader.notes.append(
            f"{file}: {', '.join(texts)} not locked: the CUDA libraries of its framework build; "
            "the stack's framework build pins its own"
        )
    return kept


def _read_toml(reader: Reader, path: Path, what: str) -> dict[str, Any]:
    if reader.read_toml is None:  # set by projectdeps, which makes every Reader
        raise RuntimeError("Reader.read_toml is not set")
    return reader.read_toml(path, what)


def _read_pyproject(
    reader: Reader, target: Reader, path: Path, extras: Sequence[str], groups: Sequence[str]
) -> None:
    if reader.read_pyproject is None:
        raise RuntimeError("Reader.read_pyproject is not set")
    reader.read_pyproject(target, path, extras, groups)
