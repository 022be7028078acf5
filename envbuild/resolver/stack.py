"""The first fit -> the Stack: base image, NVIDIA_REQUIRE_CUDA, matrix rows and notes."""

from __future__ import annotations

from envbuild.core.models import (
    CUDA_FLAVOURS,
    BaseImage,
    Floors,
    FrameworkPick,
    ManagedPython,
    Stack,
    free_threaded_minor,
)
from envbuild.cuda.archs import cc_tuple, sort_archs
from envbuild.matrix import (
    CudaImage,
    CudaRelease,
    FrameworkBuild,
    FrameworkRelease,
    Matrix,
)
from envbuild.resolver.context import (
    _arch_summary,
    _branch,
    _Ctx,
    _cudnn_supports,
    _first_cuda_floor,
    _Fit,
    _is_branch,
    _label_versions,
    _lib_row,
    _major_minor,
    _Outcome,
    _plan_cudnn,
    _version,
)


def _require_cuda(m: Matrix, cuda_row: CudaRelease, floors: Floors, image: CudaImage | None) -> str:
    """`cuda>=X.Y` where X.Y is what the relied-on floor driver supports within the build's
    major (never more than the build's own CUDA), plus the image's published brand= clauses."""
    major, minor = _major_minor(cuda_row.version)
    eff = _version(floors.effective)
    supported = [
        _major_minor(r.version)[1]
        for r in m.cuda
        if _major_minor(r.version)[0] == major and _version(r.toolkit_driver) <= eff
    ]
    want = min(max(supported), minor) if supported else 0
    clauses = [f"cuda>={major}.{want}"]
    if image is not None:
        clauses += [c for c in image.require_cuda.split() if c.startswith("brand=")]
    return " ".join(clauses)


def _stack(ctx: _Ctx, fit: _Fit, outcome: _Outcome) -> Stack:
    """The Stack of the first fit, with the matrix rows it rests on and its notes."""
    b, r, o = fit.build, fit.release, fit.osimg
    notes: list[str] = list(ctx.pre_notes)
    rows: set[str] = {r.key, b.key, o.key, *fit.rows}
    rows.update(t.arch.key for t in ctx.targets)
    _library_notes(ctx, b, rows, notes)
    _why_not_newer(ctx, fit, outcome, notes)
    if b.cuda is None:
        base = BaseImage(ref=o.image, flavour="cpu", os=o.os)
        flavour = "cpu"
    else:
        base = _gpu_base_image(ctx, fit, rows, notes)
        flavour = fit.flavour
        _gpu_notes(ctx, fit, rows, notes)

    plan = _plan_cudnn(ctx, b)
    if plan.row is not None:
        rows.add(plan.row.key)
    cudnn_requirement = None
    if plan.capped and plan.version and plan.newest and b.cuda:
        cudnn_requirement = f"nvidia-cudnn-cu{_major_minor(b.cuda)[0]}=={plan.version}"
        capped_for = [t.label for t in ctx.targets if not _cudnn_supports(plan.newest, t.cc)]
        notes.append(
            f"cuDNN: {b.variant} installs cuDNN {b.cudnn_range}, whose newest "
            f"({plan.newest.version}) supports compute capability {plan.newest.min_cc} and up, "
            f"not {', '.join(capped_for)}: planned cuDNN {plan.version}, the newest of the "
            f"range that does (the lock pins {cudnn_requirement})"
        )
    elif b.cudnn_range and plan.version:
        notes.append(
            f"cuDNN: {b.variant} installs the newest cuDNN of {b.cudnn_range} "
            f"({plan.version} in the matrix; the lock records the one pinned)"
        )
    managed = _managed_python(ctx, fit, rows, notes)
    level, because = _confidence(ctx, r, rows)
    pick = FrameworkPick(
        name=ctx.framework,
        version=r.version,
        variant=b.variant,
        requirement=b.requirement.replace("{version}", r.version),
        index_url=b.index_url,
        pypi_default=b.pypi_default,
    )
    return Stack(
        framework=pick,
        cuda=b.cuda,
        cudnn=plan.version if b.cudnn_range else b.cudnn,
        nccl=b.nccl,
        python=ctx.python if managed is not None and ctx.python else o.python,
        os=o.os,
        flavour=flavour,
        base_image=base,
        archs=sort_archs(b.archs),
        target_archs=tuple(t.arch.sm for t in ctx.targets),
        floors=fit.floors,
        notes=tuple(notes),
        rows=tuple(sorted(rows)),
        confidence=level,
        confidence_notes=tuple(because),
        cudnn_requirement=cudnn_requirement,
        managed_python=managed,
    )


def _managed_python(ctx: _Ctx, fit: _Fit, rows: set[str], notes: list[str]) -> ManagedPython | None:
    """The managed Python of the fit, its row, and a note that says where Python comes from
    and why (no OS row ships it)."""
    pb = fit.python_build
    if pb is None:
        return None
    rows.add(pb.key)
    o = fit.osimg
    kind = " free-threaded" if free_threaded_minor(pb.python) else ""
    notes.append(
        f"Python {pb.python}: managed, python-build-standalone {pb.release} (CPython "
        f"{pb.version}{kind}, {pb.uv_key}), installed by the lock's uv with its sha256 checked: "
        f"no OS image in the matrix ships Python {pb.python} ({o.os}'s own Python {o.python} "
        "only installs uv)"
    )
    return ManagedPython(
        version=pb.version,
        uv_key=pb.uv_key,
        release=pb.release,
        url=pb.url,
        sha256=pb.sha256,
        bootstrap_python=o.python,
    )


_LEVELS = ("low", "medium", "high")


def _confidence(ctx: _Ctx, release: FrameworkRelease, rows: set[str]) -> tuple[str, list[str]]:
    """The lowest confidence of the rows the pick rests on, and which rows (with their note)
    pull it down; a release whose variants are not all known is "low" too."""
    by_key = {row.key: row for group in ctx.matrix._groups() for row in group}
    level = "high"
    because: list[str] = []
    for key in sorted(rows):
        row = by_key.get(key)
        if row is None or row.confidence == "high":
            continue
        why = row.note or row.source
        because.append(f"{key} is {row.confidence} confidence: {why}")
        if _LEVELS.index(row.confidence) < _LEVELS.index(level):
            level = row.confidence
    if not release.variants_known:
        level = "low"
        because.append(
            f"{release.key}: not every variant of {ctx.framework} {release.version} is known to "
            f"the matrix ({release.note or 'see its row'}); another variant may fit better"
        )
    return level, because


def _library_notes(ctx: _Ctx, b: FrameworkBuild, rows: set[str], notes: list[str]) -> None:
    """The cuDNN and NCCL rows of the build; a target above cuDNN's listed range is a note."""
    for lib, ver in (("cudnn", b.cudnn), ("nccl", b.nccl)):
        if lib == "cudnn" and b.cudnn_range:
            continue  # planned from the range (_plan_cudnn), said in _stack
        row = _lib_row(ctx.matrix, lib, ver)
        if row is not None:
            rows.add(row.key)
            if lib == "cudnn" and row.max_cc:
                above = [t for t in ctx.targets if t.cc > cc_tuple(row.max_cc)]
                for t in above:
                    notes.append(
                        f"cuDNN {ver}'s support matrix lists compute capability up to "
                        f"{row.max_cc}; {t.label} is {t.arch.cc} (not listed: cuDNN 9 runs "
                        "a subset of its operation graphs on newer GPUs)"
                    )


def _why_not_newer(ctx: _Ctx, fit: _Fit, outcome: _Outcome, notes: list[str]) -> None:
    """Why not something newer: the newest release in range that was skipped."""
    fw = ctx.framework
    newer = [x for x in outcome.releases if _version(x.version) > _version(fit.release.version)]
    if newer:
        top = newer[0]
        why = outcome.misses.get(top.version)
        if why:
            skipped = _label_versions([x.version for x in newer])
            notes.append(
                f"why not newer ({fw} {skipped} skipped): "
                + why[0].replace("{R}", f"{fw} {top.version}")
            )


def _gpu_base_image(ctx: _Ctx, fit: _Fit, rows: set[str], notes: list[str]) -> BaseImage:
    """The base (and builder) image of a GPU fit, with its NVIDIA_REQUIRE_CUDA."""
    assert fit.floors is not None and fit.cuda_row is not None
    o = fit.osimg
    require = _require_cuda(ctx.matrix, fit.cuda_row, fit.floors, fit.image)
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
    return BaseImage(
        ref=ref,
        flavour=fit.flavour,
        os=o.os,
        cudnn=fit.image.cudnn if fit.image is not None and fit.flavour == "cudnn" else None,
        require_cuda=require,
        builder=builder_ref,
    )


def _gpu_notes(ctx: _Ctx, fit: _Fit, rows: set[str], notes: list[str]) -> None:
    """What a GPU stack relies on: flavour size, driver floors, PTX JIT, GPUs the oldest
    driver may not know, a non-default variant's index."""
    assert fit.floors is not None and fit.cuda_row is not None
    m = ctx.matrix
    fw = ctx.framework
    b, r, f, cr = fit.build, fit.release, fit.floors, fit.cuda_row
    flavour = fit.flavour
    notes.extend(fit.notes)
    if flavour in CUDA_FLAVOURS and flavour != "base":
        notes.append(
            f"flavour {flavour}: the image carries CUDA libraries from nvidia/cuda and again "
            f"from the {fw} wheels (about 2.3 GB more than flavour base)"
        )
    if ctx.driver is not None and _is_branch(ctx.driver):
        branch = _branch(ctx.driver)
        within = _branch(f.effective) == branch
        notes.append(
            f"driver {ctx.driver}: a bare branch, read as the newest R{branch} update"
            + (
                f"; this image needs >= {f.effective}: update within R{branch} if older"
                if within
                else f"; this image needs >= {f.effective} (an older branch)"
            )
        )
    if ctx.driver is None:
        if f.relied_on == "minor_compat":
            notes.append(
                f"no driver given: the image needs driver >= {f.minor_compat} "
                f"(minor-version compatibility for CUDA {_major_minor(cr.version)[0]}.x), >= "
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
        notes.append(f"{b.variant} is not the PyPI default variant: it installs from {b.index_url}")
