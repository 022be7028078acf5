"""Framework bases: a request whose base image already holds the framework [pure].

The facts come from a probe container (`envbuild/payload/base_probe.py`, run by
`envbuild.app.lock_base`) or, for an NGC release the matrix knows, from its row in
matrix/ngc.toml (NVIDIA's release notes). This module reads them strictly, checks a probe
against the row, turns the facts into the stack the lock records (checking the request's
framework range, CUDA range, target GPUs and driver against them), and gives the
constraints that keep extra packages from replacing anything the base holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuild.core.errors import EnvbuildError, UnsatisfiableError, UserError
from envbuild.core.models import (
    FRAMEWORK_FLAVOUR,
    OS_NAME_RE,
    BaseFacts,
    BaseImage,
    Floors,
    FrameworkPick,
    Request,
    Stack,
)
from envbuild.core.values import NAME_MAX, PACKAGE_NAME_RE, VERSION_RE
from envbuild.core.versions import held_satisfies, try_version
from envbuild.cuda.archs import ArchRules, arch_coverage, sort_archs
from envbuild.matrix import CudaRelease, Matrix, NgcImage
from envbuild.payload.base_probe import MARKER
from envbuild.payload.smoke_checks import version_matches
from envbuild.request.parse import parse_framework_requirement
from envbuild.resolver.gpus import parse_gpu

PROBE_SOURCE = "probe"
_ARCH_RE = re.compile(r"(sm|compute)_[0-9]{2,3}[af]?")
_ARCH_CHARS = re.compile(r"[A-Za-z0-9_]{1,32}")
_PATH_RE = re.compile(r"/[A-Za-z0-9._+/-]+")
_PYTHON_RE = re.compile(r"3\.[0-9]{1,2}")
_CUDA_RE = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)*")


class ProbeError(EnvbuildError):
    """The base's probe printed nothing usable. Exit 2: the base is not what the request says."""

    exit_code: int = 2


def _probe_fail(ref: str, problem: str, hint: str = "") -> ProbeError:
    return ProbeError(
        f"the base {ref}: {problem}",
        hint=hint
        or "check that the image holds the framework for the Python on its PATH "
        f"(docker run --rm {ref} python3 -c 'import torch')",
        fields={"base": ref},
    )


def _shown(value: object) -> str:
    """A probe value as a message quotes it: repr (a line break shows as \\n), a huge one
    by its start and length."""
    shown = repr(value)
    return f"{shown[:120]}... ({len(shown)} characters)" if len(shown) > 200 else shown


def _text(data: Mapping[str, Any], key: str, ref: str, pattern: re.Pattern[str] | None) -> str:
    value = data.get(key)
    # fullmatch: `$` would let a trailing line break through (re docs), into a RUN line.
    if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
        raise _probe_fail(ref, f"the probe reported {key} = {_shown(value)}")
    return value


def _optional_version(data: Mapping[str, Any], key: str, ref: str) -> str | None:
    value = data.get(key)
    if value in (None, ""):
        return None
    if not isinstance(value, str) or not _CUDA_RE.fullmatch(value):
        raise _probe_fail(ref, f"the probe reported {key} = {_shown(value)}, not a version")
    return value


def _os_name(data: Mapping[str, Any], ref: str) -> str:
    """The probe's OS: "" (no /etc/os-release) or a name the request's grammar accepts."""
    value = data.get("os") or ""
    if not isinstance(value, str) or (value and not OS_NAME_RE.fullmatch(value)):
        raise _probe_fail(ref, f"the probe reported os = {_shown(value)}, not an OS name")
    return value


def _archs(data: Mapping[str, Any], ref: str) -> list[str]:
    """The compiled architectures: one that is not an arch name is dropped (a newer CUDA's
    spelling); anything but letters, digits and `_` in one is refused."""
    archs = data.get("archs") or []
    if not isinstance(archs, list) or not all(
        isinstance(a, str) and _ARCH_CHARS.fullmatch(a) for a in archs
    ):
        raise _probe_fail(ref, f"the probe reported archs = {_shown(archs)}")
    return [a for a in archs if _ARCH_RE.fullmatch(a)]


def _packages(data: Mapping[str, Any], ref: str) -> tuple[tuple[str, str], ...]:
    """The installed distributions, each name and version checked by the request's grammar
    (envbuild/core/values.py): they become uv's constraints and the image's PIP_CONSTRAINT,
    one line each, so a line break or an option in one is refused, never written."""
    packages = data.get("packages") or {}
    if not isinstance(packages, dict):
        raise _probe_fail(ref, "the probe reported no package list")
    out = []
    for name, version in packages.items():
        if not version:
            continue  # a distribution without a version: nothing to hold it to
        fine = (
            len(name) <= NAME_MAX
            and PACKAGE_NAME_RE.fullmatch(name)
            and isinstance(version, str)
            and len(version) <= NAME_MAX
            and VERSION_RE.fullmatch(version)
        )
        if not fine:
            raise _probe_fail(
                ref,
                f"the probe reported the package {_shown(name)} at version {_shown(version)}, "
                "not a PEP 508 name and a version",
                hint="check what is installed in the base (`pip list` in it); envbuild writes "
                "nothing from the probe that a request could not say",
            )
        out.append((str(canonicalize_name(name)), version))
    return tuple(sorted(out))


def parse_probe(stdout: str, *, ref: str, framework: str, image_id: str = "") -> BaseFacts:
    """The probe's JSON line -> BaseFacts; ProbeError when it is missing or the framework is
    not importable in the base."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith(MARKER)]
    if not lines:
        raise _probe_fail(ref, "the probe printed no facts (is there a python3 on its PATH?)")
    try:
        data = json.loads(lines[-1][len(MARKER) :])
    except json.JSONDecodeError as exc:
        raise _probe_fail(ref, f"the probe's facts are not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _probe_fail(ref, "the probe's facts are not a JSON object")
    if data.get("error"):
        raise _probe_fail(ref, f"{framework} does not import there: {data['error']}")
    version = _text(data, "version", ref, None)
    if not VERSION_RE.fullmatch(version) or try_version(version) is None:
        raise _probe_fail(ref, f"{framework} reports version {_shown(version)}, not PEP 440")
    archs = _archs(data, ref)
    return BaseFacts(
        source=PROBE_SOURCE,
        framework=framework,
        framework_version=version,
        cuda=_optional_version(data, "cuda", ref),
        cudnn=_optional_version(data, "cudnn", ref),
        nccl=_optional_version(data, "nccl", ref),
        archs=sort_archs(archs),
        python=_text(data, "python", ref, _PYTHON_RE),
        python_path=_text(data, "python_path", ref, _PATH_RE),
        os=_os_name(data, ref),
        image_id=image_id,
        has_pip=bool(data.get("has_pip")),
        packages=_packages(data, ref),
    )


# --- facts from a matrix row (matrix/ngc.toml) ------------------------------------------------


def facts_from_row(row: NgcImage) -> BaseFacts:
    """What the row says the image holds. No arch list, package list or interpreter path:
    release notes do not give them (the lock then checks no archs, pins no extra packages,
    and the image's `python3` on its PATH runs the payload)."""
    return BaseFacts(
        source=row.key,
        framework=row.framework,
        framework_version=row.framework_version,
        cuda=row.cuda,
        cudnn=row.cudnn,
        nccl=row.nccl,
        archs=(),
        python=row.python or "",
        python_path="",
        os=row.os or "",
        has_pip=False,
    )


def _same_build(noted: str, seen: str) -> bool:
    """Whether the image's version is the release notes' one: the same public version, and
    the image's local label extends the noted one ("+b4e4ee81d3" -> "+b4e4ee81d3.nv25.12")."""
    a, b = try_version(noted), try_version(seen)
    if a is None or b is None or a.public != b.public:
        return False
    want, have = (a.local or "").split("."), (b.local or "").split(".")
    return not a.local or have[: len(want)] == want


def row_disagreements(row: NgcImage, facts: BaseFacts) -> list[str]:
    """Where a probe of the image contradicts the row, one line each ("CUDA: 13.1.0 in the
    row, 12.8 in the image"); versions compare on the parts both print."""
    out = []
    if facts.framework != row.framework:
        out.append(f"framework: {row.framework} in the row, {facts.framework} probed")
    elif not _same_build(row.framework_version, facts.framework_version):
        out.append(
            f"{row.framework}: {row.framework_version} in the row, "
            f"{facts.framework_version} in the image"
        )
    for label, noted, seen in (
        ("CUDA", row.cuda, facts.cuda),
        ("cuDNN", row.cudnn, facts.cudnn),
        ("NCCL", row.nccl, facts.nccl),
    ):
        if noted is not None and not version_matches(noted, seen):
            out.append(f"{label}: {noted} in the row, {seen or 'none'} in the image")
    for label, noted, seen in (("Python", row.python, facts.python), ("OS", row.os, facts.os)):
        if noted is not None and seen and noted != seen:
            out.append(f"{label}: {noted} in the row, {seen} in the image")
    return out


def check_row(row: NgcImage, facts: BaseFacts, matrix: Matrix, ref: str) -> None:
    """ProbeError (exit 2) naming the row and the image when the probe contradicts the row."""
    problems = row_disagreements(row, facts)
    if problems:
        raise ProbeError(
            f"the base {ref} does not hold what {matrix.where(row)} says: {problems[0]}",
            hint=f"the image differs from its release notes ({row.source}): a re-pushed tag "
            "or a wrong row; fix the row (an overlay row with the same image replaces it) "
            "and lock again",
            fields={"base": ref, "row": row.key, "source": row.source, "problems": problems},
        )


# --- the stack ---------------------------------------------------------------------------------


def _cuda_row(matrix: Matrix, cuda: str) -> CudaRelease | None:
    """The matrix's CUDA release of the base's major.minor: its first patch release (the
    lowest floor a build of that minor can ask for)."""
    mm = ".".join(cuda.split(".")[:2])
    rows = [r for r in matrix.cuda if ".".join(r.version.split(".")[:2]) == mm]
    return min(rows, key=lambda r: Version(r.version), default=None)


def _floors(
    request: Request, facts: BaseFacts, row: CudaRelease | None, ngc: NgcImage | None
) -> Floors | None:
    if facts.cuda is None or row is None:
        return None
    toolkit = row.toolkit_driver
    if ngc is not None and ngc.driver is not None and Version(ngc.driver) > Version(toolkit):
        toolkit = ngc.driver  # the release notes ask for more than the CUDA toolkit does
    minor = row.minor_compat_driver
    if ngc is not None and ngc.driver is not None and minor is not None:
        # The notes' floor holds whatever minor-version compatibility would allow: their only
        # way below it is the data-center forward-compat branches (`compat_drivers`).
        minor = max(minor, ngc.driver, key=Version)
    relied = "toolkit"
    if request.compat == "minor" and minor is not None:
        driver = try_version(request.targets.driver or "")
        if driver is not None and driver < Version(toolkit):
            relied = "minor_compat"
    return Floors(toolkit=toolkit, minor_compat=minor, relied_on=relied)  # type: ignore[arg-type]


def _forward_compat(request: Request, ngc: NgcImage | None) -> str | None:
    """The data-center driver of the row's release notes ("535.86" for "535.86 (or later
    R535)") that the targets' driver is at or above within its branch; None otherwise. Such a
    driver runs the container below the CUDA floor only through CUDA forward compatibility
    on data-center GPUs (https://docs.nvidia.com/deploy/cuda-compatibility/), which the
    floors envbuild records (and `validate` checks) do not model: it is named, not relied on."""
    have = try_version(request.targets.driver or "")
    if ngc is None or have is None:
        return None
    for listed in ngc.compat_drivers:
        floor = Version(listed)
        if have.release[0] == floor.release[0] and have >= floor:
            return listed
    return None


def _compat(request: Request, ngc: NgcImage | None, floors: Floors | None) -> list[str]:
    """A driver below the floor that the release notes allow through forward compatibility:
    said, so the user knows why envbuild still refuses it."""
    compat = _forward_compat(request, ngc)
    if compat is None or ngc is None or floors is None:
        return []
    if not _below(request.targets.driver, floors.effective):
        return []
    return [
        f"{ngc.image}'s release notes allow {compat} or later R{compat.split('.')[0]} on "
        f"data-center GPUs through CUDA forward compatibility ({ngc.source}); envbuild plans "
        "for the CUDA floor: raise targets.driver to it"
    ]


def _row_target_reasons(request: Request, ngc: NgcImage | None, matrix: Matrix) -> list[str]:
    """Targets below the release notes' minimum compute capability."""
    if ngc is None or ngc.min_cc is None:
        return []
    out = []
    for gpu in request.targets.gpus:
        arch = parse_gpu(matrix, gpu)
        if Version(arch.cc) < Version(ngc.min_cc):
            out.append(
                f"{ngc.image} supports compute capability {ngc.min_cc} and later "
                f"({ngc.source}); {gpu} is {arch.cc}"
            )
    return out


def _check_framework(request: Request, facts: BaseFacts, ref: str) -> list[str]:
    name, _extras, spec = parse_framework_requirement(request.framework)
    reasons = []
    if name != facts.framework:
        reasons.append(f"the request asks for {name}, the base holds {facts.framework}")
    if spec and not held_satisfies(Version(facts.framework_version), _spec(spec)):
        reasons.append(f"{ref} holds {name} {facts.framework_version}, outside {spec}")
    if request.cuda and facts.cuda is not None and Version(facts.cuda) not in _spec(request.cuda):
        reasons.append(f"{ref}'s {name} is built with CUDA {facts.cuda}, outside {request.cuda}")
    if request.device == "cuda" and facts.cuda is None:
        reasons.append(f"{ref} holds a CPU build of {name} ({facts.framework_version})")
    if request.device == "cpu" and facts.cuda is not None:
        reasons.append(f'device = "cpu", but {ref}\'s {name} is built with CUDA {facts.cuda}')
    return reasons


def _spec(text: str) -> Any:
    from envbuild.core.versions import parse_specifier

    spec = text if any(c in text for c in "<>=!~") else f"=={text}.*"
    return parse_specifier(spec)


def _check_targets(
    request: Request, facts: BaseFacts, floors: Floors | None, matrix: Matrix, ref: str
) -> tuple[list[str], tuple[str, ...]]:
    """(reasons, target archs): each target GPU reached by a cubin or by PTX the driver can
    JIT (archs.py, the rule the resolver uses), and the driver at or above the floor."""
    rules = ArchRules.from_archs(matrix.archs)
    reasons: list[str] = []
    targets = []
    for gpu in request.targets.gpus:
        arch = parse_gpu(matrix, gpu)
        targets.append(arch.sm)
        how, _ = arch_coverage(facts.archs, arch.cc, rules)
        if not facts.archs:
            continue  # a build that does not list its archs: the smoke test checks the GPU
        if how == "none":
            reasons.append(
                f"{ref}'s {facts.framework} carries {', '.join(facts.archs)}: no code for "
                f"{gpu} ({arch.sm})"
            )
        elif how == "ptx" and floors is not None and _below(request.targets.driver, floors.toolkit):
            reasons.append(
                f"{gpu} is reached only through PTX, which needs driver >= "
                f"{floors.toolkit}; targets.driver is {request.targets.driver}"
            )
    if floors is not None and _below(request.targets.driver, floors.effective):
        reasons.append(
            f"{ref} needs driver >= {floors.effective} (CUDA {facts.cuda}); "
            f"targets.driver is {request.targets.driver}"
        )
    return reasons, sort_archs(set(targets))


def _below(driver: str | None, floor: str) -> bool:
    have = try_version(driver or "")
    return have is not None and have < Version(floor)


def stack_for_base(
    request: Request, facts: BaseFacts, matrix: Matrix, ngc: NgcImage | None = None
) -> Stack:
    """The stack a framework base gives, or UnsatisfiableError with every reason it does not
    fit the request. `ngc`: the base's matrix row (matrix/ngc.toml), whose driver floor,
    forward-compatible drivers and minimum GPU apply too."""
    ref = request.base or "the base"
    reasons = _check_framework(request, facts, ref)
    row = _cuda_row(matrix, facts.cuda) if facts.cuda else None
    if facts.cuda is not None and row is None:
        reasons.append(f"the matrix has no CUDA {facts.cuda} release to take the driver floor from")
    floors = _floors(request, facts, row, ngc)
    more, target_archs = _check_targets(request, facts, floors, matrix, ref)
    reasons += more + _row_target_reasons(request, ngc, matrix) + _compat(request, ngc, floors)
    if reasons:
        raise UnsatisfiableError(
            f"{ref} does not fit the request: {reasons[0]}",
            hint="pick a base that holds what the targets need, or change the request",
            fields={"reasons": reasons},
        )
    notes = _notes(request, facts, floors, matrix, ngc)
    rows = tuple(r.key for r in (row, ngc) if r is not None)
    return _base_stack(request, facts, floors, target_archs, notes, rows)


def _notes(
    request: Request,
    facts: BaseFacts,
    floors: Floors | None,
    matrix: Matrix,
    ngc: NgcImage | None,
) -> tuple[str, ...]:
    ref = request.base or "the base"
    notes = [f"framework base {ref}: facts from {facts.source}"]
    if ngc is not None:
        how = "facts from" if facts.source == ngc.key else "the probe agrees with"
        notes[0] = f"framework base {ref}: {how} the matrix row {matrix.where(ngc)} ({ngc.source})"
    if floors is not None and floors.relied_on == "minor_compat":
        notes.append(
            f"relies on minor-version compatibility: driver {request.targets.driver} < CUDA "
            f"{facts.cuda}'s toolkit floor {floors.toolkit}"
        )
    return tuple(notes)


def _base_stack(
    request: Request,
    facts: BaseFacts,
    floors: Floors | None,
    target_archs: tuple[str, ...],
    notes: tuple[str, ...],
    rows: tuple[str, ...],
) -> Stack:
    cuda_mm = ".".join(facts.cuda.split(".")[:2]) if facts.cuda else None
    return Stack(
        framework=FrameworkPick(
            name=facts.framework,
            version=facts.framework_version,
            variant="base" if facts.cuda else "cpu",
            requirement=f"{facts.framework}=={facts.framework_version}",
            pypi_default=False,
        ),
        cuda=cuda_mm,
        cudnn=facts.cudnn,
        nccl=facts.nccl,
        python=facts.python,
        os=facts.os,
        flavour=FRAMEWORK_FLAVOUR,
        base_image=BaseImage(
            ref=request.base or "",
            flavour=FRAMEWORK_FLAVOUR,
            os=facts.os,
            cudnn=facts.cudnn,
            require_cuda=f"cuda>={cuda_mm}" if cuda_mm else "",
        ),
        archs=facts.archs,
        target_archs=target_archs,
        floors=floors,
        notes=notes,
        rows=rows,
    )


# --- extra packages ----------------------------------------------------------------------------


def constraints(facts: BaseFacts) -> tuple[str, ...]:
    """`name==version` of what the base holds, for the resolver of the extra packages: a
    local label is dropped (`==2.11.0` admits `2.11.0+cu130`, PEP 440), so an index that
    serves the public release can stand in for the base's build."""
    out = []
    for name, version in facts.packages:
        try:
            parsed = Version(version)
        except InvalidVersion:
            continue  # no index serves it; a package that needs it fails to resolve, clearly
        out.append(f"{name}=={parsed.public}")
    return tuple(out)


def extras_only(packages: Sequence[Any], facts: BaseFacts) -> tuple[Any, ...]:
    """The pinned packages minus those the base already holds (nothing it holds is replaced:
    the constraints made the resolver keep their versions)."""
    held = {name for name, _ in facts.packages}
    return tuple(p for p in packages if str(canonicalize_name(p.name)) not in held)


def check_extras(request: Request, facts: BaseFacts, wanted: Sequence[str] = ()) -> None:
    """What the base does not hold (`wanted`: [packages] lines, the project's dependencies,
    sdists) is installed with the base's pip: without one, say so at lock time, not at build."""
    missing = tuple(wanted) or request.packages
    if missing and not facts.has_pip:
        raise UserError(
            f"the base {request.base} has no pip for {facts.python_path}: the packages it does "
            f"not hold ({', '.join(missing)}) cannot be installed",
            hint="use a base with pip (python3 -m pip), or drop what it does not hold from "
            "[packages] / the project's dependencies",
        )
