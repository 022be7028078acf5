"""The diff against the matrix (a Plan of changes) and its TOML and JSON output."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuild.matrix import (
    FrameworkBuild,
    FrameworkRelease,
    Matrix,
)
from envbuild.matrix.refresh.channels import Derived
from envbuild.matrix.refresh.findings import _spec_contains

# -- diff against the matrix ------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    key: str
    field: str
    old: Any
    new: Any
    source: str = ""

    def __str__(self) -> str:
        return f"{self.key}: {self.field} {self.old!r} -> {self.new!r}"


@dataclass(frozen=True)
class Plan:
    """What a refresh would do.

    `new_releases` are appended to `matrix/<framework>.toml`. `pending_builds` are derived
    but not written: a CUDA build row needs the archs the build carries, which neither PyPI nor
    the index tells (matrix.py rejects a CUDA build without archs so the resolver never guesses
    GPU coverage); a human adds them with the archs (`torch.cuda.get_arch_list()` in the wheel).
    `changes` are facts of existing rows that differ from the source: reported for review,
    never rewritten (rewriting a row changes its fingerprint and makes locks on it stale).
    """

    new_releases: tuple[FrameworkRelease, ...] = ()
    pending_builds: tuple[FrameworkBuild, ...] = ()
    changes: tuple[Change, ...] = ()
    unchanged: int = 0
    skipped: tuple[str, ...] = ()
    findings: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    """Sources that could not be reached."""


RELEASE_FACTS = ("python", "free_threaded", "yanked")
BUILD_FACTS = ("variant", "cuda", "cudnn", "nccl")


def plan_changes(matrix: Matrix, derived: Sequence[Derived]) -> Plan:
    """Compare derived rows with the matrix (see `Plan`)."""
    releases = {r.key: r for r in matrix.releases}
    new_releases: list[FrameworkRelease] = []
    pending: dict[str, FrameworkBuild] = {}
    changes: list[Change] = []
    unchanged = 0
    derived_keys: set[str] = set()
    for d in derived:
        for r in d.releases:
            if r.key in derived_keys:
                continue  # the same release read from a second channel (jax cuda12 / cuda13)
            derived_keys.add(r.key)
            old = releases.get(r.key)
            if old is None:
                new_releases.append(r)
                releases[r.key] = r
                continue
            diffs = [
                Change(r.key, f, getattr(old, f), getattr(r, f), r.source)
                for f in RELEASE_FACTS
                if not _same_fact(f, getattr(old, f), getattr(r, f))
            ]
            changes.extend(diffs)
            unchanged += not diffs
        for b in d.builds:
            spec = SpecifierSet(b.versions)
            versions = [r.version for r in d.releases if spec.contains(r.version, prereleases=True)]
            covering = _covering_builds(matrix.builds, b, versions)
            if len(covering) < len(versions):
                # Some release of this build has no matrix row for its variant: a human adds
                # one (with archs); the releases that do have one are still compared below.
                pending.setdefault(b.key, b)
            compared: set[str] = set()
            for old_b in covering.values():
                if old_b.key in compared:
                    continue
                compared.add(old_b.key)
                diffs = [
                    Change(old_b.key, f, getattr(old_b, f), getattr(b, f), b.source)
                    for f in BUILD_FACTS
                    if getattr(b, f) is not None
                    and not (
                        _within_floor(f, getattr(old_b, f), getattr(b, f))
                        if d.floors
                        else _same_fact(f, getattr(old_b, f), getattr(b, f))
                    )
                ]
                changes.extend(diffs)
                unchanged += not diffs
    return Plan(
        new_releases=tuple(sorted(new_releases, key=lambda r: (r.framework, Version(r.version)))),
        pending_builds=tuple(pending.values()),
        changes=tuple(changes),
        unchanged=unchanged,
        skipped=tuple(s for d in derived for s in d.skipped),
        findings=tuple(s for d in derived for s in d.findings),
    )


def _covering_builds(
    builds: Sequence[FrameworkBuild], new: FrameworkBuild, versions: Sequence[str]
) -> dict[str, FrameworkBuild]:
    """release -> the existing row that describes the same thing for it: the same variant, or
    (for a PyPI-default build) the row the matrix marks as the PyPI default, so a changed
    default variant shows up as a changed fact. Releases without such a row are left out."""
    out: dict[str, FrameworkBuild] = {}
    for v in versions:
        for b in builds:
            if b.framework != new.framework or not _spec_contains(b.versions, v):
                continue
            if b.variant == new.variant or (new.pypi_default and b.pypi_default):
                out.setdefault(v, b)
    return out


def _within_floor(name: str, old: Any, floor: str) -> bool:
    """For range pins (jax, tensorflow): the matrix value is fine unless it is below the floor
    pip enforces (None = the matrix does not say, which a floor does not contradict)."""
    if old is None or name == "variant":
        return old is None or old == floor
    try:
        o, f = Version(str(old)).release, Version(floor).release
    except InvalidVersion:
        return False
    n = min(len(o), len(f))
    return o[:n] >= f[:n]


def _same_fact(name: str, old: Any, new: Any) -> bool:
    if old == new:
        return True
    if name in ("python", "free_threaded") and isinstance(old, str) and isinstance(new, str):
        try:
            return SpecifierSet(old) == SpecifierSet(new)
        except InvalidSpecifier:
            return False
    if name == "cuda" and isinstance(old, str) and isinstance(new, str):
        # The matrix may name the update ("12.6.3") or only the minor ("12.6") where PyPI gives
        # the first toolkit release that ships the same runtime ("12.6.2"): the same build.
        return Version(old).release[:2] == Version(new).release[:2]
    if name in ("cudnn", "nccl") and isinstance(old, str) and isinstance(new, str):
        # "9.10.2" in the matrix names the release whose full build number is "9.10.2.21".
        o, n = Version(old).release, Version(new).release
        return n[: len(o)] == o
    return False


# -- TOML output ------------------------------------------------------------------------------

FILE_INJECTED = ("framework",)
"""Fields a framework file sets once at the top (`framework = "torch"`), never per row."""


def row_table(row: Any) -> dict[str, Any]:
    """A row as a TOML table: dataclass fields in declaration order; None, file-level fields
    and values equal to the field default left out; tuples as arrays."""
    out: dict[str, Any] = {}
    for f in fields(row):
        value = getattr(row, f.name)
        if value is None or f.name in FILE_INJECTED:
            continue
        if f.default is not MISSING and value == f.default and f.name != "confidence":
            continue
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def render_rows(table: str, rows: Sequence[Any]) -> str:
    """`[[table]]` blocks for the rows, as tomlkit writes them, one blank line apart."""
    import tomlkit

    chunks = []
    for row in rows:
        item = tomlkit.table()
        for k, v in row_table(row).items():
            item.add(k, v)
        aot = tomlkit.aot()
        aot.append(item)
        doc = tomlkit.document()
        doc.add(table, aot)
        chunks.append(tomlkit.dumps(doc).strip("\n"))
    return "\n\n".join(chunks) + "\n" if chunks else ""


def new_framework_file(framework: str) -> str:
    """The header of a `matrix/<framework>.toml` that does not exist yet."""
    return (
        f"# {framework} releases and builds (schema: matrix/README.md).\n"
        "schema_version = 1\n"
        f'framework = "{framework}"\n'
    )


def append_rows(text: str, table: str, rows: Sequence[Any]) -> str:
    """The file's text with the rows appended at the end: every existing byte is kept, so the
    change reviews as a pure addition. (TOML allows `[[release]]` entries after other tables.)"""
    if not rows:
        return text
    sep = "" if not text else ("\n" if text.endswith("\n") else "\n\n")
    return text + sep + render_rows(table, rows)


def summary_lines(plan: Plan) -> list[str]:
    """The diff summary `matrix refresh` prints (deterministic order)."""
    out = [f"new releases (appended): {len(plan.new_releases)}"]
    out += [f"  + {r.key}  python {r.python}" for r in plan.new_releases]
    out.append(f"derived builds (not written: archs unknown): {len(plan.pending_builds)}")
    out += [
        f"  * {b.key}  cuda {b.cuda} cudnn {b.cudnn} nccl {b.nccl} [{b.confidence}]"
        for b in plan.pending_builds
    ]
    out.append(f"changed facts (reported, not rewritten): {len(plan.changes)}")
    out += [f"  ~ {c}" for c in plan.changes]
    out.append(f"unchanged rows: {plan.unchanged}")
    if plan.findings:
        out.append(f"findings: {len(plan.findings)}")
        out += [f"  ? {f}" for f in plan.findings]
    if plan.skipped:
        out.append(f"skipped: {len(plan.skipped)}")
        out += [f"  - {s}" for s in plan.skipped]
    return out


def plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "new_releases": [{"key": r.key, **row_table(r)} for r in plan.new_releases],
        "pending_builds": [{"key": b.key, **row_table(b)} for b in plan.pending_builds],
        "changes": [
            {"key": c.key, "field": c.field, "old": c.old, "new": c.new, "source": c.source}
            for c in plan.changes
        ],
        "unchanged": plan.unchanged,
        "findings": list(plan.findings),
        "skipped": list(plan.skipped),
        "warnings": list(plan.warnings),
    }
