"""Matrix files (display name -> TOML text) -> `Matrix` plus problem lines (pure).

TOML is parsed with the standard library's `tomllib` where it exists (Python >= 3.11; about
20x faster than tomlkit on the shipped matrix) and with tomlkit on 3.10.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from envbuild.core.errors import MatrixError
from envbuild.matrix.checks import _DRIVER_RE, _NAME_RE, _ROW_CHECKS, check_matrix, matrix_warnings
from envbuild.matrix.rows import (
    MATRIX_SCHEMA_VERSION,
    AnyRow,
    Arch,
    CudaImage,
    CudaRelease,
    FrameworkBuild,
    FrameworkRelease,
    GpuBaseline,
    HostPlatform,
    KnownIssue,
    LibRelease,
    ListedGpu,
    Matrix,
    NgcImage,
    OsImage,
    OtherVendorGpu,
    PythonBuild,
    _major_of,
)

# --- parsing -------------------------------------------------------------------------------------

_CORE_FILES = (
    "cuda.toml",
    "gpus.toml",
    "cudnn.toml",
    "nccl.toml",
    "cuda_images.toml",
    "os_images.toml",
    "baselines.toml",
    "ngc.toml",
    "gpu_list.toml",
    "python_builds.toml",
)


@dataclass
class _Row:
    """One parsed row with where it came from (file display name, table, 1-based index)."""

    row: AnyRow
    file: str
    table: str
    index: int

    @property
    def where(self) -> str:
        return f"{self.file}: {self.table}[{self.index}] ({_label(self.row)})"


@dataclass
class _Collected:
    rows: list[_Row] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _label(row: AnyRow) -> str:
    if isinstance(row, CudaRelease):
        return f"cuda {row.version}"
    if isinstance(row, Arch):
        return row.sm
    if isinstance(row, FrameworkRelease):
        return f"{row.framework} {row.version}"
    if isinstance(row, FrameworkBuild):
        return f"{row.framework} {row.versions} {row.variant}"
    if isinstance(row, LibRelease):
        return f"{row.library} {row.version}"
    if isinstance(row, CudaImage):
        return f"nvidia/cuda {row.cuda}"
    if isinstance(row, OsImage):
        return row.os
    if isinstance(row, HostPlatform):
        return ", ".join(row.gpus)
    if isinstance(row, OtherVendorGpu):
        return row.vendor
    if isinstance(row, KnownIssue):
        return f"{row.framework} {row.versions} on {', '.join(row.archs)}"
    if isinstance(row, NgcImage):
        return row.image
    if isinstance(row, ListedGpu):
        return f"{row.name} ({row.cc})"
    if isinstance(row, PythonBuild):
        return f"python {row.python} {row.platform}"
    return row.gpu


def parse_toml(text: str, *, name: str) -> dict[str, Any]:
    """TOML text -> plain Python data; MatrixError (exit 2) naming the file when invalid or
    nested too deep (`envbuild.core.documents`)."""
    from envbuild.core.documents import DocumentError, toml_loads

    try:
        return toml_loads(text)
    except DocumentError as exc:
        raise _toml_error(name, exc) from None


def _toml_error(name: str, exc: Exception) -> MatrixError:
    return MatrixError(
        f"{name}: not valid TOML: {exc}",
        hint=f"fix the TOML syntax of {name} (a truncated file or a stray character)",
        fields={"file": name},
    )


def parse_matrix(files: Mapping[str, str]) -> Matrix:
    """Parse and cross-check matrix files (display name -> TOML text). Pure and strict: any
    problem raises MatrixError whose message names file and row; all problems are in
    `fields["problems"]`."""
    matrix, problems, _ = collect(files, warnings=False)
    if problems:
        raise _problems_error(problems)
    return matrix


def collect(
    files: Mapping[str, str],
    overlay: Mapping[str, str] | None = None,
    *,
    warnings: bool = True,
) -> tuple[Matrix, list[str], list[str]]:
    """Parse built-in files and an optional overlay, merge, cross-check; never raises for a
    problem inside a row. Returns (matrix of the rows that parsed, problems, warnings).
    Raises MatrixError only for a file that is not TOML at all."""
    base = _collect_files(files)
    problems = list(base.problems)
    rows = _merge_unique(base.rows, problems)
    if overlay:
        extra = _collect_files(overlay)
        problems.extend(extra.problems)
        overlay_rows = _merge_unique(extra.rows, problems)
        by_key = {r.row.key: i for i, r in enumerate(rows)}
        for r in overlay_rows:
            # Same key replaces the built-in row in place; a new key adds a row.
            if r.row.key in by_key:
                rows[by_key[r.row.key]] = r
            else:
                rows.append(r)
    matrix = _build(rows)
    problems.extend(check_matrix(matrix))
    return matrix, problems, matrix_warnings(matrix) if warnings else []


def _problems_error(problems: Sequence[str]) -> MatrixError:
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    first = problems[0]
    if len(first) > 300:  # a huge value is named by its start, not echoed (tests/reliability)
        first = f"{first[:240]}... ({len(first)} characters)"
    return MatrixError(
        f"the compatibility matrix has problems: {first}{more}",
        hint="run `envbuild matrix check` for the full list and fix those rows",
        fields={"problems": list(problems)},
    )


def _merge_unique(rows: Iterable[_Row], problems: list[str]) -> list[_Row]:
    seen: dict[str, _Row] = {}
    out: list[_Row] = []
    for r in rows:
        first = seen.get(r.row.key)
        if first is not None:
            problems.append(f"{r.where}: duplicate key {r.row.key!r}, first at {first.where}")
            continue
        seen[r.row.key] = r
        out.append(r)
    return out


def _build(rows: Sequence[_Row]) -> Matrix:
    groups: dict[type, list[Any]] = {t: [] for t in _ROW_TYPES}
    origins: dict[str, str] = {}
    for r in rows:
        groups[type(r.row)].append(r.row)
        origins[r.row.key] = r.where
    return Matrix(
        cuda=tuple(groups[CudaRelease]),
        archs=tuple(groups[Arch]),
        releases=tuple(groups[FrameworkRelease]),
        builds=tuple(groups[FrameworkBuild]),
        libs=tuple(groups[LibRelease]),
        cuda_images=tuple(groups[CudaImage]),
        os_images=tuple(groups[OsImage]),
        baselines=tuple(groups[GpuBaseline]),
        host_platforms=tuple(groups[HostPlatform]),
        other_vendors=tuple(groups[OtherVendorGpu]),
        issues=tuple(groups[KnownIssue]),
        ngc_images=tuple(groups[NgcImage]),
        listed_gpus=tuple(groups[ListedGpu]),
        python_builds=tuple(groups[PythonBuild]),
        schema_version=MATRIX_SCHEMA_VERSION,
        origins=origins,
    )


_ROW_TYPES: tuple[type, ...] = (
    CudaRelease,
    Arch,
    FrameworkRelease,
    FrameworkBuild,
    LibRelease,
    CudaImage,
    OsImage,
    GpuBaseline,
    HostPlatform,
    OtherVendorGpu,
    KnownIssue,
    NgcImage,
    ListedGpu,
    PythonBuild,
)


_GPUS_TABLES: dict[str, tuple[type, dict[str, Any]]] = {
    "arch": (Arch, {}),
    "host_platform": (HostPlatform, {}),
    "not_nvidia": (OtherVendorGpu, {}),
}


# Files of one table, a plain row type each.
_ONE_TABLE_FILES: dict[str, tuple[str, type]] = {
    "os_images.toml": ("os", OsImage),
    "baselines.toml": ("baseline", GpuBaseline),
    "ngc.toml": ("image", NgcImage),
    "gpu_list.toml": ("gpu", ListedGpu),
    "python_builds.toml": ("build", PythonBuild),
}


def _collect_files(files: Mapping[str, str]) -> _Collected:
    out = _Collected()
    for name in sorted(files):
        data = parse_toml(files[name], name=name)
        _collect_file(name, data, out)
    return out


def _collect_file(name: str, data: dict[str, Any], out: _Collected) -> None:
    base = PurePosixPath(name).name
    problems = out.problems
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        problems.append(f"{name}: schema_version must be an integer (this envbuild reads 1)")
    elif version > MATRIX_SCHEMA_VERSION:
        problems.append(
            f"{name}: schema_version {version} is newer than this envbuild reads "
            f"({MATRIX_SCHEMA_VERSION}); upgrade envbuild"
        )
    elif version < 1:
        problems.append(f"{name}: schema_version must be >= 1")

    # table name -> (row builder, extra fields injected from the file)
    tables: dict[str, tuple[type, dict[str, Any]]]
    allowed_top = {"schema_version"}
    if base == "cuda.toml":
        tables = {"cuda": (CudaRelease, {})}
        allowed_top |= {"minor_compat"}
    elif base == "gpus.toml":
        tables = dict(_GPUS_TABLES)
    elif base in ("cudnn.toml", "nccl.toml"):
        tables = {"release": (LibRelease, {"library": base.removesuffix(".toml")})}
    elif base == "cuda_images.toml":
        tables = {"image": (CudaImage, {})}
        allowed_top |= {"scheme"}
    elif base in _ONE_TABLE_FILES:
        table_name, row_type = _ONE_TABLE_FILES[base]
        tables = {table_name: (row_type, {})}
    elif "framework" in data:
        fw = data["framework"]
        allowed_top |= {"framework"}
        if not isinstance(fw, str) or not _NAME_RE.match(fw):
            problems.append(f"{name}: framework must be a lower-case name like 'torch'")
            return
        if base != f"{fw}.toml":
            problems.append(f"{name}: a framework file must be named {fw}.toml")
        tables = {
            "release": (FrameworkRelease, {"framework": fw}),
            "build": (FrameworkBuild, {"framework": fw}),
            "known_issue": (KnownIssue, {"framework": fw}),
        }
    else:
        known = ", ".join(_CORE_FILES)
        problems.append(
            f"{name}: unknown matrix file (expected one of {known}, or <framework>.toml "
            "with a top-level framework key)"
        )
        return

    for key in sorted(data):
        if key not in allowed_top and key not in tables:
            problems.append(f"{name}: unknown top-level key {key!r}")

    minor_compat: dict[int, str] = {}
    if base == "cuda.toml":
        minor_compat = _minor_compat_table(name, data.get("minor_compat", []), problems)
    if base == "cuda_images.toml":
        _check_scheme(name, data.get("scheme"), problems)

    for table, (cls, injected) in tables.items():
        raw_rows = data.get(table, [])
        if not isinstance(raw_rows, list) or not all(isinstance(r, dict) for r in raw_rows):
            problems.append(f"{name}: {table} must be an array of tables ([[{table}]])")
            continue
        for i, raw in enumerate(raw_rows, start=1):
            raw = dict(raw)
            if cls is CudaRelease and "minor_compat_driver" not in raw:
                major = _major_of(raw.get("version"))
                if major is not None and major in minor_compat:
                    raw["minor_compat_driver"] = minor_compat[major]
            where = f"{name}: {table}[{i}] ({_raw_label(cls, raw, injected)})"
            row = _make_row(cls, raw, injected, where, problems)
            if row is not None:
                out.rows.append(_Row(row, name, table, i))


def _raw_label(cls: type, raw: dict[str, Any], injected: dict[str, Any]) -> str:
    def g(k: str) -> str:
        v = raw.get(k, injected.get(k, "?"))
        return str(v)

    if cls is CudaRelease:
        return f"cuda {g('version')}"
    if cls is Arch:
        return g("sm")
    if cls is FrameworkRelease:
        return f"{g('framework')} {g('version')}"
    if cls is FrameworkBuild:
        return f"{g('framework')} {g('versions')} {g('variant')}"
    if cls is LibRelease:
        return f"{g('library')} {g('version')}"
    if cls is CudaImage:
        return f"nvidia/cuda {g('cuda')}"
    if cls is OsImage:
        return g("os")
    if cls is HostPlatform:
        return g("gpus")
    if cls is OtherVendorGpu:
        return g("vendor")
    if cls is KnownIssue:
        return f"{g('framework')} {g('versions')}"
    if cls is NgcImage:
        return g("image")
    if cls is PythonBuild:
        return f"python {g('python')} {g('platform')}"
    return g("gpu")


def _minor_compat_table(name: str, raw: object, problems: list[str]) -> dict[int, str]:
    out: dict[int, str] = {}
    if not isinstance(raw, list):
        problems.append(f"{name}: minor_compat must be an array of tables ([[minor_compat]])")
        return out
    allowed = {"major", "driver", "source", "confidence", "note"}
    for i, row in enumerate(raw, start=1):
        where = f"{name}: minor_compat[{i}]"
        if not isinstance(row, dict):
            problems.append(f"{where}: must be a table")
            continue
        for k in sorted(set(row) - allowed):
            problems.append(f"{where}: unknown key {k!r}")
        major, driver, source = row.get("major"), row.get("driver"), row.get("source")
        if not isinstance(major, int) or isinstance(major, bool):
            problems.append(f"{where}: major must be an integer")
            continue
        if not isinstance(driver, str) or not _DRIVER_RE.match(driver):
            problems.append(f"{where}: driver must be a driver version string like '525.60.13'")
            continue
        if not isinstance(source, str) or not source.strip():
            problems.append(f"{where}: source is missing")
        if major in out:
            problems.append(f"{where}: duplicate major {major}")
        out[major] = driver
    return out


def _check_scheme(name: str, raw: object, problems: list[str]) -> None:
    if raw is None:
        problems.append(f"{name}: the [scheme] table (tag format and its source) is missing")
        return
    if not isinstance(raw, dict):
        problems.append(f"{name}: scheme must be a table")
        return
    allowed = {"tag_format", "cudnn_flavour", "source", "confidence", "note"}
    for k in sorted(set(raw) - allowed):
        problems.append(f"{name}: scheme: unknown key {k!r}")
    # CudaImage.ref() implements exactly this format; a data change must come with a code change.
    if raw.get("tag_format") != "{cuda}-{flavour}-{os}":
        problems.append(f"{name}: scheme: tag_format must be '{{cuda}}-{{flavour}}-{{os}}'")
    if raw.get("cudnn_flavour") != "{cudnn_tag}-runtime":
        problems.append(f"{name}: scheme: cudnn_flavour must be '{{cudnn_tag}}-runtime'")
    if not isinstance(raw.get("source"), str) or not raw["source"].strip():
        problems.append(f"{name}: scheme: source is missing")


def _make_row(
    cls: type, raw: dict[str, Any], injected: dict[str, Any], where: str, problems: list[str]
) -> AnyRow | None:
    """Build one row: unknown keys, missing keys, wrong types, then per-field value checks.
    A row with a missing or mistyped field is dropped; a row whose only fault is an unknown key
    is kept (one typo should not also dangle every reference to the row)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for k in sorted(raw):
        if k in injected:
            problems.append(f"{where}: {k!r} is set by the file, not per row")
        elif k not in fields:
            problems.append(f"{where}: unknown key {k!r}")
    unusable = False
    values: dict[str, Any] = dict(injected)
    for fname, f in fields.items():
        if fname in injected:
            continue
        if fname not in raw:
            has_default = (
                f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            )
            optional = "None" in str(f.type)
            if not has_default and not optional:
                problems.append(f"{where}: {fname} is missing")
                unusable = True
            elif not has_default:
                values[fname] = None
            continue
        ok, value = _coerce(str(f.type), raw[fname])
        if not ok:
            problems.append(f"{where}: {fname} must be {_type_words(str(f.type))}")
            unusable = True
            continue
        values[fname] = value
    if unusable:
        return None
    row: AnyRow = cls(**values)
    before = len(problems)
    for msg in _ROW_CHECKS[cls](row):
        problems.append(f"{where}: {msg}")
    return None if len(problems) > before else row


def _coerce(type_text: str, value: Any) -> tuple[bool, Any]:
    """Check a TOML value against a dataclass field's annotation (as text, from annotations)."""
    t = type_text.replace(" ", "")
    if t == "str" or t == "str|None":
        return isinstance(value, str), value
    if t == "bool":
        return isinstance(value, bool), value
    if t in ("int", "int|None"):
        return isinstance(value, int) and not isinstance(value, bool), value
    if t in ("float", "float|None"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if t == "tuple[str,...]":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return ok, tuple(value) if ok else value
    if t == "tuple[tuple[str,float],...]":
        ok = isinstance(value, dict) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()
        )
        return ok, tuple((k, float(v)) for k, v in value.items()) if ok else value
    return False, value  # pragma: no cover - a new field type needs a case here


def _type_words(type_text: str) -> str:
    t = type_text.replace(" ", "")
    return {
        "str": "a string",
        "str|None": "a string",
        "bool": "true or false",
        "int": "an integer",
        "float": "a number",
        "float|None": "a number",
        "tuple[str,...]": "an array of strings",
        "tuple[tuple[str,float],...]": 'a table of GPU name = GiB, e.g. { "H100" = 80 }',
    }.get(t, t)


@dataclass(frozen=True)
class MatrixReport:
    """What `envbuild matrix check` found: row counts, problems (fatal), warnings (gaps)."""

    counts: dict[str, int]
    problems: tuple[str, ...]
    warnings: tuple[str, ...]
    files: tuple[str, ...]
    overlay_files: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line: "matrix ok: 51 cuda, 24 archs, ... (10 files)"."""
        counts = ", ".join(f"{n} {k}" for k, n in self.counts.items())
        files = f"{len(self.files)} files"
        if self.overlay_files:
            files += f" + {len(self.overlay_files)} overlay files"
        state = "ok" if self.ok else f"{len(self.problems)} problems"
        return f"matrix {state}: {counts} ({files})"

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "counts": dict(self.counts),
            "problems": list(self.problems),
            "warnings": list(self.warnings),
            "files": list(self.files),
            "overlay_files": list(self.overlay_files),
        }


def check_files(files: Mapping[str, str], overlay: Mapping[str, str] | None = None) -> MatrixReport:
    """Everything `matrix check` reports about these files (pure). MatrixError only for a file
    that is not TOML at all."""
    matrix, problems, warnings = collect(files, overlay or None)
    return MatrixReport(
        counts=matrix.counts(),
        problems=tuple(problems),
        warnings=tuple(warnings),
        files=tuple(sorted(files)),
        overlay_files=tuple(sorted(overlay or {})),
    )
