"""The project part of `envbuild lock`: a request's `[packages] files` read, the framework
range narrowed by what the project asks for, and conflicts worded as the project's.

Kept apart from envbuild.app.lock so a request without project files never imports the
project readers (their packaging imports cost `lock --check` time).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.app.lock_steps import with_step_down
from envbuild.core.errors import UnsatisfiableError
from envbuild.core.models import Request, Stack

if TYPE_CHECKING:  # a real import would load the readers for every lock
    from envbuild.lock.projectdeps import ProjectInputs


def has_project_files(request: Request) -> bool:
    installs = request.project is not None and request.project.install
    return bool(request.dependency_files.files) or installs


def read_inputs(image_dir: Path, request: Request) -> ProjectInputs | None:
    """The project's requirement lines and file hashes; None for a request without them."""
    if not has_project_files(request):
        return None
    from envbuild.lock import projectdeps

    return projectdeps.read(image_dir, request)


def resolve(
    request: Request,
    project: ProjectInputs | None,
    resolve_stack: Callable[[Request], Stack],
) -> Stack:
    """The stack of `request` with the project's own range on the framework added; when only
    that range makes it unsatisfiable, an error naming both sides and the ways out."""
    if project is None:
        return resolve_stack(request)
    from envbuild.lock import projectdeps

    narrowed = projectdeps.narrowed_framework(
        request.framework, project, python=request.python, platform=request.platform
    )
    if narrowed == request.framework:
        stack = resolve_stack(request)
    else:
        try:
            stack = resolve_stack(dataclasses.replace(request, framework=narrowed))
        except UnsatisfiableError as err:
            try:
                alone = resolve_stack(request)
            except UnsatisfiableError:
                # The request fails without the project too; its ways out must still be ways
                # the project takes.
                raise within_project(err, request, project) from None
            reasons = [str(r) for r in err.fields.get("reasons", [])] or [err.message]
            raise projectdeps.framework_conflict(
                project,
                request.framework,
                version=alone.framework.version,
                variant=alone.framework.variant,
                reasons=reasons,
            ) from None
    projectdeps.check_python(project, stack.python)
    return stack


_OTHER_VERSION = re.compile(r"^another (\S+) version: \S+ (\S+) ")
"""envbuild.resolver.explain `_other_versions`: "another torch version: torch 2.10.0 cu128 ..."."""


def within_project(
    err: UnsatisfiableError, request: Request, project: ProjectInputs
) -> UnsatisfiableError:
    """`err` (nothing fits the request, the project's range added) with its "another version"
    ways out checked against that range: one outside it is offered only with the project's
    range widened too (axolotl: torch>=2.11.0,<=2.12.1 was told torch 2.10.0 fits)."""
    from packaging.requirements import Requirement

    from envbuild.lock import projectdeps

    name = Requirement(request.framework).name
    bare = projectdeps.narrowed_framework(
        name, project, python=request.python, platform=request.platform
    )
    spec = Requirement(bare).specifier
    wants = "; ".join(
        f"{line.origin}: {line.text}" for line in projectdeps.framework_lines(project, name)
    )
    ways: list[str] = []
    for way in err.fields.get("alternatives", []):
        m = _OTHER_VERSION.match(str(way))
        if m is None or spec.contains(m.group(2), prereleases=True):
            ways.append(str(way))
        else:
            ways.append(f"{way}, outside the project's range ({wants}): widen that too")
    if ways == list(err.fields.get("alternatives", [])):
        return err
    return UnsatisfiableError(
        err.message,
        hint="try: " + "; or ".join(ways),
        fields={**err.fields, "alternatives": ways},
    )


def pin_conflict(
    err: UnsatisfiableError, project: ProjectInputs | None, stack: Stack
) -> UnsatisfiableError:
    """uv's "no solution" worded for a project: its pins against the stack's framework; a
    companion's series (torchvision for torch) worded as envbuild's rule, project or not."""
    from envbuild.lock.companions import companion_conflict

    fw = stack.framework
    companion = companion_conflict(err, fw.name, fw.version)
    if companion is not None:
        return companion
    if project is not None:
        from envbuild.lock import projectdeps

        err = projectdeps.explain_pin_conflict(err, project, f"{fw.name} {fw.version} {fw.variant}")
    return with_step_down(err, fw.name, fw.version)
