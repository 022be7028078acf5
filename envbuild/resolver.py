"""The pure resolver: request + matrix + hosts -> the stack that runs, or why nothing does.

No I/O: everything comes in through the arguments (the shape of sarugaku/resolvelib, whose
failures carry their causes). Deterministic: the same inputs give the same answer and the same
explanation, byte for byte.

Candidates and preference (first fit wins)
------------------------------------------
A candidate is (framework release, framework build = CUDA/CPU variant, OS). They are tried in
this order:

1. newest framework release first (within the requirement's specifier; yanked releases only
   when pinned with ``==``);
2. within a release, the build with the newest CUDA that fits; when two builds have the same
   CUDA, the PyPI-default variant first (it installs from PyPI without an extra index, which is
   also what most users test against), then the variant name;
3. then the OS: the one asked for (or the ones that ship the Python asked for); for GPU stacks
   whose flavour is auto or an nvidia/cuda flavour, OSes that have that ``nvidia/cuda`` image
   for the build's CUDA first; then the matrix default, then the newest OS Python, the name.

Rules (sources: ../shared/reference/compat-facts.md, DESIGN.md "Decisions already measured")
--------------------------------------------------------------------------------------------
- Kernel coverage (CUDA C++ Programming Guide, "Binary Compatibility" and "PTX Compatibility";
  ptxas 13.x help text, compat-facts.md section 2): a cubin ``sm_XY`` runs on a GPU of the same
  major and minor >= Y (sm_80 runs on 8.6 and 8.9; sm_90 does not run on 10.0 or 12.0); an
  arch-specific cubin/PTX ``sm_XYa`` runs only on exactly X.Y; a family cubin ``sm_XYf`` on the
  same major with minor >= Y; PTX ``compute_XY`` is JIT-compiled by the driver for any GPU with
  compute capability >= X.Y. Tegra (Jetson) GPUs have no cubin compatibility across minors,
  nor with desktop cubins (same guide); a renamed arch (Thor sm_101 -> sm_110 in CUDA 13.0) is
  reached by builds for either name. The rule itself is envbuild/archs.py, shared with
  `envbuild validate`.
- Driver floors (CUDA release notes, Table 3 "Toolkit Driver Version"; CUDA Compatibility guide,
  "Minor Version Compatibility"): every CUDA release has the toolkit's own floor and, from CUDA 11
  on, the minor-version-compatibility (MVC) floor of its major (11.x >= 450.80.02, 12.x >=
  525.60.13, 13.x >= 580). Policy ``minor`` (default) accepts the MVC floor and records it
  (``Floors.relied_on``); policy ``strict`` needs the toolkit floor.
- MVC does not cover JIT of PTX newer than the driver (same guide): a target GPU that a build
  reaches only through PTX needs the toolkit floor of the build's CUDA.
- A GPU needs a driver that knows it: support for a new architecture arrives with the driver
  branch of the first CUDA release that can target it (e.g. Blackwell sm_120 with CUDA 12.8 and
  R570; H100 with R520, NVIDIA AI Enterprise 2.3 release notes: "Support for the NVIDIA H100
  GPU", driver 520.61.05). Inferred from Table 3 plus the arch rows' ``first_cuda``; compared
  by branch number only. When every target GPU needs a newer branch than the oldest driver it
  is a hard limit; otherwise (a mixed fleet whose oldest driver may sit on hosts with older
  GPUs) it is a note.
- cuDNN releases with a minimum compute capability exclude builds for older GPUs (cuDNN support
  matrices; e.g. cuDNN 9.17 is 7.5..12.0 only).
- Python: the framework release's and the build's Python ranges (wheel tags on PyPI); the image's
  Python is the one its OS ships (os_images rows), so a Python no OS ships is not available.
- Base image (CONTRACTS.md): ``auto`` = ``nvidia/cuda:<cuda>-base-<os>`` for pip-wheel stacks,
  else the plain OS image (CUDA then comes from the wheels); runtime/cudnn/devel only when asked
  (they duplicate the wheels' libraries, about 2.3 GB, DESIGN.md); a ``devel`` builder image when
  the request compiles CUDA extensions. ``NVIDIA_REQUIRE_CUDA`` asks for the CUDA version the
  relied-on floor driver supports (an MVC image must not demand more than it needs), plus the
  published ``brand=`` forward-compatibility clauses of the nvidia/cuda image it starts from.

Explanations
------------
``Unsatisfiable.reasons``: request-wide causes first (a driver that cannot run the GPUs, a
Python no OS ships), then per release, newest first, what excluded each build (kernels, driver
floors, CUDA range, Python, images); a GPU that no build of a release reaches is said once, with
where the framework first/last has it. Releases with the same reasons are merged.
``alternatives``: each way out is checked by resolving the changed request: the nearest other
framework version, the lowest driver that would work (and what the newest release needs),
dropping ``--strict-compat``, dropping one GPU from the image, dropping --python/--os/--cuda/
--flavour/the variant extra. ``Stack.notes``: what the stack relies on and why nothing newer.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from envbuild.archs import ArchRules, cc_tuple, coverage, sort_archs
from envbuild.errors import UserError
from envbuild.matrix import (
    Arch,
    CudaImage,
    CudaRelease,
    FrameworkBuild,
    FrameworkRelease,
    LibRelease,
    Matrix,
    OsImage,
)
from envbuild.models import (
    FLAVOURS,
    BaseImage,
    Floors,
    FrameworkPick,
    Host,
    Request,
    Stack,
    Unsatisfiable,
)
from envbuild.versions import parse_specifier, parse_version

__all__ = ["parse_gpu", "resolve", "result_to_json", "result_to_text", "sort_archs"]

CUDA_FLAVOURS = ("base", "runtime", "cudnn", "devel")
MAX_REASON_LINES = 14
"""Per-release reasons beyond this are summarised in one line (newest releases come first)."""

# --- small cached parsers (resolving runs thousands of comparisons) -------------------------


@lru_cache(maxsize=4096)
def _v(text: str) -> Version:
    return Version(text)


@lru_cache(maxsize=1024)
def _spec(text: str) -> SpecifierSet:
    return SpecifierSet(text)


@lru_cache(maxsize=16384)
def _in(version: str, spec: str) -> bool:
    return _spec(spec).contains(_v(version), prereleases=True)


@lru_cache(maxsize=4096)
def _mm(version: str) -> tuple[int, int]:
    rel = _v(version).release
    return (rel[0], rel[1] if len(rel) > 1 else 0)


def _branch(driver: str) -> int:
    return _v(driver).release[0]


# Kernel coverage (cc_tuple, parse_arch, covers, coverage) lives in envbuild/archs.py, shared
# with `envbuild validate` and `envbuild doctor`.


# --- targets ---------------------------------------------------------------------------------

_VENDOR_WORDS = {"nvidia", "geforce", "tesla"}
_SM_RE = re.compile(r"^(?:sm|compute)_(\d+)[af]?$", re.IGNORECASE)
_CC_RE = re.compile(r"^\d{1,2}\.\d$")


def _tokens(name: str) -> tuple[str, ...]:
    words = [w for w in re.split(r"[\s\-_/]+", name.lower()) if w]
    while words and words[0] in _VENDOR_WORDS:
        words.pop(0)
    return tuple(words)


def parse_gpu(matrix: Matrix, text: str) -> Arch:
    """A GPU as users write it: a name ("H100", "RTX 5090", "NVIDIA H100 80GB HBM3"),
    "sm_90" or a compute capability "9.0". Unknown -> UserError (exit 2)."""
    raw = text.strip()
    by_cc = {a.cc: a for a in matrix.archs}
    m = _SM_RE.match(raw)
    if m:
        digits = m.group(1)
        cc = f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 2 else ""
        if cc in by_cc:
            return by_cc[cc]
        raise UserError(
            f"unknown GPU architecture {text!r}: the matrix has no compute capability {cc or '?'}",
            hint="use an sm_XX the matrix knows (" + ", ".join(a.sm for a in matrix.archs) + ")",
        )
    if _CC_RE.match(raw):
        if raw in by_cc:
            return by_cc[raw]
        raise UserError(
            f"unknown compute capability {text!r}",
            hint="known: " + ", ".join(a.cc for a in matrix.archs),
        )
    want = _tokens(raw)
    if want:
        joined = "".join(want)
        exact = sorted(
            {a.cc for a in matrix.archs for g in a.gpus if "".join(_tokens(g)) == joined}
        )
        if len(exact) == 1:
            return by_cc[exact[0]]
        # NVML names carry form factor and memory ("H100 80GB HBM3", "A100-SXM4-80GB"): the
        # longest matrix name that is a leading run of the words wins.
        best_len = 0
        best: set[str] = set()
        for a in matrix.archs:
            for g in a.gpus:
                t = _tokens(g)
                if t and want[: len(t)] == t:
                    if len(t) > best_len:
                        best_len, best = len(t), {a.cc}
                    elif len(t) == best_len:
                        best.add(a.cc)
        if len(exact) > 1 or len(best) > 1:
            ccs = exact if len(exact) > 1 else sorted(best)
            raise UserError(
                f"GPU name {text!r} is ambiguous (compute capability {' or '.join(ccs)})",
                hint="give the compute capability instead, for example --gpu " + ccs[0],
            )
        if len(best) == 1:
            return by_cc[next(iter(best))]
    close = _gpu_suggestions(matrix, raw)
    raise UserError(
        f"unknown GPU {text!r}",
        hint=(
            "did you mean " + " or ".join(repr(c) for c in close) + "? Otherwise g"
            if close
            else "G"
        )
        + "ive a name from matrix/gpus.toml, its compute capability (for example 8.9) or "
        "sm_XX (sm_89)",
        fields={"suggestions": close} if close else {},
    )


def _gpu_suggestions(matrix: Matrix, raw: str) -> list[str]:
    """Names to offer for an unknown GPU (never picked for the user: "4090" or "A6000" may be
    what they meant, or not). A missing underscore ("sm90") gets its sm_XX."""
    key = "".join(_tokens(raw))
    if not key:
        return []
    m = re.fullmatch(r"(?:sm|compute)(\d+)[af]?", key)
    by_key: dict[str, str] = {}
    for a in matrix.archs:
        if m and a.sm == f"sm_{m.group(1)}":
            return [a.sm]
        for g in a.gpus:
            by_key.setdefault("".join(_tokens(g)), g)
    inside = sorted(name for k, name in by_key.items() if key in k)
    if inside:
        return inside[:5]
    return [by_key[k] for k in difflib.get_close_matches(key, sorted(by_key), n=3, cutoff=0.6)]


@dataclass(frozen=True)
class _Target:
    arch: Arch
    labels: tuple[str, ...]
    """What the user or the hosts called the GPUs of this architecture."""
    rules: ArchRules = field(default_factory=ArchRules)
    """The matrix's Tegra capabilities and arch renames (Thor: sm_101 -> sm_110 in CUDA 13.0,
    nvCOMPDx/cuRANDDx release notes): envbuild/archs.py."""

    @property
    def cc(self) -> tuple[int, int]:
        return cc_tuple(self.arch.cc)

    def coverage(self, archs: Sequence[str]) -> tuple[str | None, str | None]:
        return coverage(archs, self.cc, self.rules)

    @property
    def label(self) -> str:
        names = [n for n in self.labels if n != self.arch.sm]
        return f"{' / '.join(names)} ({self.arch.sm})" if names else self.arch.sm


# --- the resolution context ------------------------------------------------------------------


@dataclass(frozen=True)
class _Ctx:
    request: Request
    matrix: Matrix
    framework: str
    spec: str
    """The requirement's specifier text ("" = any release)."""
    variants: tuple[str, ...]
    """Variant filter from the requirement's extras (jax[cuda13]); () = any."""
    targets: tuple[_Target, ...]
    driver: str | None
    device: str
    flavour: str
    python: str | None
    os: str | None
    cuda_spec: str | None
    policy: str
    pre_notes: tuple[str, ...] = ()
    memo: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """Per-resolve memo of answers that do not depend on the fields alternatives change."""


# PEP 508 name, optional [extras], optional version specifier; no URL, no marker. Parsed here
# rather than with packaging.requirements, whose import (markers, tags) alone costs ~25 ms.
_REQ_RE = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"(?:\[(?P<extras>[^\]]*)\])?\s*(?P<spec>[^;@]*?)\s*$"
)


def _parse_requirement(text: str) -> tuple[str, tuple[str, ...], str]:
    """ "jax[cuda13]>=0.7" -> ("jax", ("cuda13",), ">=0.7"); UserError when malformed."""
    m = _REQ_RE.match(text)
    bad = UserError(
        f"framework requirement {text!r} is not valid",
        hint="write it like torch, torch==2.6.*, torch>=2.7, tensorflow==2.15.*, jax[cuda13] "
        "(no URL, no environment marker)",
    )
    if not m:
        raise bad
    name = re.sub(r"[-_.]+", "-", m.group("name")).lower()  # PEP 503 normalisation
    extras = tuple(sorted(e.strip().lower() for e in (m.group("extras") or "").split(",") if e))
    spec = m.group("spec")
    try:
        spec = str(SpecifierSet(spec))
    except (InvalidSpecifier, ValueError):
        raise bad from None
    return name, extras, spec


def _framework_names(matrix: Matrix) -> list[str]:
    return sorted({r.framework for r in matrix.releases})


def _prepare(request: Request, matrix: Matrix, hosts: Sequence[Host]) -> _Ctx:
    """Validate the request against the matrix; UserError (exit 2) for bad input."""
    text = request.framework.strip() or "torch"
    name, extras, spec = _parse_requirement(text)
    known = _framework_names(matrix)
    if name not in known:
        raise UserError(
            f"unknown framework {text.split('[')[0].strip()!r}",
            hint="the matrix knows: "
            + ", ".join(known)
            # PyTorch's package is `torch`; `pytorch` on PyPI is a placeholder that fails.
            + (" (PyTorch is `torch`: --framework torch)" if "pytorch" in name else ""),
        )
    variants: tuple[str, ...] = ()
    if extras:
        all_variants = {b.variant for b in matrix.builds if b.framework == name}
        bad = sorted(set(extras) - all_variants)
        if bad:
            raise UserError(
                f"{name} has no variant {', '.join(bad)}",
                hint=f"{name} variants: " + ", ".join(sorted(all_variants)),
            )
        variants = extras

    flavour = request.flavour or "auto"
    if flavour not in FLAVOURS:
        raise UserError(
            f"unknown flavour {flavour!r}", hint="choose one of: " + ", ".join(FLAVOURS)
        )
    device = "cpu" if (request.device == "cpu" or flavour == "cpu") else "cuda"
    notes: list[str] = []
    if device == "cpu":
        if flavour in CUDA_FLAVOURS:
            raise UserError(
                f"flavour {flavour!r} is an nvidia/cuda image; a CPU stack uses a plain OS image",
                hint="drop --flavour (or use --flavour cpu) for a CPU image",
            )
        flavour = "cpu"

    python = request.python.strip() if request.python else None
    if python is not None and not re.fullmatch(r"\d+\.\d+", python):
        raise UserError(
            f"Python {request.python!r} is not a version like 3.12",
            hint="give major.minor, for example --python 3.12",
        )
    os_names = sorted(o.os for o in matrix.os_images)
    os_name = request.os.strip() if request.os else None
    if os_name is not None:
        osimg = next((o for o in matrix.os_images if o.os == os_name), None)
        if osimg is None:
            raise UserError(f"unknown OS {os_name!r}", hint="choose one of: " + ", ".join(os_names))
        if python is not None and osimg.python != python:
            shipping = [o.os for o in matrix.os_images if o.python == python]
            way_out = (
                f"use --os {shipping[0]} (ships Python {python})"
                if shipping
                else f"no OS in the matrix ships Python {python}"
            )
            raise UserError(
                f"{os_name} ships Python {osimg.python}, not {python}",
                hint=f"{way_out}, or drop --python to use {osimg.python}",
            )

    cuda_spec = request.cuda.strip() if request.cuda else None
    if cuda_spec:
        parse_specifier(cuda_spec, what="CUDA version range")
        if device == "cpu":
            raise UserError(
                "a CUDA version range does not apply to a CPU stack",
                hint="drop --cuda, or drop --cpu for a GPU stack",
            )
    if request.compat not in ("minor", "strict"):
        raise UserError(
            f"unknown compatibility policy {request.compat!r}", hint="use minor or strict"
        )

    # Targets: GPUs the user named plus every host's GPUs; driver = the oldest of all.
    labels: dict[str, list[str]] = {}
    archs: dict[str, Arch] = {}
    for text_gpu in request.targets.gpus:
        arch = parse_gpu(matrix, text_gpu)
        archs[arch.cc] = arch
        labels.setdefault(arch.cc, [])
        if text_gpu.strip() not in labels[arch.cc]:
            labels[arch.cc].append(text_gpu.strip())
    drivers: list[str] = []
    if request.targets.driver:
        parse_version(request.targets.driver, what="driver version")
        drivers.append(request.targets.driver.strip())
    by_cc = {a.cc: a for a in matrix.archs}
    for host in hosts:
        if host.driver:
            parse_version(host.driver, what="driver version")
            drivers.append(host.driver.strip())
        for gpu in host.gpus:
            host_arch = by_cc.get(gpu.cc) or by_cc.get(
                f"{cc_tuple(gpu.cc)[0]}.{cc_tuple(gpu.cc)[1]}"
            )
            if host_arch is None:
                raise UserError(
                    f"{gpu.name} has compute capability {gpu.cc}, which the matrix does not know",
                    hint="update envbuild, or add the architecture in a matrix overlay "
                    "(ENVBUILD_MATRIX_OVERLAY)",
                )
            archs[host_arch.cc] = host_arch
            labels.setdefault(host_arch.cc, [])
            if gpu.name and gpu.name not in labels[host_arch.cc]:
                labels[host_arch.cc].append(gpu.name)
    rules = ArchRules.from_archs(matrix.archs)
    targets = tuple(
        _Target(arch=archs[cc], labels=tuple(labels[cc]), rules=rules)
        for cc in sorted(archs, key=lambda c: cc_tuple(c))
    )
    driver = min(drivers, key=_v) if drivers else None
    if device == "cpu":
        if targets or driver:
            notes.append("CPU stack: the target GPUs and driver are not used")
        targets, driver = (), None

    return _Ctx(
        request=request,
        matrix=matrix,
        framework=name,
        spec=spec,
        variants=variants,
        targets=targets,
        driver=driver,
        device=device,
        flavour=flavour,
        python=python,
        os=os_name,
        cuda_spec=cuda_spec,
        policy=request.compat,
        pre_notes=tuple(notes),
    )


# --- matrix lookups --------------------------------------------------------------------------


def _cuda_row(matrix: Matrix, version: str) -> CudaRelease | None:
    """The CUDA row of a build: exact, else the newest row of the same major.minor.

    Framework tables often name only "12.8" when the update is unknown; the newest update's
    floor is the conservative one (the same rule as `Matrix.cuda_release`).
    """
    for r in matrix.cuda:
        if r.version == version:
            return r
    same = [r for r in matrix.cuda if _mm(r.version) == _mm(version)]
    return max(same, key=lambda r: _v(r.version)) if same else None


def _first_cuda_floor(matrix: Matrix, arch: Arch) -> CudaRelease | None:
    """The earliest CUDA release of the arch's first_cuda major.minor (its driver branch)."""
    if not arch.first_cuda:
        return None
    same = [r for r in matrix.cuda if _mm(r.version) == _mm(arch.first_cuda)]
    return min(same, key=lambda r: (_v(r.toolkit_driver), _v(r.version))) if same else None


def _lib_row(matrix: Matrix, library: str, version: str | None) -> LibRelease | None:
    if not version:
        return None
    best: LibRelease | None = None
    for r in matrix.libs:
        if r.library != library:
            continue
        if r.version == version:
            return r
        if version.startswith(r.version + ".") and (
            best is None or len(r.version) > len(best.version)
        ):
            best = r
    return best


def _cuda_image(matrix: Matrix, cuda: str, os: str, flavour: str) -> CudaImage | None:
    """The newest nvidia/cuda image of the build's CUDA major.minor with this OS and flavour
    (older patch tags are deleted once a newer one exists: compat-facts.md section 7)."""
    rows = [i for i in matrix.cuda_images if _mm(i.cuda) == _mm(cuda) and i.has(flavour, os)]
    return max(rows, key=lambda i: _v(i.cuda)) if rows else None


# --- evaluation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fit:
    release: FrameworkRelease
    build: FrameworkBuild
    osimg: OsImage
    floors: Floors | None
    cuda_row: CudaRelease | None
    ptx_only: tuple[tuple[_Target, str], ...]
    image: CudaImage | None
    flavour: str
    builder: CudaImage | None
    notes: tuple[str, ...]
    rows: tuple[str, ...]

    @property
    def needed_driver(self) -> str | None:
        return self.floors.effective if self.floors else None


@dataclass
class _Outcome:
    fits: list[_Fit] = field(default_factory=list)
    misses: dict[str, list[str]] = field(default_factory=dict)
    """release version -> reason lines ("{R}" stands for the release's name)."""
    global_reasons: list[str] = field(default_factory=list)
    releases: list[FrameworkRelease] = field(default_factory=list)


def _series(build: FrameworkBuild, release: FrameworkRelease) -> str:
    m = re.fullmatch(r"==(\d+\.\d+)\.\*", build.versions.strip())
    return m.group(1) if m else release.version


def _arch_summary(archs: Sequence[str]) -> str:
    return " ".join(sort_archs(archs)) if archs else "no GPU code"


def _releases(ctx: _Ctx) -> list[FrameworkRelease]:
    out = []
    pinned = ctx.spec.startswith("==") and "," not in ctx.spec and "*" not in ctx.spec
    for r in ctx.matrix.releases:
        if r.framework != ctx.framework:
            continue
        if ctx.spec and not _in(r.version, ctx.spec):
            continue
        if r.yanked and not pinned:
            continue
        out.append(r)
    return sorted(out, key=lambda r: _v(r.version), reverse=True)


def _builds(ctx: _Ctx, release: FrameworkRelease) -> list[FrameworkBuild]:
    out = []
    for b in ctx.matrix.builds:
        if b.framework != ctx.framework or not _in(release.version, b.versions):
            continue
        if (b.cuda is None) != (ctx.device == "cpu"):
            continue
        if ctx.variants and b.variant not in ctx.variants:
            continue
        if ctx.request.platform not in b.platforms:
            continue
        out.append(b)

    def key(b: FrameworkBuild) -> tuple[Any, ...]:
        cuda = _v(b.cuda) if b.cuda else _v("0")
        return (-cuda.major, -cuda.minor, -cuda.micro, not b.pypi_default, b.variant)

    return sorted(out, key=key)


def _os_order(ctx: _Ctx, build: FrameworkBuild) -> list[OsImage]:
    rows = list(ctx.matrix.os_images)
    if ctx.os:
        return [o for o in rows if o.os == ctx.os]
    if ctx.python:
        rows = [o for o in rows if o.python == ctx.python]

    def key(o: OsImage) -> tuple[Any, ...]:
        has_cuda_image = bool(
            build.cuda
            and ctx.flavour in ("auto", *CUDA_FLAVOURS)
            and _cuda_image(
                ctx.matrix, build.cuda, o.os, "base" if ctx.flavour == "auto" else ctx.flavour
            )
        )
        # auto means an nvidia/cuda base (CONTRACTS.md): an OS that has one for this CUDA
        # comes before the default OS without one.
        return (not has_cuda_image, not o.default, -_mm(o.python)[0], -_mm(o.python)[1], o.os)

    return sorted(rows, key=key)


def _check_build(
    ctx: _Ctx, release: FrameworkRelease, build: FrameworkBuild
) -> tuple[
    list[str], Floors | None, CudaRelease | None, tuple[tuple[_Target, str], ...], list[str]
]:
    """Build-level checks. Returns (misses, floors, cuda row, PTX-only targets, row keys)."""
    m = ctx.matrix
    v = build.variant
    misses: list[str] = []
    rows: list[str] = []
    if build.cuda is None:
        return misses, None, None, (), rows
    if ctx.cuda_spec and not parse_specifier(ctx.cuda_spec).contains(
        _v(build.cuda), prereleases=True
    ):
        misses.append(f"{{R}} {v} is built with CUDA {build.cuda}, outside --cuda {ctx.cuda_spec}")
    cuda_row = _cuda_row(m, build.cuda)
    if cuda_row is None:
        misses.append(f"{{R}} {v}: the matrix has no CUDA {build.cuda} row (driver floors unknown)")
        return misses, None, None, (), rows
    rows.append(cuda_row.key)

    ptx_only: list[tuple[_Target, str]] = []
    for t in ctx.targets:
        how, via = t.coverage(build.archs)
        if how is None:
            misses.append(
                f"{{R}} {v} has no {t.arch.sm} kernels and no PTX that {t.label} can JIT "
                f"(it carries {_arch_summary(build.archs)})"
            )
        elif how == "ptx" and via:
            ptx_only.append((t, via))
        cudnn = _lib_row(m, "cudnn", build.cudnn)
        if cudnn is not None and cudnn.min_cc and t.cc < cc_tuple(cudnn.min_cc):
            misses.append(
                f"{{R}} {v} uses cuDNN {build.cudnn}, which supports compute capability >= "
                f"{cudnn.min_cc}; {t.label} is {t.arch.cc}"
            )

    toolkit = cuda_row.toolkit_driver
    mvc = cuda_row.minor_compat_driver
    # Early 11.0 releases have a toolkit floor below the 11.x MVC floor (450.51.05 <
    # 450.80.02, Table 3): then the toolkit floor is both lower and full-featured.
    needs_toolkit = (
        ctx.policy == "strict" or bool(ptx_only) or mvc is None or _v(toolkit) <= _v(mvc)
    )
    floors: Floors | None = None
    if ctx.driver is None:
        floors = Floors(toolkit, mvc, "toolkit" if needs_toolkit else "minor_compat")
    elif _v(ctx.driver) >= _v(toolkit):
        floors = Floors(toolkit, mvc, "toolkit")
    elif not needs_toolkit and mvc is not None and _v(ctx.driver) >= _v(mvc):
        floors = Floors(toolkit, mvc, "minor_compat")
    else:
        cuda = cuda_row.version
        oldest = f"the oldest target driver is {ctx.driver}"
        if mvc is not None and _v(ctx.driver) < _v(mvc):
            misses.append(
                f"{{R}} {v} needs driver >= {toolkit} (CUDA {cuda} toolkit floor) or >= {mvc} "
                f"with minor-version compatibility; {oldest}"
            )
        elif ctx.policy == "strict":
            misses.append(
                f"{{R}} {v} needs driver >= {toolkit} (CUDA {cuda} toolkit floor; strict "
                f"compatibility policy, minor-version compatibility not allowed); {oldest}"
            )
        elif ptx_only:
            t, via = ptx_only[0]
            misses.append(
                f"{{R}} {v} reaches {t.label} only through PTX ({via}); JIT of that PTX needs "
                f"the CUDA {cuda} toolkit floor, driver >= {toolkit} (minor-version "
                f"compatibility does not cover PTX JIT); {oldest}"
            )
        else:
            misses.append(
                f"{{R}} {v} needs driver >= {toolkit} (CUDA {cuda} has no minor-version "
                f"compatibility); {oldest}"
            )
    return misses, floors, cuda_row, tuple(ptx_only), rows


def _check_os(
    ctx: _Ctx, release: FrameworkRelease, build: FrameworkBuild, osimg: OsImage
) -> tuple[list[str], CudaImage | None, str, CudaImage | None, list[str]]:
    """OS-level checks: Python and base image. Returns (misses, image, flavour, builder, notes)."""
    fw = ctx.framework
    py = osimg.python
    misses: list[str] = []
    notes: list[str] = []
    if not _in(py, release.python):
        misses.append(
            f"{{R}} supports Python {release.python}; {osimg.os} ships Python {py}"
            if not ctx.python
            else f"{{R}} supports Python {release.python}, not {py}"
        )
    elif build.python and not _in(py, build.python):
        misses.append(f"{{R}} {build.variant} supports Python {build.python}; {osimg.os} has {py}")
    if misses:
        return misses, None, "", None, notes
    if build.cuda is None:
        return misses, None, "cpu", None, notes
    image: CudaImage | None = None
    flavour = ctx.flavour
    if flavour == "auto":
        image = _cuda_image(ctx.matrix, build.cuda, osimg.os, "base")
        if image is None:
            flavour = "plain"
            notes.append(
                f"no nvidia/cuda {_mm(build.cuda)[0]}.{_mm(build.cuda)[1]} base image for "
                f"{osimg.os}: using {osimg.image}, CUDA comes from the {fw} wheels"
            )
        else:
            flavour = "base"
    elif flavour in CUDA_FLAVOURS:
        image = _cuda_image(ctx.matrix, build.cuda, osimg.os, flavour)
        if image is None:
            mm = _mm(build.cuda)
            misses.append(
                f"{{R}} {build.variant}: the matrix has no nvidia/cuda {mm[0]}.{mm[1]} "
                f"{flavour} image for {osimg.os}"
            )
            return misses, None, flavour, None, notes
    builder: CudaImage | None = None
    if ctx.request.compile_extensions:
        builder = _cuda_image(ctx.matrix, build.cuda, osimg.os, "devel")
        if builder is None:
            mm = _mm(build.cuda)
            misses.append(
                f"{{R}} {build.variant}: compiling CUDA extensions needs an nvidia/cuda "
                f"{mm[0]}.{mm[1]} devel image for {osimg.os}; the matrix has none"
            )
    return misses, image, flavour, builder, notes


def _search(ctx: _Ctx, *, first_only: bool) -> _Outcome:
    out = _Outcome()
    m = ctx.matrix
    fw = ctx.framework
    out.releases = _releases(ctx)
    if not out.releases:
        allr = sorted((r for r in m.releases if r.framework == fw), key=lambda r: _v(r.version))
        span = f" (the matrix has {allr[0].version} to {allr[-1].version})" if allr else ""
        out.global_reasons.append(f"no {fw} release in the matrix matches {fw}{ctx.spec}{span}")
        return out

    # A GPU needs a driver branch that knows it (see the module docstring).
    if ctx.driver and ctx.targets:
        unknown_to_driver = []
        for t in ctx.targets:
            first = _first_cuda_floor(m, t.arch)
            if first and _branch(ctx.driver) < _branch(first.toolkit_driver):
                unknown_to_driver.append((t, first))
        if unknown_to_driver and len(unknown_to_driver) == len(ctx.targets):
            for t, first in unknown_to_driver:
                out.global_reasons.append(
                    f"{t.label} needs a driver of branch {_branch(first.toolkit_driver)} or newer "
                    f"(>= {first.toolkit_driver}, CUDA {first.version} is the first that targets "
                    f"{t.arch.sm}); the target driver {ctx.driver} does not support this GPU"
                )
            return out

    if ctx.python and not ctx.os and not any(o.python == ctx.python for o in m.os_images):
        shipped = ", ".join(f"{o.os} {o.python}" for o in sorted(m.os_images, key=lambda o: o.os))
        out.global_reasons.append(
            f"no OS image in the matrix ships Python {ctx.python} (the image's Python comes "
            f"from its OS: {shipped})"
        )

    for release in out.releases:
        lines: list[str] = []
        if ctx.python and not _in(ctx.python, release.python):
            out.misses[release.version] = [
                f"{{R}} supports Python {release.python}; requested {ctx.python}"
            ]
            continue
        builds = _builds(ctx, release)
        if not builds:
            what = "CPU" if ctx.device == "cpu" else "GPU"
            extra = f" variant {', '.join(ctx.variants)}" if ctx.variants else ""
            out.misses[release.version] = [
                f"{{R}} has no {what} build{extra} for {ctx.request.platform} in the matrix"
            ]
            continue
        per_build: list[tuple[FrameworkBuild, list[str]]] = []
        for build in builds:
            misses, floors, cuda_row, ptx_only, rows = _check_build(ctx, release, build)
            if misses:
                per_build.append((build, misses))
                continue
            os_misses: list[str] = []
            for osimg in _os_order(ctx, build):
                om, image, flavour, builder, notes = _check_os(ctx, release, build, osimg)
                if om:
                    os_misses.extend(x for x in om if x not in os_misses)
                    continue
                out.fits.append(
                    _Fit(
                        release=release,
                        build=build,
                        osimg=osimg,
                        floors=floors,
                        cuda_row=cuda_row,
                        ptx_only=ptx_only,
                        image=image,
                        flavour=flavour,
                        builder=builder,
                        notes=tuple(notes),
                        rows=tuple(rows),
                    )
                )
                if first_only:
                    return out
                break
            else:
                if not os_misses:
                    os_misses.append("{R} " + build.variant + ": no OS image fits")
                per_build.append((build, os_misses))
        if len(per_build) == len(builds):
            lines = _explain_release(ctx, release, per_build)
            out.misses[release.version] = lines
    return out


def _explain_release(
    ctx: _Ctx, release: FrameworkRelease, per_build: list[tuple[FrameworkBuild, list[str]]]
) -> list[str]:
    """Reason lines for a release none of whose builds fit; shared causes are said once."""
    lines: list[str] = []
    summarised: list[str] = []
    # Kernel coverage missing in every build for the same GPU: one line with the way forward.
    for t in ctx.targets:
        if all(t.coverage(b.archs)[0] is None for b, _ in per_build):
            hint = _arch_hint(ctx, t, release)
            lines.append(
                f"{{R}} has no build with {t.arch.sm} kernels (or PTX that {t.label} can JIT)"
                + (f"; {hint}" if hint else "")
            )
            summarised.append(f" has no {t.arch.sm} kernels and ")
    for b, misses in per_build:
        rest = [x for x in misses if not any(s in x for s in summarised)]
        # One label per build: "{R} cu130 has no sm_70 kernels ...; needs driver >= ...".
        prefix = "{R} " + b.variant + " "
        joined = "; ".join(
            x[len(prefix) :] if i and x.startswith(prefix) else x for i, x in enumerate(rest)
        )
        if rest and joined not in lines:
            lines.append(joined)
    return lines


def _arch_hint(ctx: _Ctx, t: _Target, release: FrameworkRelease) -> str:
    """ "sm_120 needs CUDA >= 12.8, first in torch 2.7 cu128" (ignoring other constraints)."""
    fw = ctx.framework
    memo_key = f"covering:{t.arch.sm}"
    if memo_key not in ctx.memo:
        ctx.memo[memo_key] = _covering(ctx, t)
    covering: list[tuple[Version, FrameworkBuild, FrameworkRelease]] = ctx.memo[memo_key]
    a = t.arch
    parts = []
    if covering:
        first = min(covering, key=lambda x: (x[0], _v(x[1].cuda or "0")))
        last = max(covering, key=lambda x: (x[0], _v(x[1].cuda or "0")))
        if _v(release.version) < first[0]:
            if a.first_cuda:
                parts.append(f"{a.sm} needs CUDA >= {_short(a.first_cuda)}")
            parts.append(f"first in {fw} {_series(first[1], first[2])} {first[1].variant}")
        elif _v(release.version) > last[0]:
            if a.last_cuda:
                parts.append(f"{a.sm} needs CUDA <= {_short(a.last_cuda)}")
            parts.append(f"last in {fw} {_series(last[1], last[2])} {last[1].variant}")
    else:
        parts.append(f"no {fw} build in the matrix carries {a.sm} kernels or PTX for it")
    return ", ".join(parts)


def _covering(ctx: _Ctx, t: _Target) -> list[tuple[Version, FrameworkBuild, FrameworkRelease]]:
    """Every (release, GPU build) of the framework that reaches the target, other limits aside."""
    fw = ctx.framework
    builds = [
        b
        for b in ctx.matrix.builds
        if b.framework == fw
        and b.cuda
        and ctx.request.platform in b.platforms
        and t.coverage(b.archs)[0] is not None
    ]
    return [
        (_v(r.version), b, r)
        for r in ctx.matrix.releases
        if r.framework == fw and not r.yanked
        for b in builds
        if _in(r.version, b.versions)
    ]


def _short(cuda: str) -> str:
    mm = _mm(cuda)
    return f"{mm[0]}.{mm[1]}"


# --- the stack -------------------------------------------------------------------------------


def _require_cuda(m: Matrix, cuda_row: CudaRelease, floors: Floors, image: CudaImage | None) -> str:
    """`cuda>=X.Y` where X.Y is what the relied-on floor driver supports within the build's
    major (never more than the build's own CUDA), plus the image's published brand= clauses."""
    major, minor = _mm(cuda_row.version)
    eff = _v(floors.effective)
    supported = [
        _mm(r.version)[1]
        for r in m.cuda
        if _mm(r.version)[0] == major and _v(r.toolkit_driver) <= eff
    ]
    want = min(max(supported), minor) if supported else 0
    clauses = [f"cuda>={major}.{want}"]
    if image is not None:
        clauses += [c for c in image.require_cuda.split() if c.startswith("brand=")]
    return " ".join(clauses)


def _stack(ctx: _Ctx, fit: _Fit, outcome: _Outcome) -> Stack:
    m = ctx.matrix
    b, r, o = fit.build, fit.release, fit.osimg
    fw = ctx.framework
    notes: list[str] = list(ctx.pre_notes)
    rows: set[str] = {r.key, b.key, o.key, *fit.rows}
    rows.update(t.arch.key for t in ctx.targets)
    for lib, ver in (("cudnn", b.cudnn), ("nccl", b.nccl)):
        row = _lib_row(m, lib, ver)
        if row is not None:
            rows.add(row.key)
            if lib == "cudnn" and row.max_cc:
                above = [t for t in ctx.targets if t.cc > cc_tuple(row.max_cc)]
                for t in above:
                    notes.append(
                        f"cuDNN {ver}'s support matrix lists compute capability up to "
                        f"{row.max_cc}; {t.label} is {t.arch.cc} (not listed, not excluded)"
                    )

    # Why not something newer: the newest release in range that was skipped.
    newer = [x for x in outcome.releases if _v(x.version) > _v(r.version)]
    if newer:
        top = newer[0]
        why = outcome.misses.get(top.version)
        if why:
            skipped = _label_versions([x.version for x in newer])
            notes.append(
                f"why not newer ({fw} {skipped} skipped): "
                + why[0].replace("{R}", f"{fw} {top.version}")
            )

    require = ""
    if b.cuda is None:
        base = BaseImage(ref=o.image, flavour="cpu", os=o.os)
        flavour = "cpu"
    else:
        assert fit.floors is not None and fit.cuda_row is not None
        f = fit.floors
        cr = fit.cuda_row
        require = _require_cuda(m, cr, f, fit.image)
        if fit.image is not None:
            rows.add(fit.image.key)
            ref = fit.image.ref(fit.flavour, o.os)
        else:
            ref = o.image
        builder_ref = None
        if fit.builder is not None:
            rows.add(fit.builder.key)
            builder_ref = fit.builder.ref("devel", o.os)
            notes.append(f"compiles CUDA extensions in a builder stage: {builder_ref}")
        base = BaseImage(
            ref=ref,
            flavour=fit.flavour,
            os=o.os,
            cudnn=fit.image.cudnn if fit.image is not None and fit.flavour == "cudnn" else None,
            require_cuda=require,
            builder=builder_ref,
        )
        flavour = fit.flavour
        notes.extend(fit.notes)
        if flavour in ("runtime", "cudnn", "devel"):
            notes.append(
                f"flavour {flavour}: the image carries CUDA libraries from nvidia/cuda and again "
                f"from the {fw} wheels (about 2.3 GB more than flavour base)"
            )
        if ctx.driver is None:
            if f.relied_on == "minor_compat":
                notes.append(
                    f"no driver given: the image needs driver >= {f.minor_compat} "
                    f"(minor-version compatibility for CUDA {_mm(cr.version)[0]}.x), >= "
                    f"{f.toolkit} for the full CUDA {cr.version} feature set"
                )
            else:
                notes.append(f"no driver given: the image needs driver >= {f.toolkit}")
            for t in ctx.targets:
                first = _first_cuda_floor(m, t.arch)
                if first and _branch(first.toolkit_driver) > _branch(f.effective):
                    rows.add(first.key)
                    notes.append(
                        f"{t.label} needs a driver of branch {_branch(first.toolkit_driver)} or "
                        f"newer (>= {first.toolkit_driver}, CUDA {first.version} is the first "
                        f"that targets {t.arch.sm})"
                    )
        elif f.relied_on == "minor_compat":
            notes.append(
                f"relies on minor-version compatibility: driver {ctx.driver} < CUDA "
                f"{cr.version}'s toolkit floor {f.toolkit} (>= {f.minor_compat} suffices; "
                f"no PTX JIT of newer PTX, no newer driver APIs)"
            )
        for t, via in fit.ptx_only:
            notes.append(
                f"{t.label} has no matching cubin in {fw} {r.version} {b.variant}; it runs "
                f"through driver JIT of {via} (slow first start; needs driver >= {f.toolkit})"
            )
        if not ctx.targets:
            notes.append(
                "no target GPU given: architectures not checked; the build carries "
                + _arch_summary(b.archs)
            )
        elif ctx.driver:
            for t in ctx.targets:
                first = _first_cuda_floor(m, t.arch)
                if first and _branch(ctx.driver) < _branch(first.toolkit_driver):
                    rows.add(first.key)
                    notes.append(
                        f"{t.label} needs a driver of branch {_branch(first.toolkit_driver)} or "
                        f"newer; its hosts must run a newer driver than the oldest ({ctx.driver})"
                    )
        if not b.pypi_default and b.index_url:
            notes.append(
                f"{b.variant} is not the PyPI default variant: it installs from {b.index_url}"
            )

    pick = FrameworkPick(
        name=fw,
        version=r.version,
        variant=b.variant,
        requirement=b.requirement.replace("{version}", r.version),
        index_url=b.index_url,
        pypi_default=b.pypi_default,
    )
    return Stack(
        framework=pick,
        cuda=b.cuda,
        cudnn=b.cudnn,
        nccl=b.nccl,
        python=o.python,
        os=o.os,
        flavour=flavour,
        base_image=base,
        archs=sort_archs(b.archs),
        target_archs=tuple(t.arch.sm for t in ctx.targets),
        floors=fit.floors,
        notes=tuple(notes),
        rows=tuple(sorted(rows)),
    )


# --- explanations ----------------------------------------------------------------------------


def _reason_lines(ctx: _Ctx, outcome: _Outcome) -> list[str]:
    """Global reasons, then per-release lines (newest first); releases with identical lines
    are merged ("torch 2.6.0, 2.6.1: ..." is said once as "torch 2.6.0, 2.6.1")."""
    fw = ctx.framework
    lines = list(outcome.global_reasons)
    groups: list[tuple[list[str], list[str]]] = []  # (versions, template lines)
    for rel in outcome.releases:
        tmpl = outcome.misses.get(rel.version)
        if not tmpl:
            continue
        if groups and groups[-1][1] == tmpl:
            groups[-1][0].append(rel.version)
        else:
            groups.append(([rel.version], tmpl))
    flat: list[str] = []
    for versions, tmpl in groups:
        label = f"{fw} {_label_versions(versions)}"
        flat.extend(t.replace("{R}", label) for t in tmpl)
    if len(flat) > MAX_REASON_LINES:
        rest = len(flat) - MAX_REASON_LINES
        flat = [*flat[:MAX_REASON_LINES], f"... {rest} more reasons for older {fw} releases"]
    return lines + flat


def _label_versions(versions: list[str]) -> str:
    if len(versions) == 1:
        return versions[0]
    series = {_mm(v) for v in versions}
    if len(series) == 1:
        return ", ".join(sorted(versions, key=_v))
    return f"{min(versions, key=_v)} to {max(versions, key=_v)}"


def _fit_label(ctx: _Ctx, fit: _Fit) -> str:
    cuda = f" (CUDA {fit.build.cuda})" if fit.build.cuda else ""
    return f"{ctx.framework} {fit.release.version} {fit.build.variant}{cuda}"


def _alternatives(ctx: _Ctx, outcome: _Outcome) -> list[str]:
    """The nearest ways out, each checked by resolving the changed request."""
    alts: list[str] = []
    fw = ctx.framework

    def best(c: _Ctx) -> _Fit | None:
        res = _search(c, first_only=True)
        return res.fits[0] if res.fits else None

    # Another framework version (nearest above and below the requested range).
    if ctx.spec:
        allfits = _search(replace(ctx, spec=""), first_only=False).fits
        asked = [_v(r.version) for r in outcome.releases]
        if allfits:
            lo, hi = (min(asked), max(asked)) if asked else (None, None)
            above = [f for f in allfits if hi is not None and _v(f.release.version) > hi]
            below = [f for f in allfits if lo is not None and _v(f.release.version) < lo]
            picks = []
            if above:
                # The nearest series above, at its newest release (fits are newest-first).
                near = min(_mm(f.release.version) for f in above)
                picks.append(next(f for f in above if _mm(f.release.version) == near))
            if below:
                picks.append(max(below, key=lambda f: _v(f.release.version)))
            if not picks:
                picks.append(allfits[0])
            for f in picks:
                s = _series(f.build, f.release)
                alts.append(
                    f"another {fw} version: {_fit_label(ctx, f)} fits (--framework '{fw}=={s}.*')"
                    if s != f.release.version
                    else f"another {fw} version: {_fit_label(ctx, f)} fits "
                    f"(--framework '{fw}=={s}')"
                )
    # A newer driver: the minimum that would work, and what the newest release would need.
    if ctx.driver:
        fits = _search(replace(ctx, driver=None), first_only=False).fits
        # Every target GPU must also be known to the driver (its arch's first driver branch).
        floors = [
            first.toolkit_driver
            for t in ctx.targets
            if (first := _first_cuda_floor(ctx.matrix, t.arch)) is not None
        ]
        gpu_floor = max(floors, key=_v) if floors else None
        needed = [
            (max((f.needed_driver, gpu_floor or "0"), key=_v), f)
            for f in fits
            if f.needed_driver is not None
        ]
        if needed:
            # The lowest driver; among equals the newest release (fits are newest-first).
            low_d, low = min(needed, key=lambda x: _v(x[0]))
            alts.append(
                f"a newer driver: >= {low_d} on every target host would allow "
                f"{_fit_label(ctx, low)}"
            )
            top_d, top = needed[0]
            if _v(top_d) > _v(low_d):
                alts.append(
                    f"a newer driver: >= {top_d} would allow the newest, {_fit_label(ctx, top)}"
                )
    # Minor-version compatibility instead of strict.
    if ctx.policy == "strict":
        minor = best(replace(ctx, policy="minor"))
        if minor and minor.floors:
            alts.append(
                "allow minor-version compatibility (drop --strict-compat): "
                f"{_fit_label(ctx, minor)} fits with driver >= {minor.floors.effective}"
            )
    # Drop one GPU from the image (one image per GPU group instead).
    if len(ctx.targets) > 1:
        for t in ctx.targets:
            rest = tuple(x for x in ctx.targets if x is not t)
            fewer = best(replace(ctx, targets=rest))
            if fewer:
                alts.append(
                    f"drop {t.label} from this image (build it a separate image): "
                    f"{_fit_label(ctx, fewer)} fits the other GPUs"
                )
    for what, changed, flag in (
        ("python", replace(ctx, python=None), "--python"),
        ("os", replace(ctx, os=None), "--os"),
        ("cuda_spec", replace(ctx, cuda_spec=None), "--cuda"),
        ("flavour", replace(ctx, flavour="auto"), "--flavour"),
        ("variants", replace(ctx, variants=()), "the extra in --framework"),
    ):
        if getattr(ctx, what) in (None, "auto", ()):
            continue
        loose = best(changed)
        if loose:
            alts.append(
                f"drop {flag}: {_fit_label(ctx, loose)} fits with Python {loose.osimg.python} "
                f"on {loose.osimg.os}"
            )
    out: list[str] = []
    for a in alts:
        if a not in out:
            out.append(a)
    return out


# --- entry point -----------------------------------------------------------------------------


def resolve(request: Request, matrix: Matrix, hosts: Sequence[Host] = ()) -> Stack | Unsatisfiable:
    """The stack the request runs on, on every target, or why nothing fits (module docstring).

    Raises UserError (exit 2) for bad input: an unknown GPU, framework, OS or flavour, a
    malformed version or range.
    """
    ctx = _prepare(request, matrix, hosts)
    outcome = _search(ctx, first_only=True)
    if outcome.fits:
        return _stack(ctx, outcome.fits[0], outcome)
    # Explanations need every release's reasons, not just the first fit's search.
    full = _search(ctx, first_only=False)
    reasons = _reason_lines(ctx, full)
    if not reasons:
        reasons = [f"no {ctx.framework} candidate in the matrix fits the request"]
    return Unsatisfiable(reasons=tuple(reasons), alternatives=tuple(_alternatives(ctx, full)))


# --- output (pure; the CLI prints) -----------------------------------------------------------


def result_to_json(result: Stack | Unsatisfiable) -> dict[str, Any]:
    """The `envbuild resolve --json` object (issue 2 contract)."""
    if isinstance(result, Unsatisfiable):
        return {
            "ok": False,
            "reasons": list(result.reasons),
            "alternatives": list(result.alternatives),
        }
    s = result
    floors = (
        {
            "toolkit": s.floors.toolkit,
            "minor_compat": s.floors.minor_compat,
            "relied_on": s.floors.relied_on,
            "effective": s.floors.effective,
        }
        if s.floors
        else None
    )
    return {
        "ok": True,
        "stack": {
            "framework": {
                "name": s.framework.name,
                "version": s.framework.version,
                "variant": s.framework.variant,
                "index_url": s.framework.index_url,
                "requirement": s.framework.requirement,
                "pypi_default": s.framework.pypi_default,
            },
            "cuda": s.cuda,
            "cudnn": s.cudnn,
            "nccl": s.nccl,
            "python": s.python,
            "os": s.os,
            "flavour": s.flavour,
            "base_image": s.base_image.ref,
            "builder_image": s.base_image.builder,
            "require_cuda": s.base_image.require_cuda,
            "archs": list(s.archs),
            "target_archs": list(s.target_archs),
            "driver_floor": floors,
            "rows": list(s.rows),
        },
        "notes": list(s.notes),
    }


def _require_summary(require: str) -> str:
    """ "cuda>=12.0 (+ 36 brand= forward-compat clauses: branches 470, 535, 550)"; --json has
    the whole value."""
    first, *brands = require.split()
    branches = sorted({int(m) for b in brands for m in re.findall(r"driver>=(\d+)", b)})
    if not brands:
        return first
    return (
        f"{first} (+ {len(brands)} brand= forward-compat clauses: branches "
        + ", ".join(map(str, branches))
        + ")"
    )


def result_to_text(result: Stack | Unsatisfiable) -> list[str]:
    """A short human summary, same content as the JSON."""
    if isinstance(result, Unsatisfiable):
        out = ["nothing fits:"]
        out += [f"  - {r}" for r in result.reasons]
        if result.alternatives:
            out.append("ways out:")
            out += [f"  - {a}" for a in result.alternatives]
        return out
    s = result
    fw = s.framework
    libs = ", ".join(
        x for x in (f"cuDNN {s.cudnn}" if s.cudnn else "", f"NCCL {s.nccl}" if s.nccl else "") if x
    )
    head = f"{fw.name} {fw.version} {fw.variant}"
    if s.cuda:
        head += f" (CUDA {s.cuda}{', ' + libs if libs else ''})"
    out = [
        head,
        f"  install:      {fw.requirement}"
        + (f" --index-url {fw.index_url}" if fw.index_url else ""),
        f"  python:       {s.python} on {s.os}",
        f"  base image:   {s.base_image.ref} (flavour {s.flavour})",
    ]
    if s.base_image.builder:
        out.append(f"  builder:      {s.base_image.builder}")
    if s.floors:
        f = s.floors
        mvc = f", >= {f.minor_compat} with minor-version compat" if f.minor_compat else ""
        out.append(f"  driver floor: >= {f.toolkit} toolkit{mvc}; relies on {f.relied_on}")
        out.append(f"  NVIDIA_REQUIRE_CUDA: {_require_summary(s.base_image.require_cuda)}")
        out.append(f"  targets:      {' '.join(s.target_archs) or '(none given)'}")
        out.append(f"  build archs:  {' '.join(s.archs)}")
    if s.notes:
        out.append("notes:")
        out += [f"  - {n}" for n in s.notes]
    return out
