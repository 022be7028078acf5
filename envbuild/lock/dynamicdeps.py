"""A pyproject.toml's dynamic dependencies that are plain files, read as the build backend reads
them (thin I/O; nothing of the project runs).

`dynamic = ["dependencies"]` is refused in general: the build backend computes them. Two
backends only read files, which envbuild can read the same way:
- setuptools: `[tool.setuptools.dynamic] dependencies = {file = [...]}` and
  `optional-dependencies.<extra> = {file = [...]}`; "only PEP 508 requirement lines and
  comments, no `-r`, `-c` or `-e`" (https://setuptools.pypa.io/en/latest/userguide/
  pyproject_config.html#dynamic-metadata);
- hatchling with hatch-requirements-txt: `[tool.hatch.metadata.hooks.requirements_txt]
  files = [...]` (default `["requirements.txt"]`) and its `optional-dependencies` table
  (https://github.com/repo-helper/hatch-requirements-txt).
Each file is named relative to the pyproject.toml and must stay inside the repository; its hash
goes into the lock's inputs, so an edit makes the lock stale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envbuild.core.errors import RequestError
from envbuild.lock.projectread import COMMENT, Line, Reader, read_text_input
from envbuild.lock.projectread import requirement as _requirement
from envbuild.request.project import dynamic_files as dynamic_files
from envbuild.request.sourcetree import inside_repo


def read_files(reader: Reader, pyproject: Path, files: Any, where: str) -> list[Line]:
    """The requirement lines of the files `where` names (relative to `pyproject`'s folder), as
    the backend reads them: requirement lines and comments only."""
    names = [files] if isinstance(files, str) else files
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise RequestError(
            f"{where} is not a file name or a list of them",
            hint='write it as {file = ["requirements.txt"]}, or list the dependencies in '
            "[project] dependencies",
            fields={"where": where},
        )
    lines: list[Line] = []
    for name in names:
        path = inside_repo(pyproject.parent, name, what=f"{where}: {name}")
        rel = reader.name(path)
        if not path.resolve().is_relative_to(pyproject.parent.resolve()):
            # setuptools refuses it too ("Cannot access ... outside ..."), and the image holds
            # only the project's folder.
            raise RequestError(
                f"{where}: {name} is outside the project's folder {pyproject.parent}",
                hint="keep the file inside the folder of the pyproject.toml (the build reads "
                "it from there)",
                fields={"where": where},
            )
        if not path.is_file():
            raise RequestError(
                f"{where}: {name}: no such file",
                hint="fix the path (relative to the pyproject.toml)",
                fields={"where": where},
            )
        lines += _requirement_lines(read_text_input(reader, path), rel, where)
    return lines


def _requirement_lines(text: str, rel: str, where: str) -> list[Line]:
    out = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = COMMENT.sub("", raw).strip()
        if not line:
            continue
        origin = f"{rel} line {number}"
        if line.startswith("-"):
            raise RequestError(
                f"{origin}: an option line in a file {where} names; the build backend reads "
                "requirement lines and comments only",
                hint="keep requirement lines only in that file (put indexes in [indexes] of "
                "envbuild.toml), or name a requirements file in [packages] files instead",
                fields={"origin": origin},
            )
        _requirement(line, origin, quote=False)
        out.append(Line(line, origin, rel))
    return out
