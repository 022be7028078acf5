"""House rules a reviewer would otherwise check by hand (docs/design.md):

- comments and data cite what a reader can open: a file in this repository or a public URL,
  never a file outside it (design notes, reference folders next to the checkout) nor an issue
  number of a tracker the reader cannot see;
- no function over 80 lines and no module over 800 lines, in the package and in benchmarks/,
  except the in-image payload (envbuild/payload/, which runs alone inside the image and reads
  top to bottom);
- every module of the package is named in docs/design.md, under its package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "envbuild"
BENCHMARKS = ROOT / "benchmarks"
SHIPPED = (PACKAGE, ROOT / "templates", ROOT / "matrix")
"""The package, its templates and the matrix (whose `source` values cite files under
matrix/evidence/ or public URLs; changing one re-locks every image that uses the row)."""

MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 800

UNREADABLE = re.compile(
    r"DESIGN\.md|CONTRACTS\.md|compat-facts|\.\./shared|shared/reference|shared/raw"
    r"|(?<![\w/#])[Ii]ssue #?\d+"
)
"""References a reader of the repository cannot follow. An issue of a public project is
fine when the line gives its URL (https://github.com/.../issues/N)."""


def _shipped_files() -> list[Path]:
    files = []
    for top in SHIPPED:
        for path in sorted(top.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and "_data" not in path.parts:
                files.append(path)
    return files


def _python_modules() -> list[Path]:
    return [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if "payload" not in p.relative_to(PACKAGE).parts and "_data" not in p.parts
    ]


def _sized_modules() -> list[Path]:
    """The modules the size rules cover: the package's (payload excepted) and `make bench`'s."""
    return [*_python_modules(), *sorted(BENCHMARKS.glob("*.py"))]


def _unreadable(line: str) -> str | None:
    """The reference a reader cannot open on this line, if any."""
    match = UNREADABLE.search(line)
    if match is None or ("://" in line and match.group().lower().startswith("issue")):
        return None
    return match.group()


def _unreadable_references(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    return [
        f"{path.relative_to(ROOT)}:{number}: {found!r}"
        for number, line in enumerate(text.splitlines(), 1)
        if (found := _unreadable(line)) is not None
    ]


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
        f"({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_the_rules_see_the_code() -> None:
    # Guards against a wrong root: the checks below would pass on an empty list.
    modules = _python_modules()
    assert PACKAGE / "cli" / "main.py" in modules
    assert not any("payload" in p.parts for p in modules)
    assert BENCHMARKS / "run.py" in _sized_modules()
    assert any(p.suffix == ".j2" for p in _shipped_files())


@pytest.mark.parametrize(
    "line",
    [
        "# see ../shared/reference/compat-facts.md section 2",
        "# DESIGN.md, Decisions",
        "fixed in issue 12",
        "(Issue #4)",
    ],
)
def test_unreadable_references_are_recognised(line: str) -> None:
    assert _unreadable(line) is not None


@pytest.mark.parametrize(
    "line",
    [
        "# https://github.com/pytorch/pytorch/issues/157517: sm_50-sm_61 removed",
        "# pytorch issue #157517 (https://github.com/pytorch/pytorch/issues/157517)",
        "# see docs/design.md",
        "for issue in matrix.issues:",
    ],
)
def test_readable_references_pass(line: str) -> None:
    assert _unreadable(line) is None


def test_shipped_files_cite_only_what_a_reader_can_open() -> None:
    found = [hit for path in _shipped_files() for hit in _unreadable_references(path)]
    assert not found, "references a reader cannot open:\n" + "\n".join(found)


def test_no_function_over_80_lines() -> None:
    found = [hit for path in _sized_modules() for hit in _long_functions(path)]
    assert not found, "functions over 80 lines:\n" + "\n".join(found)


def test_no_module_over_800_lines() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in _sized_modules()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not found, "modules over 800 lines:\n" + "\n".join(found)


DESIGN = ROOT / "docs" / "design.md"


def _design_sections() -> dict[str, str]:
    """docs/design.md's layout, by package: the text under each `**name/**` heading."""
    sections: dict[str, str] = {}
    current = None
    for line in DESIGN.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\*\*([a-z_]+)/\*\*", line)
        if match:
            current = match.group(1)
            sections[current] = ""
        elif line.startswith("#"):
            current = None
        elif current is not None:
            sections[current] += line + "\n"
    return sections


def _modules_missing_from_design() -> list[str]:
    sections = _design_sections()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if "__pycache__" in rel.parts or "_data" in rel.parts or len(rel.parts) == 1:
            continue
        if path.name == "__init__.py" and len(rel.parts) == 2:
            continue  # a package's docstring; the package itself has its heading
        if f"`{path.name}`" not in sections.get(rel.parts[0], ""):
            missing.append(str(rel))
    return missing


def test_every_module_is_in_the_design_doc() -> None:
    assert len(_design_sections()) >= 14  # guards against a heading format the reader misses
    missing = _modules_missing_from_design()
    assert not missing, "modules docs/design.md does not name:\n" + "\n".join(missing)
