"""`envbuild lock` when the framework's own index does not answer: lock the newest build that
installs from the indexes that do, say so in one line, and record that line in the lock.

`[indexes] framework_index` decides (envbuild.core.models.FRAMEWORK_INDEX_POLICIES): under
"auto" the best stack's index is probed (envbuild.lock.reach) and, when it does not answer,
the request is resolved again without it; "pypi" needs no probe (the resolver only picks
PyPI builds); "index" never falls back (uv's own error then says the index is unreachable).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from envbuild import resolver
from envbuild.core.errors import UnsatisfiableError
from envbuild.core.models import Lock, Request, Stack
from envbuild.lock import reach
from envbuild.matrix import Matrix

ResolveWith = Callable[[Request, frozenset[str]], Stack]
"""(request, index URLs that do not answer) -> the stack (UnsatisfiableError when none)."""

FALLBACK_MARK = " not answer: locked "
"""What the fallback line holds (a kept lock's line is recognised by it)."""

MAX_FALLBACKS = 8
"""Indexes tried in turn before giving up (the matrix names a handful per framework)."""


@dataclass
class Reach:
    """The probes of one `envbuild lock` (each host is asked once) and its fallback line."""

    offline: bool = False
    answers: Callable[[str], bool] | None = None
    """The probe; None = envbuild.lock.reach.index_answers (looked up when asked)."""
    by_host: dict[str, bool] = field(default_factory=dict)
    down: list[str] = field(default_factory=list)
    """The index URLs probed that did not answer (the others on their hosts were not asked)."""
    line: str | None = None
    local: Callable[[Stack], bool] | None = None
    """Whether a local wheel folder (find_links) holds the stack's framework build: then its
    index is not needed (uv takes the wheel from the folder) and is not probed."""

    def answering(self, url: str) -> bool:
        host = reach.host_of(url)
        if host not in self.by_host:
            self.by_host[host] = (self.answers or reach.index_answers)(url)
            if not self.by_host[host]:
                self.down.append(url)
        return self.by_host[host]

    held: Callable[[str], list[str]] | None = None
    """Framework name -> the versions local find_links folders hold, newest first."""

    def _held_locally(self, stack: Stack) -> bool:
        return self.local is not None and self.local(stack)

    def resolve(self, request: Request, resolve_with: ResolveWith) -> Stack:
        """The best stack whose framework index answers (module docstring)."""
        best = resolve_with(request, frozenset())
        if self.offline or request.indexes.framework_index != "auto":
            return best
        configured = {request.indexes.index_url, *request.indexes.extra_index_urls}
        unreachable: set[str] = set()
        stack = best
        for _ in range(MAX_FALLBACKS):
            url = stack.framework.index_url
            if url is None or url in configured or self._held_locally(stack):
                break
            if self.answering(url):
                break
            local = self._from_wheel_folder(request, resolve_with, frozenset(unreachable))
            if local is not None:
                stack = local
                break
            unreachable.add(url)
            try:
                stack = resolve_with(request, frozenset(unreachable))
            except UnsatisfiableError as err:
                raise _nothing_answers(err, best, self.down) from None
        if stack is not best:
            self.line = fallback_line(best, stack, self.down, local=self._held_locally(stack))
        return stack

    def _from_wheel_folder(
        self, request: Request, resolve_with: ResolveWith, unreachable: frozenset[str]
    ) -> Stack | None:
        """The newest stack whose framework build a local find_links folder holds (its index
        is not needed then), or None."""
        if self.held is None:
            return None
        name = Requirement(request.framework).name
        for version in self.held(name):
            narrowed = Requirement(request.framework)
            narrowed.specifier &= SpecifierSet(f"=={version}")
            try:
                stack = resolve_with(
                    dataclasses.replace(request, framework=str(narrowed)), unreachable
                )
            except UnsatisfiableError:
                continue
            if self._held_locally(stack):
                return stack
        return None


def fallback_line(best: Stack, locked: Stack, down: list[str], *, local: bool = False) -> str:
    """ "download.pytorch.org/whl/cu126 does not answer: locked torch 2.10.0 cu128 from PyPI,
    the newest build there that fits; the best fit is torch 2.14.1 cu126 ([indexes]
    framework_index = "index" requires it)"."""
    gone = _names(down)
    fw, top = locked.framework, best.framework
    where = reach.shown(fw.index_url) if fw.index_url else "PyPI"
    if local:
        where = "a local find_links folder"
    return (
        f"{gone}{FALLBACK_MARK}{fw.name} {fw.version} {fw.variant} from {where}, the newest "
        f"build there that fits; the best fit is {top.name} {top.version} {top.variant} "
        '([indexes] framework_index = "index" requires it)'
    )


def _names(down: list[str]) -> str:
    """ "download.pytorch.org/whl/cu126 does" / "a, b do" (the verb agrees)."""
    names = ", ".join(reach.shown(u) for u in down)
    return names + (" does" if len(down) == 1 else " do")


def _nothing_answers(err: UnsatisfiableError, best: Stack, down: list[str]) -> UnsatisfiableError:
    fw = best.framework
    return UnsatisfiableError(
        f"{_names(down)} not answer, and no {fw.name} build from an index that answers fits: "
        + err.message,
        hint=f"the best fit is {fw.name} {fw.version} {fw.variant}; " + err.hint,
        fields=err.fields,
    )


def recorded(stack: Stack, reach_state: Reach, kept: Lock | None) -> Stack:
    """The stack with the fallback line among its notes (what the lock records): this lock's
    line, or a kept lock's while it keeps the same framework build."""
    line = reach_state.line
    if line is None and kept is not None and kept.stack.framework == stack.framework:
        line = next((n for n in kept.stack.notes if FALLBACK_MARK in n), None)
    if line is None or line in stack.notes:
        return stack
    return dataclasses.replace(stack, notes=(*stack.notes, line))


def pypi_fit(request: Request, matrix: Matrix) -> str | None:
    """'[indexes] framework_index = "pypi" locks torch 2.10.0 cu128 from PyPI, the newest
    build there that fits' when the request, resolved with PyPI builds only, has a stack (a
    hint is only shown once the resolver found that it fits: it knows the drivers, the
    device and the GPUs, a hand-made guess did not)."""
    indexes = dataclasses.replace(request.indexes, framework_index="pypi")
    result = resolver.resolve(dataclasses.replace(request, indexes=indexes), matrix)
    if not isinstance(result, Stack) or result.framework.index_url:
        return None
    fw = result.framework
    return (
        f'[indexes] framework_index = "pypi" locks {fw.name} {fw.version} {fw.variant} from '
        "PyPI, the newest build there that fits"
    )
