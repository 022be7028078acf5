"""The candidate search: releases x builds x OSes in preference order (see the package
docstring), each checked against the targets, drivers, Python and images."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from packaging.version import Version

from envbuild.core.models import (
    CUDA_FLAVOURS,
    Floors,
    free_threaded_minor,
)
from envbuild.core.versions import parse_specifier
from envbuild.cuda.archs import cc_tuple
from envbuild.matrix import (
    CudaImage,
    CudaRelease,
    FrameworkBuild,
    FrameworkRelease,
    OsImage,
)
from envbuild.resolver.context import (
    _arch_summary,
    _branch,
    _Ctx,
    _cuda_image,
    _cuda_row,
    _cudnn_supports,
    _first_cuda_floor,
    _first_url,
    _Fit,
    _in_range,
    _index_allowed,
    _issue,
    _major_minor,
    _managed_build,
    _meets,
    _Outcome,
    _plan_cudnn,
    _series,
    _short,
    _Target,
    _version,
)
from envbuild.resolver.gpus import host_platform_of


def _releases(ctx: _Ctx) -> list[FrameworkRelease]:
    out = []
    pinned = ctx.spec.startswith("==") and "," not in ctx.spec and "*" not in ctx.spec
    for r in ctx.matrix.releases:
        if r.framework != ctx.framework:
            continue
        if ctx.spec and not _in_range(r.version, ctx.spec):
            continue
        if r.yanked and not pinned:
            continue
        out.append(r)
    return sorted(out, key=lambda r: _version(r.version), reverse=True)


def _builds(ctx: _Ctx, release: FrameworkRelease) -> list[FrameworkBuild]:
    out = []
    for b in ctx.matrix.builds:
        if b.framework != ctx.framework or not _in_range(release.version, b.versions):
            continue
        if (b.cuda is None) != (ctx.device == "cpu"):
            continue
        if ctx.variants and b.variant not in ctx.variants:
            continue
        if ctx.request.platform not in b.platforms:
            continue
        if not _index_allowed(ctx, b):
            continue
        out.append(b)

    def key(b: FrameworkBuild) -> tuple[Any, ...]:
        cuda = _version(b.cuda) if b.cuda else _version("0")
        return (-cuda.major, -cuda.minor, -cuda.micro, not b.pypi_default, b.variant)

    return sorted(out, key=key)


def _os_order(ctx: _Ctx, build: FrameworkBuild) -> list[OsImage]:
    rows = list(ctx.matrix.os_images)
    if ctx.os:
        return [o for o in rows if o.os == ctx.os]
    if ctx.python and _managed_build(ctx) is None:
        rows = [o for o in rows if o.python == ctx.python]

    def key(o: OsImage) -> tuple[Any, ...]:
        has_cuda_image = bool(
            build.cuda
            and ctx.flavour in ("auto", *CUDA_FLAVOURS)
            and _cuda_image(
                ctx.matrix, build.cuda, o.os, "base" if ctx.flavour == "auto" else ctx.flavour
            )
        )
        # auto means an nvidia/cuda base (docs/design.md): an OS that has one for this CUDA
        # comes before the default OS without one.
        return (
            not has_cuda_image,
            not o.default,
            -_major_minor(o.python)[0],
            -_major_minor(o.python)[1],
            o.os,
        )

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
        _version(build.cuda), prereleases=True
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
        issue = _issue(ctx, release.version, t.arch.sm, "no_ptx_jit") if how == "ptx" else None
        if how is None:
            misses.append(
                f"{{R}} {v} has no {t.arch.sm} kernels and no PTX that {t.label} can JIT "
                f"(it carries {_arch_summary(build.archs)})"
            )
        elif issue is not None:
            misses.append(
                f"{{R}} {v} reaches {t.label} only through PTX ({via}), and that is known to "
                f"fail: {issue.reason} ({_first_url(issue.source)})"
            )
        elif how == "ptx" and via:
            ptx_only.append((t, via))
        if build.min_cc and t.cc < cc_tuple(build.min_cc):
            misses.append(
                f"{{R}} {v} supports compute capability >= {build.min_cc} (the framework's "
                f"documented minimum); {t.label} is {t.arch.cc}"
            )
    misses.extend(_cudnn_misses(ctx, build))

    floors, driver_misses = _driver_floors(ctx, build, cuda_row, ptx_only)
    misses.extend(driver_misses)
    return misses, floors, cuda_row, tuple(ptx_only), rows


def _cudnn_misses(ctx: _Ctx, build: FrameworkBuild) -> list[str]:
    """The build's cuDNN (for a range: every cuDNN of the range) against the targets."""
    plan = _plan_cudnn(ctx, build)
    if plan.version is not None or plan.newest is None:
        return []
    row = plan.newest
    bad = [t for t in ctx.targets if not _cudnn_supports(row, t.cc)] or list(ctx.targets)
    t = bad[0]
    span = f"compute capability {row.min_cc or '?'} to {row.max_cc or 'newer'}"
    if build.cudnn_range:
        return [
            f"{{R}} {build.variant} installs cuDNN {build.cudnn_range}: no cuDNN in that range "
            f"supports {t.label} ({t.arch.cc}); the newest, {row.version}, supports {span}"
        ]
    return [
        f"{{R}} {build.variant} uses cuDNN {build.cudnn}, which supports {span}; {t.label} is "
        f"{t.arch.cc}"
    ]


def _driver_floors(
    ctx: _Ctx,
    build: FrameworkBuild,
    cuda_row: CudaRelease,
    ptx_only: Sequence[tuple[_Target, str]],
) -> tuple[Floors | None, list[str]]:
    """The driver floor the build relies on with the oldest target driver (None = too old),
    and why not. PTX-only targets need the toolkit floor (module docstring)."""
    v = build.variant
    misses: list[str] = []
    toolkit = cuda_row.toolkit_driver
    mvc = cuda_row.minor_compat_driver
    # Early 11.0 releases have a toolkit floor below the 11.x MVC floor (450.51.05 <
    # 450.80.02, Table 3): then the toolkit floor is both lower and full-featured.
    needs_toolkit = (
        ctx.policy == "strict"
        or bool(ptx_only)
        or mvc is None
        or _version(toolkit) <= _version(mvc)
    )
    floors: Floors | None = None
    if ctx.driver is None:
        floors = Floors(toolkit, mvc, "toolkit" if needs_toolkit else "minor_compat")
    elif _meets(ctx.driver, toolkit):
        floors = Floors(toolkit, mvc, "toolkit")
    elif not needs_toolkit and mvc is not None and _meets(ctx.driver, mvc):
        floors = Floors(toolkit, mvc, "minor_compat")
    else:
        cuda = cuda_row.version
        oldest = f"the oldest target driver is {ctx.driver}"
        if mvc is not None and not _meets(ctx.driver, mvc):
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
    return floors, misses


def _check_os(
    ctx: _Ctx, release: FrameworkRelease, build: FrameworkBuild, osimg: OsImage
) -> tuple[list[str], CudaImage | None, str, CudaImage | None, list[str]]:
    """OS-level checks: Python and base image. Returns (misses, image, flavour, builder, notes)."""
    fw = ctx.framework
    managed = _managed_build(ctx)
    # A managed Python's GIL minor ("3.14" of "3.14t"; its cp314t wheels: `_python_miss`).
    py = (free_threaded_minor(managed.python) or managed.python) if managed else osimg.python
    misses: list[str] = []
    notes: list[str] = []
    if not _in_range(py, release.python):
        misses.append(
            f"{{R}} supports Python {release.python}; {osimg.os} ships Python {py}"
            if not ctx.python
            else f"{{R}} supports Python {release.python}, not {py}"
        )
    elif build.python and not _in_range(py, build.python):
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
                f"no nvidia/cuda {_major_minor(build.cuda)[0]}.{_major_minor(build.cuda)[1]} base image for "
                f"{osimg.os}: using {osimg.image}, CUDA comes from the {fw} wheels"
            )
        else:
            flavour = "base"
    elif flavour in CUDA_FLAVOURS:
        image = _cuda_image(ctx.matrix, build.cuda, osimg.os, flavour)
        if image is None:
            mm = _major_minor(build.cuda)
            misses.append(
                f"{{R}} {build.variant}: the matrix has no nvidia/cuda {mm[0]}.{mm[1]} "
                f"{flavour} image for {osimg.os}"
            )
            return misses, None, flavour, None, notes
    builder: CudaImage | None = None
    if ctx.request.compile_extensions:
        # nvcc from a devel image, else (flavour plain, or no devel image for this OS) from
        # NVIDIA's toolkit wheels, which hold it from CUDA 13.0 on (envbuild/cuda/extensions.py,
        # imported only here: with cudawheels it is no part of a plain resolve).
        from envbuild.cuda.extensions import wheels_have_nvcc

        if flavour != "plain":
            builder = _cuda_image(ctx.matrix, build.cuda, osimg.os, "devel")
        mm = _major_minor(build.cuda)
        if builder is None and not wheels_have_nvcc(build.cuda):
            misses.append(
                f"{{R}} {build.variant}: compiling CUDA extensions needs an nvidia/cuda "
                f"{mm[0]}.{mm[1]} devel image for {osimg.os} (the matrix has none"
                + (", and flavour plain uses no nvidia/cuda image" if flavour == "plain" else "")
                + f"); NVIDIA's CUDA {mm[0]} wheels on PyPI hold no nvcc"
            )
        elif builder is None:
            notes.append(
                f"compiles CUDA extensions with NVIDIA's CUDA {mm[0]}.{mm[1]} toolkit wheels "
                f"from PyPI (nvcc, headers, CCCL) in a builder stage on {osimg.image}"
            )
    return misses, image, flavour, builder, notes


def _search(ctx: _Ctx, *, first_only: bool) -> _Outcome:
    """Every fit in preference order (only the first with first_only) and, per release,
    why none of its builds fits."""
    out = _Outcome()
    out.releases = _releases(ctx)
    if _request_wide_reasons(ctx, out):
        return out
    for release in out.releases:
        if _search_release(ctx, release, out, first_only=first_only):
            return out
    return out


def _request_wide_reasons(ctx: _Ctx, out: _Outcome) -> bool:
    """Adds the causes that exclude every release to out.global_reasons; True when nothing
    can fit whatever the release (then the per-release search is skipped)."""
    m = ctx.matrix
    fw = ctx.framework
    if not out.releases:
        allr = sorted(
            (r for r in m.releases if r.framework == fw), key=lambda r: _version(r.version)
        )
        span = f" (the matrix has {allr[0].version} to {allr[-1].version})" if allr else ""
        out.global_reasons.append(f"no {fw} release in the matrix matches {fw}{ctx.spec}{span}")
        return True

    if ctx.driver and _driver_root_causes(ctx, out):
        return True
    # A GPU needs a driver branch that knows it (see the package docstring).
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
            return True

    if (
        ctx.python
        and not ctx.os
        and not any(o.python == ctx.python for o in m.os_images)
        and _managed_build(ctx) is None
    ):
        shipped = ", ".join(f"{o.os} {o.python}" for o in sorted(m.os_images, key=lambda o: o.os))
        managed = sorted({b.python for b in m.python_builds if b.platform == ctx.request.platform})
        out.global_reasons.append(
            f"no OS image in the matrix ships {_python_words(ctx.python)} ({shipped}), and "
            f"matrix/python_builds.toml has no managed build of it for {ctx.request.platform} "
            f'(it has {", ".join(managed) or "none"}; docs/request.md, "Python")'
        )
    if free_threaded_minor(ctx.python) and not any(
        _free_threaded_ok(r, ctx.python) for r in out.releases
    ):
        out.global_reasons.append(_free_threaded_publishers(ctx))
    return False


def _free_threaded_ok(release: FrameworkRelease, python: str | None) -> bool:
    """The release publishes free-threaded wheels for this Python ("3.14t": cp314t)."""
    minor = free_threaded_minor(python)
    return bool(minor and release.free_threaded and _in_range(minor, release.free_threaded))


def _free_threaded_publishers(ctx: _Ctx) -> str:
    """No release in range has the free-threaded wheels asked for: which releases do."""
    assert ctx.python is not None
    tag = "cp" + ctx.python.replace(".", "")
    fw = ctx.framework
    mine = [r.version for r in ctx.matrix.releases_of(fw) if _free_threaded_ok(r, ctx.python)]
    if mine:
        ordered = sorted(mine, key=_version)
        span = ordered[0] if len(ordered) == 1 else f"{ordered[0]} to {ordered[-1]}"
        return f"no {fw} release in {fw}{ctx.spec} publishes {tag} wheels; {fw} {span} do"
    others = sorted(
        {r.framework for r in ctx.matrix.releases if _free_threaded_ok(r, ctx.python)} - {fw}
    )
    where = f"; in the matrix only {', '.join(others)} does" if others else ""
    return f"no {fw} release in the matrix publishes free-threaded {tag} wheels{where}"


def _python_words(python: str) -> str:
    """ "Python 3.9", or "a free-threaded Python 3.14t" with why no OS row has one."""
    if free_threaded_minor(python) is None:
        return f"Python {python}"
    return (
        f"a free-threaded Python {python} (Debian packages none: "
        "https://lists.debian.org/debian-python/2025/11/msg00002.html)"
    )


def _driver_root_causes(ctx: _Ctx, out: _Outcome) -> bool:
    """Causes that lie in the driver alone, said first: a GPU its branch no longer supports
    (True: the host cannot exist), or a driver below every floor of the framework's builds."""
    assert ctx.driver is not None
    retired = [
        t
        for t in ctx.targets
        if t.arch.last_driver_branch is not None and _branch(ctx.driver) > t.arch.last_driver_branch
    ]
    for t in retired:
        out.global_reasons.append(
            f"driver {ctx.driver} cannot run {t.label}: R{t.arch.last_driver_branch} is the last "
            f"driver branch that supports {t.arch.family} GPUs (NVIDIA's CUDA Toolkit, Driver, "
            "and Architecture Matrix); a host with this GPU runs driver branch "
            f"{t.arch.last_driver_branch} or older"
        )
    if retired:
        return True
    floors = [
        (min(row.minor_compat_driver or row.toolkit_driver, row.toolkit_driver, key=_version), row)
        for b in ctx.matrix.builds
        if b.framework == ctx.framework
        and b.cuda
        and ctx.request.platform in b.platforms
        and (row := _cuda_row(ctx.matrix, b.cuda)) is not None
    ]
    if floors and not any(_meets(ctx.driver, f) for f, _ in floors):
        low, row = min(floors, key=lambda x: _version(x[0]))
        major = _major_minor(row.version)[0]
        how = "toolkit floor" if low == row.toolkit_driver else "minor-version compatibility"
        out.global_reasons.append(
            f"driver {ctx.driver} is below every driver floor of the {ctx.framework} GPU builds "
            f"in the matrix: the lowest is {low} (CUDA {major}.x {how}); the details per "
            "release follow"
        )
    return False


def _python_miss(ctx: _Ctx, release: FrameworkRelease) -> str:
    """Why the requested Python rules the release out ("" when it does not). A free-threaded
    Python ("3.14t") needs the release's free-threaded wheels (cp314t), not its GIL ones."""
    if not ctx.python:
        return ""
    minor = free_threaded_minor(ctx.python)
    if minor is None:
        if _in_range(ctx.python, release.python):
            return ""
        return f"{{R}} supports Python {release.python}; requested {ctx.python}"
    tag = "cp" + minor.replace(".", "") + "t"
    if release.free_threaded and _in_range(minor, release.free_threaded):
        if any(o.python == ctx.python for o in ctx.matrix.os_images) or _managed_build(ctx):
            return ""
        return (
            f"{{R}}: {tag} wheels exist, but no OS image ships a free-threaded Python and "
            f"matrix/python_builds.toml has no managed {ctx.python} for {ctx.request.platform}"
        )
    has = (
        f" (free-threaded wheels for Python {release.free_threaded} only)"
        if release.free_threaded
        else ""
    )
    return f"the matrix records no free-threaded {tag} wheels of {{R}}{has}"


def _search_release(
    ctx: _Ctx, release: FrameworkRelease, out: _Outcome, *, first_only: bool
) -> bool:
    """The release's builds x OSes: fits go to out.fits, or its reasons to out.misses; True
    when first_only and a fit was found."""
    python_miss = _python_miss(ctx, release)
    if python_miss:
        out.misses[release.version] = [python_miss]
        return False
    builds = _builds(ctx, release)
    if not builds:
        what = "CPU" if ctx.device == "cpu" else "GPU"
        extra = f" variant {', '.join(ctx.variants)}" if ctx.variants else ""
        out.misses[release.version] = [
            f"{{R}} has no {what} build{extra} for {ctx.request.platform} in the matrix"
        ]
        return False
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
                    python_build=_managed_build(ctx),
                )
            )
            if first_only:
                return True
            break
        else:
            if not os_misses:
                os_misses.append("{R} " + build.variant + ": no OS image fits")
            per_build.append((build, os_misses))
    if len(per_build) == len(builds):
        out.misses[release.version] = _explain_release(ctx, release, per_build)
    return False


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
        first = min(covering, key=lambda x: (x[0], _version(x[1].cuda or "0")))
        last = max(covering, key=lambda x: (x[0], _version(x[1].cuda or "0")))
        if _version(release.version) < first[0]:
            if a.first_cuda:
                parts.append(f"{a.sm} needs CUDA >= {_short(a.first_cuda)}")
            parts.append(f"first in {fw} {_series(first[1], first[2])} {first[1].variant}")
        elif _version(release.version) > last[0]:
            if a.last_cuda:
                parts.append(f"{a.sm} needs CUDA <= {_short(a.last_cuda)}")
            parts.append(f"last in {fw} {_series(last[1], last[2])} {last[1].variant}")
    else:
        parts.append(f"no {fw} build in the matrix carries {a.sm} kernels or PTX for it")
        jetpack = next(
            (
                row
                for label in t.labels
                if (row := host_platform_of(ctx.matrix, label)) and row.jetpack_index
            ),
            None,
        )
        if jetpack is not None:
            parts.append(
                f"builds for {t.label} exist only in NVIDIA's JetPack index "
                f"({jetpack.jetpack_index}), which the matrix does not model"
            )
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
        (_version(r.version), b, r)
        for r in ctx.matrix.releases
        if r.framework == fw and not r.yanked
        for b in builds
        if _in_range(r.version, b.versions)
    ]
