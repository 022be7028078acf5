"""The request (already checked by `envbuild.request.parse.check_request`) against the matrix and
the hosts: framework, variants, OS, target GPUs and the oldest driver."""

from __future__ import annotations

from collections.abc import Sequence

from envbuild.core.errors import UserError
from envbuild.core.models import (
    Host,
    Request,
)
from envbuild.core.versions import parse_version
from envbuild.cuda.archs import ArchRules, cc_tuple
from envbuild.matrix import (
    Arch,
    Matrix,
)
from envbuild.request.parse import parse_framework_requirement
from envbuild.resolver.context import (
    _Ctx,
    _Target,
    _version,
)
from envbuild.resolver.gpus import host_platform_of, parse_gpu


def _framework_names(matrix: Matrix) -> list[str]:
    return sorted({r.framework for r in matrix.releases})


def _prepare(
    request: Request,
    matrix: Matrix,
    hosts: Sequence[Host],
    unreachable: frozenset[str] = frozenset(),
    words: str = "flags",
) -> _Ctx:
    """The request (already checked by `request.check_request`) against the matrix and the
    hosts; UserError (exit 2) for a framework, variant, OS or GPU the matrix does not know."""
    name, variants, spec = _framework_of(request, matrix)
    flavour = request.flavour or "auto"
    device = "cpu" if (request.device == "cpu" or flavour == "cpu") else "cuda"
    if device == "cpu":
        flavour = "cpu"
    python = request.python
    _check_os_asked(matrix, request.os, python, request.platform)
    targets, driver = _targets(request, matrix, hosts)
    notes: list[str] = []
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
        os=request.os,
        cuda_spec=request.cuda,
        policy=request.compat,
        pre_notes=tuple(notes),
        framework_index=request.indexes.framework_index,
        unreachable=unreachable,
        words=words,
    )


def _framework_of(request: Request, matrix: Matrix) -> tuple[str, tuple[str, ...], str]:
    """(framework name, variant filter from its extras, specifier text), known to the matrix."""
    text = request.framework.strip() or "torch"
    name, extras, spec = parse_framework_requirement(text)
    known = _framework_names(matrix)
    if name not in known:
        raise UserError(
            f"unknown framework {text.split('[')[0].strip()!r}",
            hint="the matrix knows: "
            + ", ".join(known)
            # PyTorch's package is `torch`; `pytorch` on PyPI is a placeholder that fails.
            + (" (PyTorch is `torch`: --framework torch)" if "pytorch" in name else ""),
        )
    if extras:
        all_variants = {b.variant for b in matrix.builds if b.framework == name}
        unknown = sorted(set(extras) - all_variants)
        if unknown:
            raise UserError(
                f"{name} has no variant {', '.join(unknown)}",
                hint=f"{name} variants: " + ", ".join(sorted(all_variants)),
            )
    return name, extras, spec


def _check_os_asked(
    matrix: Matrix, os_name: str | None, python: str | None, platform: str = "x86_64"
) -> None:
    """The OS asked for is in the matrix and ships the Python asked for (a managed Python is
    only for a request that leaves the OS to the resolver: docs/request.md, "Python")."""
    if os_name is None:
        return
    os_image = next((o for o in matrix.os_images if o.os == os_name), None)
    if os_image is None:
        os_names = sorted(o.os for o in matrix.os_images)
        raise UserError(f"unknown OS {os_name!r}", hint="choose one of: " + ", ".join(os_names))
    if python is not None and os_image.python != python:
        shipping = [o.os for o in matrix.os_images if o.python == python]
        if shipping:
            way_out = f"use --os {shipping[0]} (ships Python {python})"
        elif matrix.python_build(python, platform) is not None:
            way_out = f"drop --os to get a managed Python {python} (python-build-standalone)"
        else:
            way_out = f"no OS in the matrix ships Python {python}"
        raise UserError(
            f"{os_name} ships Python {os_image.python}, not {python}",
            hint=f"{way_out}, or drop --python to use {os_image.python}",
        )


def _targets(
    request: Request, matrix: Matrix, hosts: Sequence[Host]
) -> tuple[tuple[_Target, ...], str | None]:
    """The GPUs the user named plus every host's GPUs; the driver is the oldest of all."""
    labels: dict[str, list[str]] = {}
    archs: dict[str, Arch] = {}

    def add(arch: Arch, label: str) -> None:
        archs[arch.cc] = arch
        names = labels.setdefault(arch.cc, [])
        if label and label not in names:
            names.append(label)

    # Each name once, as first written (the first bad one is the one an error names): a fleet
    # repeats its GPUs, and `add` keeps one label per name anyway (benchmarks/scale.py).
    written: dict[str, str] = {}
    for gpu_text in request.targets.gpus:
        written.setdefault(gpu_text.strip(), gpu_text)
    for label, gpu_text in written.items():
        add(parse_gpu(matrix, gpu_text), label)
        _check_host_platform(matrix, label, request.platform)
    drivers: list[str] = []
    if request.targets.driver:
        drivers.append(request.targets.driver.strip())
    by_cc = {a.cc: a for a in matrix.archs}
    checked: set[str] = set()
    for host in hosts:
        if host.driver:
            parse_version(host.driver, what="driver version")
            drivers.append(host.driver.strip())
        for gpu in host.gpus:
            major, minor = cc_tuple(gpu.cc)
            host_arch = by_cc.get(gpu.cc) or by_cc.get(f"{major}.{minor}")
            if host_arch is None:
                raise UserError(
                    f"{gpu.name} has compute capability {gpu.cc}, which the matrix does not know",
                    hint="update envbuild, or add the architecture in a matrix overlay "
                    "(ENVBUILD_MATRIX_OVERLAY)",
                )
            add(host_arch, gpu.name)
            if gpu.name not in checked:
                checked.add(gpu.name)
                _check_host_platform(matrix, gpu.name, request.platform)
    rules = ArchRules.from_archs(matrix.archs)
    targets = tuple(
        _Target(arch=archs[cc], labels=tuple(labels[cc]), rules=rules)
        for cc in sorted(archs, key=lambda c: cc_tuple(c))
    )
    driver = min(drivers, key=_version) if drivers else None
    return targets, driver


def _check_host_platform(matrix: Matrix, gpu: str, platform: str) -> None:
    """A GPU that only comes in hosts of another CPU architecture (GH200: Grace, aarch64)
    needs an image for that platform: an x86_64 image would not start there."""
    row = host_platform_of(matrix, gpu)
    if row is None or row.platform == platform:
        return
    raise UserError(
        f"{gpu} is in {row.platform} hosts, but the image is for {platform}",
        hint=f"build for its hosts: --platform {row.platform} (envbuild.toml: "
        f'[image] platform = "{row.platform}")',
        fields={"gpu": gpu, "platform": row.platform},
    )
