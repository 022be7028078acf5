"""Packages a lock took from a local wheel folder reach a build only through a wheelhouse in
its context (`--find-links DIR`). Without the flag, the folder the lock records as their
source is that wheelhouse when it is here and holds their files; only then is nothing asked.

The files are matched by the name and version in their file names (the wheel and sdist naming
conventions, packaging.python.org/en/latest/specifications/); pip checks their hashes
against the lock in the build (`--require-hashes`), so a file with the right name but other
bytes still fails there, never silently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import (
    canonicalize_name,
)
from packaging.version import InvalidVersion, Version

from envbuild.core.errors import UserError
from envbuild.core.locations import folder_distributions, is_direct_url, is_remote, local_path

if TYPE_CHECKING:
    from envbuild.core.models import Lock, LockedPackage
    from envbuild.render.dockerfile import RenderOptions


def local_sources(lock: Lock) -> list[str]:
    """The local folders (or files) the lock took packages from, as it records them."""
    return sorted({p.source for p in lock.packages if not is_remote(p.source)})


def _folder(source: str, image_dir: Path) -> Path | None:
    """The folder a local source names: itself, or the folder of a file (`name @ file:...`);
    a relative one from the image folder."""
    path = local_path(source)
    if path is None:
        return None
    path = image_dir / path
    return path.parent if is_direct_url(source) else path


def _missing(folder: Path, packages: Sequence[LockedPackage]) -> list[str]:
    held = {(str(name), version) for name, version in folder_distributions(folder)}
    out = []
    for p in packages:
        try:
            key = (str(canonicalize_name(p.name)), Version(p.version))
        except InvalidVersion:
            key = None
        if key not in held:
            out.append(f"{p.name}=={p.version}")
    return sorted(out)


def _names(packages: Sequence[LockedPackage]) -> str:
    names = sorted(p.name for p in packages)
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def lock_wheelhouse(
    lock: Lock, options: RenderOptions, *, image_dir: Path
) -> tuple[RenderOptions, str | None]:
    """`options` with the lock's local wheel folder as the wheelhouse when no --find-links
    was given and that folder is here with the locked files; the line that says so (None:
    nothing changed). UserError, naming the folder, when it is missing or lacks files."""
    local = local_sources(lock)
    if options.find_links is not None or not local:
        return options, None
    packages = [p for p in lock.packages if p.source in local]
    folders = {_folder(source, image_dir) for source in local}
    names = _names(packages)
    where = local[0] if len(local) == 1 else ", ".join(repr(s) for s in local)
    hint = "pass --find-links DIR: a folder that holds their locked files (hashes are checked)"
    fields = {"local_sources": local}
    if len(folders) > 1 or None in folders:
        raise UserError(
            f"{names} were locked from the local folders {where}; a build takes one wheelhouse",
            hint=hint,
            fields=fields,
        )
    folder = folders.pop()
    assert folder is not None
    was = "was" if len(packages) == 1 else "were"
    if not folder.is_dir():
        raise UserError(
            f"{names} {was} locked from the local wheel folder {str(folder)!r}, which is not "
            "here: the build cannot reach them on its own",
            hint=hint,
            fields=fields,
        )
    missing = _missing(folder, packages)
    if missing:
        raise UserError(
            f"the local wheel folder {str(folder)!r} the lock took {names} from does not hold "
            f"{', '.join(missing[:5])}"
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""),
            hint=hint,
            fields={**fields, "missing": missing},
        )
    note = (
        f"wheels from {folder}: the local folder the lock took {names} from "
        "(--find-links DIR takes another)"
    )
    return dataclasses.replace(options, find_links=folder), note
