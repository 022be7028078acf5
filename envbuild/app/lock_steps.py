"""`envbuild lock` when the framework's newest series cannot be pinned with the rest: its
torchvision or torchaudio is not on the index yet (envbuild.lock.companions), or the
requirements exclude it (uv: "Because jax==0.12.0.1 depends on numpy>=2.2 and you require
numpy<2.2"; maxtext, 2026-12-07). uv would backtrack to an older release were the framework not
fixed first; `stepping_down` does so, one series at a time, and the lock says which it left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from packaging.version import InvalidVersion, Version

from envbuild.core.errors import UnsatisfiableError
from envbuild.core.models import Stack

T = TypeVar("T")
Skipped = tuple[tuple[str, str], ...]
"""(series, why) left out, oldest decision first: ("2.15", "its torchvision ... is not on the
index yet")."""

MAX_STEP_DOWNS = 3
"""Older framework series tried when a newer one cannot be pinned with the rest."""


def stepping_down(attempt: Callable[[Skipped], T]) -> T:
    """`attempt(())`; while it fails with an error that offers a series to leave out
    (`step_down`), again without it, up to MAX_STEP_DOWNS series. When a step fails otherwise,
    or none is left, the first error is raised: the newest series' cause is the one to say."""
    skipped: list[tuple[str, str]] = []
    first: UnsatisfiableError | None = None
    while True:
        try:
            return attempt(tuple(skipped))
        except UnsatisfiableError as err:
            step = step_down(err)
            tried = {series for series, _ in skipped}
            if step is None or step[0] in tried or len(skipped) >= MAX_STEP_DOWNS:
                raise (_with_tried(first, err, skipped) if first else err) from None
            first = first or err
            skipped.append(step)


def _with_tried(
    first: UnsatisfiableError, last: UnsatisfiableError, skipped: list[tuple[str, str]]
) -> UnsatisfiableError:
    """The first cause, and what the step down met without the series it left out."""
    series = ", ".join(s for s, _ in skipped)
    said = last.message.splitlines()[0] if last.message else type(last).__name__
    return UnsatisfiableError(
        f"{first.message}\n(and with series {series} left out: {said.rstrip(':')})",
        hint=first.hint,
        fields={**first.fields, "step_down_tried": [s for s, _ in skipped]},
    )


def step_down(err: UnsatisfiableError) -> tuple[str, str] | None:
    """(the framework series to leave out, why) an error offers, or None."""
    step = err.fields.get("step_down")
    if isinstance(step, dict) and isinstance(step.get("series"), str):
        return (step["series"], str(step.get("why") or ""))
    return None


def skipped_note(skipped: Skipped, stack: Stack) -> str | None:
    """The warning of a lock that left series out, or None."""
    if not skipped:
        return None
    fw = stack.framework
    why = "; ".join(f"{fw.name} {series}: {reason}" for series, reason in skipped)
    return (
        f"left out {why}; locked {fw.name} {fw.version}, the newest release that fits; "
        "`envbuild lock --upgrade` tries the newer series again"
    )


def with_step_down(err: UnsatisfiableError, name: str, version: str) -> UnsatisfiableError:
    """A conflict whose explanation names the framework's own pin (uv: "Because jax==0.12.0.1
    depends on numpy>=2.2 and you require numpy<2.2"; maxtext's lock, 2026-12-07) offers
    `lock` an older series of it (envbuild.app.lock `lock_image`), as uv would backtrack to one
    were the framework not fixed first."""
    try:
        release = Version(version).release
    except InvalidVersion:
        return err
    if len(release) < 2 or f"{name}=={version}" not in f"{err.message}\n{err.fields}":
        return err
    step = {"series": f"{release[0]}.{release[1]}", "why": "it conflicts with the requirements"}
    return UnsatisfiableError(err.message, hint=err.hint, fields={**err.fields, "step_down": step})
