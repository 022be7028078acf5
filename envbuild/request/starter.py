"""The request a folder without an `envbuild.toml` is told to start from (`load_request`'s
hint): its dependency file that `[packages] files` can read, the framework that file names,
the folder as the project. Reads a few small files, never runs anything, and opens only regular
files (a FIFO named requirements.txt is never opened). Every request it names locks as written:
pytorch/examples mnist/, karpathy/minGPT, a tool-only pyproject.toml beside a requirements.txt
and requirements/base.txt were locked with theirs (docs/request.md, README "In a folder
without an envbuild.toml"); where the file holds lines no lock can hold (from version control),
the hint names them to replace.
"""

from __future__ import annotations

import re
from pathlib import Path

from envbuild.core.documents import toml_loads
from envbuild.core.errors import EnvbuildError
from envbuild.core.fsio import read_input
from envbuild.request.project import dynamic_files
from envbuild.request.setuptools_static import read_setup_py

_FRAMEWORK_NAME_RE = re.compile(r"""(?im)(?:^|["'\s,\[])(torch|jax|tensorflow)(?![\w.-])""")
# Requirements files by another name (requirements-gpu.txt, requirements/base.txt), but not the
# ones for development, tests, docs or linting.
_NOT_RUNTIME_RE = re.compile(
    r"(?i)(?:^|[-_/.])(?:dev|develop|tests?|testing|docs?|lint|ci|style|types?|bench)(?:[-_/.]|$)"
)
_PREFERRED_STEMS = ("requirements", "base", "main", "train", "prod", "runtime", "common")
_HINT_READ = 1_000_000  # a hint reads no more of a huge file


def _small_text(path: Path) -> str | None:
    """A regular file's text for a hint, through the one bounded reader (a FIFO or device is
    refused, never opened to block); None for anything it refuses or over _HINT_READ."""
    try:
        return read_input(path, what="a dependency file", limit=_HINT_READ).decode(
            "utf-8", "replace"
        )
    except (OSError, EnvbuildError):
        return None


def _pyproject_deps(folder: Path) -> str | None:
    """The text that names the dependencies of the folder's pyproject.toml, when `[packages]
    files` can read them: a [project] table with `dependencies` written down, or read from
    files by its backend (`project.dynamic_files`: then those files' text too). None for a
    pyproject.toml of tool settings only, or one without dependencies."""
    text = _small_text(folder / "pyproject.toml")
    try:
        data = toml_loads(text) if text is not None else {}
    except ValueError:
        return None
    table = data.get("project")
    if not isinstance(table, dict):
        return None
    if "dependencies" not in (table.get("dynamic") or []):
        return text if isinstance(table.get("dependencies"), list) else None
    found = dynamic_files(data)
    names = found[1] if found is not None else None
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list):
        return None
    return "\n".join([text or "", *(_small_text(folder / str(n)) or "" for n in names)])


def _requirements_file(folder: Path) -> str | None:
    """requirements.txt, else a runtime requirements file by another name at the top or in
    requirements/ (requirements/base.txt), preferred stems first."""
    found = [
        p.relative_to(folder).as_posix()
        for pattern in ("requirements*.txt", "requirements/*.txt")
        for p in sorted(folder.glob(pattern))
        if p.is_file() and not _NOT_RUNTIME_RE.search(p.relative_to(folder).as_posix()[12:])
    ]
    stems = {n: n.rsplit("/", 1)[-1].removesuffix(".txt") for n in found}
    return next(
        (n for stem in _PREFERRED_STEMS for n in found if stems[n] == stem),
        found[0] if found else None,
    )


def starter_file(folder: Path) -> str | None:
    """The dependency file a starter request names: a uv.lock or a pyproject.toml only with a
    [project] whose dependencies can be read (`_pyproject_deps`), then a requirements file,
    then a setup.py; None when the folder has none."""
    return _starter(folder)[0]


def _starter(folder: Path) -> tuple[str | None, str]:
    """`starter_file` and the text to find the framework in."""
    names = _pyproject_deps(folder)
    if names is not None and (folder / "uv.lock").is_file():
        return "uv.lock", names
    if names is not None:
        return "pyproject.toml", names
    found = _requirements_file(folder) or ("setup.py" if _readable_setup_py(folder) else None)
    return found, (_small_text(folder / found) or "") if found is not None else ""


def _readable_setup_py(folder: Path) -> bool:
    """A setup.py whose install_requires and python_requires can be read without running it
    (`setuptools_static`; extras built by code matter only when asked for)."""
    if not (folder / "setup.py").is_file():
        return False
    try:
        setup = read_setup_py(folder / "setup.py", "setup.py")
    except (OSError, EnvbuildError):
        return False
    return not [u for u in setup.unreadable if u != "extras_require"]


def starter_request(folder: Path) -> str:
    """The smallest request for what `folder` holds, for the hint of a missing envbuild.toml:
    its dependency file (`starter_file`) and the framework that file names (torch when none is
    named), and the folder as the project when it has any Python file. Every request it names
    locks as written; a conda environment.yml is not read, and the hint says so."""
    found, names = _starter(folder)
    match = _FRAMEWORK_NAME_RE.search(names)
    framework = match.group(1).lower() if match else "torch"
    gpu = _gpu_extra(folder, framework) if found in ("pyproject.toml", "uv.lock") else None
    # The framework as the GPU extra names it (jax[cuda12]): its CUDA series is the project's.
    parts = [f'[framework] requirement = "{gpu[1] if gpu else framework}"']
    if found is not None:
        parts.append(f'[packages] files = ["{found}"]')
    if gpu is not None:
        parts.append(f'[packages] extras = ["{gpu[0]}"]')
    if found is not None or any(folder.glob("*.py")):
        parts.append('[project] path = "."')
    said = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    return said + _starter_note(folder, found)


def _starter_note(folder: Path, found: str | None) -> str:
    """What the starter request leaves to the user, in parentheses: a dependency file envbuild
    does not read, lines it cannot lock, or the imports no dependency file covers. The folder's
    code is parsed only where the note names its imports."""

    def code() -> str:
        imported = _third_party_imports(folder)
        return f"its code imports {_named(imported)}" if imported else ""

    if found is not None:
        where, reqs = _requirements_read(folder, found)
        if unlockable := [f"'{r.strip()}'" for r in reqs if _VCS_RE.search(r)][:3]:
            return (
                f" (then replace {'; '.join(unlockable)} in {where} by released versions or wheel "
                "URLs: only what has hashes is locked)"
            )
        # A pyproject.toml or uv.lock was named because its dependencies were found (written
        # down or in files); a setup.py or requirements file may declare nothing.
        if not reqs and found not in ("pyproject.toml", "uv.lock") and (said := code()):
            return f" ({found} names no dependencies, and {said}: list their packages in [packages] requirements)"
        return ""
    if any((folder / n).is_file() for n in ("environment.yml", "environment.yaml")):
        said = code()
        return (
            " (environment.yml is conda's and is not read: list its pip packages in a "
            "requirements.txt and name it in [packages] files" + (f"; {said}" if said else "") + ")"
        )
    if (folder / "setup.py").is_file():
        said = code()
        return (
            " (setup.py computes its install_requires when it runs, which envbuild never "
            "does: list them in [packages] requirements, the framework's range in [framework] "
            "requirement" + (f"; {said}" if said else "") + ")"
        )
    if _is_poetry(folder):
        return (
            " (pyproject.toml keeps its dependencies in Poetry's [tool.poetry]: poetry export "
            "--format requirements.txt --output requirements.txt, then name requirements.txt "
            "in [packages] files)"
        )
    if said := code():
        return f" (no dependency file found, and {said}: list their packages in [packages] requirements)"
    return ""


_GPU_EXTRA_RE = re.compile(
    r"(?i)^(?:jax\[[^\]]*cuda|tensorflow\[[^\]]*and-cuda|nvidia-|cupy-cuda|flash[-_]attn)"
)


def _gpu_extra(folder: Path, framework: str) -> tuple[str, str] | None:
    """The project's extra that brings its GPU packages (levanter's `gpu = ["jax[cuda12]"]`),
    and the framework requirement it implies ("jax[cuda12]" where it names the framework with
    extras, else the framework's name): without the extra the lock takes the matrix's CUDA
    rather than the project's, and without the framework's extras the stack may pick another
    CUDA series than the extra pins (levanter then failed: a cuda13 stack over CUDA 12
    libraries). Only an extra named for the GPU (gpu, cuda, cuda12, nvidia) counts."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        data = toml_loads(_small_text(folder / "pyproject.toml") or "")
    except ValueError:
        return None
    project = data.get("project")
    extras = project.get("optional-dependencies") if isinstance(project, dict) else None
    if not isinstance(extras, dict):
        return None
    for name in sorted(extras):
        lines = [str(r).strip() for r in extras[name]] if isinstance(extras[name], list) else []
        if re.fullmatch(r"(?i)gpu|cuda\d*|nvidia", str(name)) is None:
            continue
        if not any(_GPU_EXTRA_RE.match(line) for line in lines):
            continue
        wanted = framework
        for line in lines:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            # Only the extras that name a CUDA build (jax[cuda12], tensorflow[and-cuda]): the
            # resolver refuses others ("jax has no variant cuda12_pip").
            cuda = sorted(e for e in req.extras if re.fullmatch(r"cuda\d+|and-cuda", e))
            if req.name.lower() == framework and cuda:
                wanted = f"{framework}[{','.join(cuda)}]"
        return str(name), wanted
    return None


def _named(imported: list[str]) -> str:
    more = len(imported) - _NAMED
    return ", ".join(imported[:_NAMED]) + (f" and {more} more" if more > 0 else "")


_VCS_RE = re.compile(r"(?:^|[\s@])(?:git|hg|svn|bzr)\+\S+")


def _requirements_read(folder: Path, found: str) -> tuple[str, list[str]]:
    """(the file, the requirements the request reads from it): a pyproject's [project]
    dependencies (not its extras; for a uv.lock too, whose project keeps them there), a
    requirements file's lines, a setup.py's install_requires. Version control lines among
    them (maxtext's mlperf-logging@git+...) have no file hash, so `lock` refuses them."""
    if found in ("pyproject.toml", "uv.lock"):
        try:
            data = toml_loads(_small_text(folder / "pyproject.toml") or "")
        except ValueError:
            return "pyproject.toml", []
        project = data.get("project")
        deps = project.get("dependencies") if isinstance(project, dict) else None
        return "pyproject.toml", [str(d) for d in deps] if isinstance(deps, list) else []
    if found == "setup.py":
        try:
            return found, list(read_setup_py(folder / "setup.py", "setup.py").install_requires)
        except (OSError, EnvbuildError):
            return found, []
    lines = (_small_text(folder / found) or "").splitlines()
    reqs = [ln.split(" #", 1)[0].strip() for ln in lines if not ln.lstrip().startswith("#")]
    return found, [r for r in reqs if r]


_SCANNED = 200  # .py files read for a hint, at most
_FOLDERS = 500  # folders visited to find them, at most
_NAMED = 12  # imports named in it, at most
_NOT_CODE = {"node_modules", "venv", "env", "build", "dist", "site-packages", "__pycache__"}


def _own_python_files(folder: Path) -> list[Path]:
    """The folder's own .py files, its packages' included (nanoVLM's train.py imports
    models/, which imports transformers), hidden folders, virtual environments and links
    left out (a symlink may point anywhere); at most _SCANNED, the top level first."""
    import os

    found: list[Path] = []
    for visited, (root, dirs, files) in enumerate(os.walk(folder)):
        if visited >= _FOLDERS:  # a data folder of a million files is not walked through
            break
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and d not in _NOT_CODE
            and not (Path(root) / d).is_symlink()
            and not (Path(root) / d / "pyvenv.cfg").exists()
        )
        for name in sorted(files):
            path = Path(root) / name
            if name.endswith(".py") and path.is_file() and not path.is_symlink():
                found.append(path)
                if len(found) >= _SCANNED:
                    return found
    return found


def _third_party_imports(folder: Path) -> list[str]:
    """The top-level modules the folder's own .py files import that are neither the standard
    library's, nor the folder's own, nor a framework (the request names that): what a project
    without a dependency file (karpathy/nanoGPT) needs listed. Import names, said as such
    (PyYAML is imported as yaml); parsed, never run."""
    import ast
    import sys

    files = _own_python_files(folder)
    # The project's own modules: top-level ones, its folders, and its packages under src/.
    own = {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.iterdir() if p.is_dir()}
    src = folder / "src"
    if src.is_dir() and not src.is_symlink():
        own |= {p.name for p in src.iterdir() if p.is_dir()} | {p.stem for p in src.glob("*.py")}
    skip = set(sys.stdlib_module_names) | own | {"__future__", "torch", "jax", "tensorflow"}
    found: set[str] = set()
    for path in files:
        try:
            tree = ast.parse(_small_text(path) or "")
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return sorted(found - skip)


def _is_poetry(folder: Path) -> bool:
    """A pyproject.toml of Poetry before 2: [tool.poetry] and no [project]."""
    try:
        data = toml_loads(_small_text(folder / "pyproject.toml") or "")
    except ValueError:
        return False
    tool = data.get("tool")
    return "project" not in data and isinstance(tool, dict) and "poetry" in tool
