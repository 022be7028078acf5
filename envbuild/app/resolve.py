"""The `envbuild resolve` use case: flags and hosts -> Request; matrix -> the stack, or why
nothing fits. The choice itself is `envbuild.resolver`'s (pure).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from envbuild import matrix as matrix_data
from envbuild import resolver
from envbuild.core.errors import NoGpuError
from envbuild.core.models import Host, Stack, Unsatisfiable
from envbuild.matrix import Matrix
from envbuild.request.parse import request_from_flags

if TYPE_CHECKING:
    from pathlib import Path  # annotations only: a resolve without --hosts never imports it


def resolve(
    *,
    framework: str = "torch",
    python: str | None = None,
    gpus: Sequence[str] = (),
    driver: str | None = None,
    cuda: str | None = None,
    host: bool = False,
    os_name: str | None = None,
    flavour: str = "auto",
    cpu: bool = False,
    strict_compat: bool = False,
    compile_extensions: bool = False,
    platform: str = "x86_64",
    framework_index: str = "auto",
    hosts: Sequence[Host] = (),
    hosts_files: Sequence[Path] = (),
    matrix: Matrix | None = None,
    matrix_overlay: Path | None = None,
) -> Stack | Unsatisfiable:
    """The stack for these targets, or why nothing fits (exit 1 in the CLI).

    `host=True` adds this machine's GPUs and driver (NVML; NoGpuError, exit 2, without a
    driver); `hosts` and `hosts_files` (host facts written by `envbuild doctor --json`) add
    other hosts. Bad input raises UserError (exit 2).
    """
    all_hosts = list(hosts)
    if hosts_files or host:
        from envbuild.host import (
            probe as hostinfo,  # probing and facts files only (its imports are many)
        )
    for path in hosts_files:
        all_hosts.extend(hostinfo.host_from_facts(f) for f in hostinfo.load_facts_file(path))
    if host:
        all_hosts.append(_this_host())
    if matrix is None:
        matrix = matrix_data.load_matrix_from(matrix_overlay)
    request = request_from_flags(
        framework=framework,
        python=python,
        gpus=tuple(gpus),
        driver=driver,
        cuda=cuda,
        os_name=os_name,
        flavour=flavour,
        cpu=cpu,
        strict_compat=strict_compat,
        compile_extensions=compile_extensions,
        platform=platform,
        framework_index=framework_index,
    )
    return resolver.resolve(request, matrix, all_hosts)


def _this_host() -> Host:
    from envbuild.host import probe as hostinfo

    try:
        return hostinfo.probe_host()
    except NoGpuError as err:
        raise NoGpuError(
            err.message,
            hint=f"{err.hint}; or resolve for other hosts by naming their GPUs and oldest "
            "driver: --gpu H100 --driver 570.124.06",
            fields=err.fields,
        ) from None
