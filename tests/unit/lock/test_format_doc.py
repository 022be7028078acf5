"""docs/lockfile.md documents every key `envbuild.lock.format.dumps` writes, and no key it
does not: the keys are collected from the dumps of each committed example lock (loaded, then
written again) and of one lock with every optional table and key set, walking the tables.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from envbuild.core.models import BaseFacts, Lock, ManagedPython, ProjectSettings
from envbuild.lock.format import dumps, loads
from envbuild.request.parse import toml_loads

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "lockfile.md"
EXAMPLES = sorted(ROOT.glob("images/*/envbuild.lock"))

MAPS = frozenset({"inputs.rows", "inputs.files", "base_facts.packages"})
"""Tables whose keys are data (row keys, file paths, package names), not format keys: the doc
documents the table itself, as a key of its parent."""

_HEADING = re.compile(r"^#{2,} (?:`\[\[?([\w.]+)\]\]?`|(Top-level keys))\s*$")
_ROW = re.compile(r"^\| `([\w]+)` \|")


def documented_keys(text: str) -> set[str]:
    """The dotted keys of the doc's key tables: a heading `### `[table]`` documents `table`,
    a row `| `key` |` under it (or under `### Top-level keys`) documents `table.key`."""
    keys: set[str] = set()
    table: str | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            heading = _HEADING.match(line)
            table = None if heading is None else (heading.group(1) or "")
            if table:
                keys.add(table)  # a table's heading documents the table itself
            continue
        row = _ROW.match(line)
        if row is not None and table is not None:
            keys.add(f"{table}.{row.group(1)}" if table else row.group(1))
    return keys


def written_keys(lock: Lock) -> set[str]:
    """Every dotted key `dumps(lock)` writes (array-of-tables entries walked like tables)."""
    keys: set[str] = set()

    def walk(table: dict[str, Any], prefix: str) -> None:
        for key, value in table.items():
            path = f"{prefix}.{key}" if prefix else key
            keys.add(path)
            if path in MAPS:
                continue
            if isinstance(value, dict):
                walk(value, path)
            elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                for entry in value:
                    walk(entry, path)

    walk(toml_loads(dumps(lock)), "")
    return keys


def _example(name: str) -> Lock:
    return loads((ROOT / "images" / name / "envbuild.lock").read_text(encoding="utf-8"))


def everything_lock() -> Lock:
    """The example with a builder stage and an installer, with every other optional table and
    key set too (a framework base's facts, a project, a digest, a builder image, ...)."""
    lock = _example("torch-ext")
    stack = lock.stack
    assert stack.floors is not None and lock.build is not None
    stack = dataclasses.replace(
        stack,
        framework=dataclasses.replace(stack.framework, index_url="https://example.org/whl"),
        base_image=dataclasses.replace(
            stack.base_image, cudnn="9.1.0", builder="nvidia/cuda:13.0.0-devel-ubuntu24.04"
        ),
        managed_python=ManagedPython(
            version="3.14.7",
            uv_key="cpython-3.14.7+freethreaded-linux-x86_64-gnu",
            release="20260814",
            url="https://github.com/astral-sh/python-build-standalone/releases/download/x.tar.gz",
            sha256="4" * 64,
            bootstrap_python="3.12",
        ),
    )
    pure = dataclasses.replace(  # an sdist with no compiled code: `kind = "pure"`
        next(p for p in lock.packages if p.sdist), name="envbuild-puredep", pure=True
    )
    return dataclasses.replace(
        lock,
        stack=stack,
        packages=(*lock.packages, pure),
        base_digest="sha256:" + "1" * 64,
        indexes=dataclasses.replace(lock.indexes, index_url="https://example.org/simple"),
        smoke=dataclasses.replace(lock.smoke, command=("python", "-m", "train")),
        project=ProjectSettings(command=("python",), ignore=("data/",)),
        input_files=(("pyproject.toml", "sha256:" + "2" * 64),),
        base_facts=BaseFacts(
            source="probe",
            framework="torch",
            framework_version="2.10.0a0+b4e4ee81d3",
            cuda="13.0",
            cudnn="9.13.0",
            nccl="2.27.7",
            archs=("sm_90",),
            python="3.12",
            python_path="/usr/bin/python3",
            os="ubuntu24.04",
            image_id="sha256:" + "3" * 64,
            packages=(("numpy", "2.1.0"),),
        ),
    )


def test_the_examples_are_the_locks_the_doc_names() -> None:
    assert len(EXAMPLES) >= 8
    text = DOC.read_text(encoding="utf-8")
    for name in ("torch-train", "torch-ext", "torch-project"):
        assert f"images/{name}/envbuild.lock" in text


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_every_key_of_an_example_lock_is_documented(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    lock = loads(text)
    assert dumps(lock, command=text.splitlines()[0].split(": ", 1)[1]) == text  # walked as written
    missing = written_keys(lock) - documented_keys(DOC.read_text(encoding="utf-8"))
    assert not missing, f"keys {path} has that docs/lockfile.md does not document: {missing}"


def test_every_key_dumps_can_write_is_documented_and_nothing_else() -> None:
    written = written_keys(everything_lock())
    documented = documented_keys(DOC.read_text(encoding="utf-8"))
    assert written - documented == set(), "written but not in docs/lockfile.md"
    assert documented - written == set(), "in docs/lockfile.md but never written"


def test_the_doc_names_the_schema_version_this_envbuild_writes() -> None:
    from envbuild.core.models import LOCK_SCHEMA_VERSION

    text = DOC.read_text(encoding="utf-8")
    assert f"writes and reads version **{LOCK_SCHEMA_VERSION}**" in text


def test_documented_keys_reads_headings_and_rows() -> None:
    text = "### Top-level keys\n| `a` | x |\n### `[t.u]`\n| `b` | y |\n## Other\n| `c` | z |\n"
    assert documented_keys(text) == {"a", "t.u", "t.u.b"}
