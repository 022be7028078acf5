"""The one place a `Lock` is assembled from what locking found: the request (and the project
files it read), the resolved stack, the pins, and the base's facts.

Both lock use cases end here (`envbuild.app.lock` for stacks envbuild installs,
`envbuild.app.lock_base` for framework bases), so a new lock field is added to the model, this
function and the format (`envbuild.lock.format`, docs/lockfile.md), not to each use case.
Pure: every value is computed by the caller or derived here from the arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envbuild.core.locations import is_remote
from envbuild.core.models import BaseFacts, ExtensionBuild, Lock, LockedPackage, Request, Stack
from envbuild.lock.format import input_hash, row_fingerprints
from envbuild.request.parse import request_hash


@dataclass(frozen=True)
class LockPins:
    """What the Python resolver pinned for a lock, and where it pinned it from."""

    packages: tuple[LockedPackage, ...]
    """The image's packages (hash-pinned), as the request spells their sources."""
    index_url: str | None
    extra_index_urls: tuple[str, ...]
    """The indexes the pins were resolved from: the request's, with the framework's own index
    first among the extra ones where envbuild added it."""
    installer: tuple[LockedPackage, ...] = ()
    """The installer the build runs and does not keep (empty: pip installs the packages)."""
    build: ExtensionBuild | None = None
    """The builder stage of source packages; None when every package is a wheel."""


def assemble_lock(
    request: Request,
    stack: Stack,
    pins: LockPins,
    *,
    matrix_fingerprints: Mapping[str, str],
    files: Sequence[tuple[str, str]] = (),
    base_digest: str | None,
    base_facts: BaseFacts | None = None,
) -> Lock:
    """The lock of `request` resolved to `stack` and pinned to `pins`.

    `matrix_fingerprints` are the current matrix's (row key -> fingerprint; only the stack's
    rows are recorded), `files` the (path, sha256) of the project files the lock read,
    `base_digest` the base image's registry digest (None: not pinned) and `base_facts` what a
    framework base holds (None for stacks envbuild installs).
    """
    fingerprints = row_fingerprints(stack.rows, matrix_fingerprints)
    return Lock(
        name=request.name,
        input_hash=input_hash(request, fingerprints, files),
        stack=stack,
        targets=request.targets,
        platform=request.platform,
        # Local find-links folders are read at lock time only: they are not in the build
        # context (render takes a wheelhouse with --find-links); only URLs travel in the lock.
        indexes=dataclasses.replace(
            request.indexes,
            index_url=pins.index_url,
            extra_index_urls=pins.extra_index_urls,
            find_links=tuple(link for link in request.indexes.find_links if is_remote(link)),
        ),
        smoke=request.smoke,
        base_digest=base_digest,
        packages=pins.packages,
        compat=request.compat,
        request_hash=request_hash(request),
        row_fingerprints=tuple(sorted(fingerprints.items())),
        base_facts=base_facts,
        project=request.project,
        input_files=tuple(files),
        build=pins.build,
        installer=pins.installer,
    )
