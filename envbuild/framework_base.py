"""Framework bases: a request whose base image already holds the framework [pure].

The facts come from a probe container (`envbuild/payload/base_probe.py`, run by
`envbuild.app.base_lock`). This module reads them strictly, turns them into the stack the
lock records (checking the request's framework range, CUDA range, target GPUs and driver
against them), and gives the constraints that keep extra packages from replacing anything
the base holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuild.archs import ArchRules, arch_coverage, sort_archs
from envbuild.errors import EnvbuildError, UnsatisfiableError, UserError
from envbuild.matrix import CudaRelease, Matrix
from envbuild.models import (
    FRAMEWORK_FLAVOUR,
    BaseFacts,
    BaseImage,
    Floors,
    FrameworkPick,
    Request,
    Stack,
)
from envbuild.payload.base_probe import MARKER
from envbuild.request import parse_framework_requirement
from envbuild.resolver.gpus import parse_gpu
from envbuild.versions import try_version

PROBE_SOURCE = "probe"
_ARCH_RE = re.compile(r"^(sm|compute)_[0-9]{2,3}[af]?$")
_PATH_RE = re.compile(r"^/[A-Za-z0-9._+/-]+$")
_PYTHON_RE = re.compile(r"^3\.[0-9]{1,2}$")
_CUDA_RE = re.compile(r"^[0-9]+\.[0-9]+(\.[0-9]+)*$")


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


def _text(data: Mapping[str, Any], key: str, ref: str, pattern: re.Pattern[str] | None) -> str:
    value = data.get(key)
    if not isinstance(value, str) or (pattern is not None and not pattern.match(value)):
        raise _probe_fail(ref, f"the probe reported {key} = {value!r}")
    return value


def _optional_version(data: Mapping[str, Any], key: str, ref: str) -> str | None:
    value = data.get(key)
    if value in (None, ""):
        return None
    if not isinstance(value, str) or not _CUDA_RE.match(value):
        raise _probe_fail(ref, f"the probe reported {key} = {value!r}, not a version")
    return value


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
    if try_version(version) is None:
        raise _probe_fail(ref, f"{framework} reports version {version!r}, not PEP 440")
    archs = data.get("archs") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise _probe_fail(ref, f"the probe reported archs = {archs!r}")
    archs = [a for a in archs if _ARCH_RE.match(a)]
    packages = data.get("packages") or {}
    if not isinstance(packages, dict):
        raise _probe_fail(ref, "the probe reported no package list")
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
        os=str(data.get("os") or ""),
        image_id=image_id,
        has_pip=bool(data.get("has_pip")),
        packages=tuple(
            sorted((str(canonicalize_name(n)), str(v)) for n, v in packages.items() if v)
        ),
    )


# --- the stack ---------------------------------------------------------------------------------


def _cuda_row(matrix: Matrix, cuda: str) -> CudaRelease | None:
    """The matrix's CUDA release of the base's major.minor: its first patch release (the
    lowest floor a build of that minor can ask for)."""
    mm = ".".join(cuda.split(".")[:2])
    rows = [r for r in matrix.cuda if ".".join(r.version.split(".")[:2]) == mm]
    return min(rows, key=lambda r: Version(r.version), default=None)


def _floors(request: Request, facts: BaseFacts, row: CudaRelease | None) -> Floors | None:
    if facts.cuda is None or row is None:
        return None
    minor = row.minor_compat_driver
    relied = "toolkit"
    if request.compat == "minor" and minor is not None:
        driver = try_version(request.targets.driver or "")
        if driver is not None and driver < Version(row.toolkit_driver):
            relied = "minor_compat"
    return Floors(toolkit=row.toolkit_driver, minor_compat=minor, relied_on=relied)  # type: ignore[arg-type]


def _check_framework(request: Request, facts: BaseFacts, ref: str) -> list[str]:
    name, _extras, spec = parse_framework_requirement(request.framework)
    reasons = []
    if name != facts.framework:
        reasons.append(f"the request asks for {name}, the base is probed for {facts.framework}")
    version = Version(facts.framework_version)
    public = Version(version.public)
    if spec and not any(v in _spec(spec) for v in (version, public, Version(public.base_version))):
        reasons.append(f"{ref} holds {name} {facts.framework_version}, outside {spec}")
    if request.cuda and facts.cuda is not None and Version(facts.cuda) not in _spec(request.cuda):
        reasons.append(f"{ref}'s {name} is built with CUDA {facts.cuda}, outside {request.cuda}")
    if request.device == "cuda" and facts.cuda is None:
        reasons.append(f"{ref} holds a CPU build of {name} ({facts.framework_version})")
    if request.device == "cpu" and facts.cuda is not None:
        reasons.append(f'device = "cpu", but {ref}\'s {name} is built with CUDA {facts.cuda}')
    return reasons


def _spec(text: str) -> Any:
    from envbuild.versions import parse_specifier

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


def stack_for_base(request: Request, facts: BaseFacts, matrix: Matrix) -> Stack:
    """The stack a framework base gives, or UnsatisfiableError with every reason it does not
    fit the request."""
    ref = request.base or "the base"
    reasons = _check_framework(request, facts, ref)
    row = _cuda_row(matrix, facts.cuda) if facts.cuda else None
    if facts.cuda is not None and row is None:
        reasons.append(f"the matrix has no CUDA {facts.cuda} release to take the driver floor from")
    floors = _floors(request, facts, row)
    more, target_archs = _check_targets(request, facts, floors, matrix, ref)
    reasons += more
    if reasons:
        raise UnsatisfiableError(
            f"{ref} does not fit the request: {reasons[0]}",
            hint="pick a base that holds what the targets need, or change the request",
            fields={"reasons": reasons},
        )
    cuda_mm = ".".join(facts.cuda.split(".")[:2]) if facts.cuda else None
    notes = [f"framework base {ref}: facts from {facts.source}"]
    if floors is not None and floors.relied_on == "minor_compat":
        notes.append(
            f"relies on minor-version compatibility: driver {request.targets.driver} < CUDA "
            f"{facts.cuda}'s toolkit floor {floors.toolkit}"
        )
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
        notes=tuple(notes),
        rows=(row.key,) if row is not None else (),
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


def check_extras(request: Request, facts: BaseFacts) -> None:
    """Extra packages need pip in the base's Python."""
    if request.packages and not facts.has_pip:
        raise UserError(
            f"the base {request.base} has no pip for {facts.python_path}: the extra packages "
            f"({', '.join(request.packages)}) cannot be installed",
            hint="use a base with pip (python3 -m pip), or drop [packages]",
        )
