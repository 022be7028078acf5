"""A byte-reproducible sdist of a source folder (the example extension of images/torch-ext).

The lock records the sdist's sha256, so the file must come out the same on every machine:
sorted members, mtime 0, uid/gid 0, gzip without a timestamp. PKG-INFO is core metadata 2.2
(https://packaging.python.org/en/latest/specifications/core-metadata/) with no `Dynamic`
field, so installers may trust it without building (PEP 643); its values come from the
folder's pyproject.toml [project] table.

Regenerate after changing images/torch-ext/vecadd (then re-lock images/torch-ext):
    .venv/bin/python -m tests.sdist images/torch-ext/vecadd images/torch-ext/wheels
"""

from __future__ import annotations

import gzip
import io
import sys
import tarfile
from pathlib import Path

_SKIP = ("__pycache__", "build", "dist")


def pkg_info(project: dict[str, object]) -> str:
    """Core metadata 2.2 of a pyproject [project] table (the keys the example uses)."""
    lines = [
        "Metadata-Version: 2.2",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
    ]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    for dep in project.get("dependencies", []) or []:  # type: ignore[attr-defined]
        lines.append(f"Requires-Dist: {dep}")
    return "\n".join(lines) + "\n"


def _files(src: Path) -> list[Path]:
    return sorted(
        p
        for p in src.rglob("*")
        if p.is_file()
        and not any(part in _SKIP or part.endswith(".egg-info") for part in p.parts)
        and p.suffix not in (".pyc", ".so", ".o")
    )


def make_sdist(src: Path) -> tuple[str, bytes]:
    """(file name, bytes) of the sdist of `src` (a folder holding pyproject.toml)."""
    from envbuild.request.parse import toml_loads

    project = toml_loads((src / "pyproject.toml").read_text())["project"]
    name = str(project["name"]).replace("-", "_")
    root = f"{name}-{project['version']}"
    members = {f"{root}/PKG-INFO": pkg_info(project).encode()}
    for path in _files(src):
        members[f"{root}/{path.relative_to(src).as_posix()}"] = path.read_bytes()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in sorted(members):
            data = members[member]
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as gz:
        gz.write(raw.getvalue())
    return f"{root}.tar.gz", packed.getvalue()


def main(argv: list[str]) -> int:
    src, out = Path(argv[0]), Path(argv[1])
    name, data = make_sdist(src)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_bytes(data)
    print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
