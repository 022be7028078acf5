"""What a framework-base request adds to its base, locked: `[packages] requirements`, the
project's files and build backend (`[packages] files`, `[project] install`) and source
packages, all under what the base already holds.

A requirement the base already satisfies (the installed version is inside its specifier) is
not resolved again: the base's distribution stays, the lock's base facts record it, and an
index that does not serve the base's own build (NGC's torch is `2.x.0a0+...`), or no index at
all, is no obstacle. The rest is pinned with hashes under the base's installed versions as
constraints. An sdist's own dependencies and build requirements get the same rule, so an
extension that needs only torch, setuptools and ninja locks from the wheelhouse alone; it is
compiled in a builder stage FROM the same base, with the base's toolkit and torch
(templates/framework.Dockerfile.j2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuild.app import lock_project as project_lock
from envbuild.app import lock_source as source_lock
from envbuild.core.errors import UnsatisfiableError, UserError
from envbuild.core.locations import resolve_local
from envbuild.core.models import BaseFacts, ExtensionBuild, LockedPackage, Request, Stack
from envbuild.core.versions import held_satisfies
from envbuild.lock import pins as pydeps
from envbuild.lock.projectdeps import ProjectInputs
from envbuild.resolver import base as framework_base


@dataclasses.dataclass(frozen=True)
class BaseExtras:
    """The extra pins of a framework-base lock and what came with them."""

    packages: tuple[LockedPackage, ...] = ()
    tool: str = ""
    build: ExtensionBuild | None = None
    notes: tuple[str, ...] = ()
    project: ProjectInputs | None = None


def satisfied_by(facts: BaseFacts, platform: str) -> Callable[[str], bool]:
    """A test of one requirement line: True when the base's installed distribution satisfies
    it (or its marker excludes the image). A requirement with extras or a URL is resolved."""
    held = _held(facts)
    env = pydeps.target_environment(facts.python, platform)

    def test(text: str) -> bool:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            return False  # the resolver words the error
        if req.marker is not None and not req.marker.evaluate(env):
            return True
        version = held.get(str(canonicalize_name(req.name)))
        if version is None or req.url or req.extras:
            return False
        try:
            parsed = Version(version)
        except InvalidVersion:
            return False
        return held_satisfies(parsed, req.specifier)

    return test


def _held(facts: BaseFacts) -> dict[str, str]:
    """What the base holds, the framework always among it (facts from a matrix row may list
    no other package)."""
    return {
        str(canonicalize_name(facts.framework)): facts.framework_version,
        **dict(facts.packages),
    }


def _constraints(facts: BaseFacts) -> tuple[str, ...]:
    listed = framework_base.constraints(facts)
    if any(n == str(canonicalize_name(facts.framework)) for n, _ in facts.packages):
        return listed
    try:
        public = Version(facts.framework_version).public
    except InvalidVersion:
        return listed
    return (*listed, f"{canonicalize_name(facts.framework)}=={public}")


def lock_extras(
    image_dir: Path,
    request: Request,
    facts: BaseFacts,
    stack: Stack,
    *,
    kept: Sequence[LockedPackage] = (),
    upgrade_packages: Sequence[str] = (),
    offline: bool = False,
    runner: pydeps.Runner | None = None,
) -> BaseExtras:
    """The extra packages (hash-pinned, minus what the base holds), the builder stage's pins
    of source packages, and the project's inputs."""
    project = project_lock.read_inputs(image_dir, request)
    if request.project is not None and request.project.install and not facts.has_pip:
        raise UserError(
            f"[project] install = true, but the base {request.base} has no pip for "
            f"{facts.python_path} to install the project with",
            hint="write install = false (the code is copied and run from its folder), or use "
            "a base with pip",
        )
    satisfied = satisfied_by(facts, request.platform)
    lines = (*request.packages, *(project.lines if project is not None else ()))
    wanted = tuple(line for line in lines if not satisfied(line))
    if not wanted:
        return BaseExtras(project=project)
    framework_base.check_extras(request, facts, wanted)
    upgrade_set = {str(canonicalize_name(n)) for n in upgrade_packages}
    find_links = tuple(resolve_local(f, image_dir) for f in request.indexes.find_links)
    extra_constraints = tuple(c.text for c in project.constraints) if project is not None else ()
    req = pydeps.PinRequest(
        requirements=wanted,
        python=facts.python,
        platform=request.platform,
        index_url=request.indexes.index_url,
        extra_index_urls=request.indexes.extra_index_urls,
        find_links=find_links,
        preferences=tuple(p for p in kept if p.name not in upgrade_set),
        upgrade_packages=tuple(sorted(upgrade_set)),
        offline=offline,
        constraints=(*_constraints(facts), *extra_constraints),
    )

    def pin(r: pydeps.PinRequest) -> pydeps.PinResult:
        return pydeps.pin(r, runner=runner)

    try:
        sourced = source_lock.pin_allowing_sources(pin, req, request, drop=satisfied)
    except UnsatisfiableError as err:
        raise _base_conflict(err, request, project) from None
    result = source_lock.as_requested(sourced.result, request.indexes.find_links, find_links)
    framework = str(canonicalize_name(facts.framework))
    packages = tuple(
        p for p in framework_base.extras_only(result.packages, facts) if p.name != framework
    )
    build = source_lock.lock_build(pin, req, stack, packages, drop=satisfied)
    if build is not None:
        spelled = source_lock.as_requested(
            pydeps.PinResult(build.packages, result.tool), request.indexes.find_links, find_links
        )
        build = dataclasses.replace(build, packages=spelled.packages)
    return BaseExtras(packages, result.tool, build, sourced.notes, project)


def _base_conflict(
    err: UnsatisfiableError, request: Request, project: ProjectInputs | None
) -> UnsatisfiableError:
    """uv's "no solution" on a framework base: what the base holds cannot be replaced."""
    where = "the project's dependencies" if project is not None else "[packages] requirements"
    return UnsatisfiableError(
        f"{where} cannot be pinned under what {request.base} holds (its installed versions "
        f"are constraints: nothing it holds is replaced):\n{err.message}",
        hint="require versions that fit the base's packages (`envbuild lock` records them in "
        "[base_facts]), put the missing wheels in a [indexes] find_links folder, or pick "
        "another base",
        fields=err.fields,
    )
