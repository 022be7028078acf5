"""NVIDIA_REQUIRE_CUDA: evaluated like libnvidia-container's legacy hook, and shown briefly.

Space-separated constraints are ORed, comma-separated ones ANDed; the properties are cuda (the
CUDA version the driver supports), driver, arch (compute capability) and brand; constraints on
unknown properties are skipped (https://github.com/NVIDIA/nvidia-container-toolkit,
internal/requirements/constraints/factory.go, binary.go, property.go). Pure.

nvidia/cuda images carry dozens of `brand=` forward-compatibility clauses; people read the
expression as its first constraint and a count (`short_form`), --json and the image keep it
whole.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envbuild.core.models import Host, HostGpu
from envbuild.core.versions import try_version

_OPERATORS = ("!=", "<=", ">=", "=", "<", ">")
"""Longest first, as the toolkit's parser tries them (factory.go)."""
_VERSION_PROPERTIES = ("cuda", "driver", "arch")
_STRING_PROPERTIES = ("brand",)

CONSUMER_BRAND = "geforce"
"""A brand no forward-compatibility clause names: how a GeForce board is judged when the facts
do not record the brand."""


@dataclass(frozen=True)
class RequireResult:
    ok: bool
    expression: str
    unsatisfied: tuple[str, ...] = ()
    """For a failed expression: every OR term, each with the factor that failed and why."""


def _compare(prop: str, have: str | None, op: str, want: str) -> tuple[bool, str]:
    """One factor `prop op want` against the host's value; (satisfied, why not)."""
    if prop in _STRING_PROPERTIES:
        value = have or ""
        cmp = (value > want) - (value < want)
    else:
        want_v = try_version(want)
        if want_v is None:
            return False, f"{prop}{op}{want}: {want!r} is not a version"
        have_v = try_version(have)
        if have_v is None:
            # The toolkit compares with semver, where an unknown (invalid) version is lower
            # than every valid one; "unknown" therefore fails >=, > and = like it would there.
            return op in ("<", "<=", "!="), f"{prop}{op}{want}: host {prop} unknown"
        cmp = (have_v > want_v) - (have_v < want_v)
    ok = {
        "=": cmp == 0,
        "!=": cmp != 0,
        "<": cmp < 0,
        "<=": cmp <= 0,
        ">": cmp > 0,
        ">=": cmp >= 0,
    }[op]
    return ok, f"{prop}{op}{want}: host has {prop}={have or 'unknown'}"


def _term(term: str, properties: Mapping[str, str | None]) -> tuple[bool, bool, str]:
    """One OR term: (counted, holds, why not). Not counted: only unknown properties."""
    counted = False
    for factor in (f for f in term.split(",") if f.strip()):
        m = re.match(r"([^<>=!]*)(.*)$", factor)
        assert m is not None  # the pattern matches every string
        prop, rest = m.group(1), m.group(2)
        if prop not in _VERSION_PROPERTIES and prop not in _STRING_PROPERTIES:
            continue  # the toolkit skips constraints on properties it does not know
        counted = True
        op = next((o for o in _OPERATORS if rest.startswith(o)), "")
        if not op:
            return True, False, f"{factor}: no comparison operator"
        ok, reason = _compare(prop, properties.get(prop), op, rest[len(op) :])
        if not ok:
            return True, False, reason
    return counted, True, ""


def evaluate_require(expression: str, properties: Mapping[str, str | None]) -> RequireResult:
    """Evaluate one NVIDIA_REQUIRE_* value against host properties (cuda, driver, arch, brand).

    "cuda>=12.8 brand=tesla,driver>=470,driver<471" is true when the driver supports CUDA
    12.8, or when it is a Tesla-brand GPU on a 470 driver (the forward-compatibility clause).
    Pure, so remembered: a fleet of 100 000 hosts has a few (driver, GPU) pairs
    (`validate --hosts` stays linear and cheap per host, benchmarks/RESULTS.md).
    """
    return _evaluate(expression, tuple(sorted(properties.items())))


@functools.lru_cache(maxsize=4096)
def _evaluate(expression: str, items: tuple[tuple[str, str | None], ...]) -> RequireResult:
    properties = dict(items)
    failures: list[str] = []
    evaluated = 0
    for term in (t for t in expression.split(" ") if t.strip()):
        counted, holds, why = _term(term, properties)
        if not counted:
            continue
        evaluated += 1
        if holds:
            return RequireResult(ok=True, expression=expression)
        failures.append(f"{term} (fails on {why})")
    if evaluated == 0:
        return RequireResult(ok=True, expression=expression)
    return RequireResult(ok=False, expression=expression, unsatisfied=tuple(failures))


def require_properties(
    host: Host, gpu: HostGpu | None, *, cuda: str | None = None, brand: str | None = None
) -> dict[str, str | None]:
    """The properties the toolkit compares NVIDIA_REQUIRE_* with, for one GPU of a host.
    `cuda` and `brand` replace what the facts carry (a CUDA version derived from the driver,
    a brand tried because the facts record none)."""
    return {
        "cuda": cuda or host.cuda_driver,
        "driver": host.driver,
        "arch": gpu.cc if gpu else None,
        "brand": brand or ((gpu.brand or None) if gpu else None),
    }


def brands_of(expression: str) -> tuple[str, ...]:
    """The brands the expression's forward-compatibility clauses name, in order."""
    seen: dict[str, None] = {}
    for m in re.finditer(r"(?:^|[ ,])brand=([A-Za-z0-9_-]+)", expression):
        seen.setdefault(m.group(1), None)
    return tuple(seen)


def cuda_floor_of(expression: str) -> str | None:
    """X.Y of the expression's `cuda>=X.Y` constraint, if it has one."""
    m = re.search(r"cuda>=(\d+(?:\.\d+)*)", expression)
    return m.group(1) if m else None


@functools.lru_cache(maxsize=64)
def short_form(expression: str) -> str:
    """The expression as people read it: the constraints other than `brand=` clauses in full,
    the clauses as a count with their driver branches."""
    parts = expression.split()
    brands = [p for p in parts if p.startswith("brand=")]
    if len(brands) <= 2:
        return repr(expression)
    rest = " ".join(p for p in parts if not p.startswith("brand="))
    branches = sorted({int(b) for p in brands for b in re.findall(r"driver>=(\d+)", p)})
    on = f": branches {', '.join(map(str, branches))}" if branches else ""
    return f"'{rest}' (+{len(brands)} brand= forward-compat clauses{on})"


def short_unsatisfied(failures: Sequence[str], driver: str | None, brand: str | None) -> str:
    """Why the expression is false, readable: the `cuda>=` term in full, the dozens of `brand=`
    forward-compat clauses of nvidia/cuda bases as one count (each failing line was as long as
    a screen and said the same thing)."""
    brands = [f for f in failures if f.startswith("brand=")]
    shown = [f for f in failures if not f.startswith("brand=")]
    if len(brands) <= 2:
        return "; ".join(failures)
    shown.append(
        f"none of the {len(brands)} brand= forward-compat clauses matches "
        f"(brand={brand or 'unknown'}, driver={driver or 'unknown'})"
    )
    return "; ".join(shown)
