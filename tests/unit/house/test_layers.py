"""The import direction of the package (docs/design.md, "Layout"): every import points down
the stage list, none back up, none in a circle; function-level and TYPE_CHECKING imports
count as much as module-level ones, because a reader (and the next change) sees them too.

The graph is read from the source with `ast`, so nothing is imported to check it.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "envbuild"

STAGES = (
    ("core", "payload"),
    ("request",),
    ("cuda",),
    ("host",),
    ("matrix",),
    ("engine",),
    ("resolver",),
    ("lock",),
    ("smoke",),
    ("render",),
    ("build",),
    ("preflight",),
    ("app",),
    ("cli",),
)
"""Lowest first: a package may import its own stage's modules and any stage before it.
`envbuild/__init__.py` (the version) counts as core."""

RANK = {name: rank for rank, names in enumerate(STAGES) for name in names}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts
    }


def _imported(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _graph() -> dict[str, set[str]]:
    """module -> the envbuild modules it imports anywhere in its body."""
    modules = _modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _imported(node, package):
                found = known(target) if target.startswith("envbuild") else None
                if found and found != name:
                    edges[name].add(found)
    return edges


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "core"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_every_package_has_a_stage() -> None:
    stages = {_stage(m) for m in _modules()} - {"__init__"}
    assert stages <= set(RANK), f"packages without a stage: {sorted(stages - set(RANK))}"


def test_imports_point_down_the_stages() -> None:
    upward = [
        f"{source} -> {target}"
        for source, targets in sorted(_graph().items())
        for target in sorted(targets)
        if RANK[_stage(target)] > RANK[_stage(source)]
    ]
    assert not upward, "imports against the direction of docs/design.md:\n" + "\n".join(upward)


def test_no_import_circle() -> None:
    assert _cycles(_graph()) == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_the_circle_finder_finds_circles(
    edges: dict[str, set[str]], expected: list[list[str]]
) -> None:
    # Guards the check above against a finder that never finds anything.
    assert _cycles(defaultdict(set, edges)) == expected


def test_the_graph_sees_function_level_imports() -> None:
    # cli.main imports the error classes inside functions (the start-up path): they count.
    assert "envbuild.core.errors" in _graph()["envbuild.cli.main"]
