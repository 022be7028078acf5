"""The builder stage of a lock with source packages (pure): the template values and the build
context files that compile them (`templates/devel.Dockerfile.j2`, `templates/framework.Dockerfile.j2`
on a framework base, `templates/build-extensions.sh`).

Three hash-checked requirement sets, none of which reaches the final stage except through the
wheels built from them: the toolchain (NVIDIA's CUDA toolkit wheels, `pip install --target`
outside the venv), the sdists' build requirements that the image itself does not hold (on
PYTHONPATH during the build only), and one file per sdist, compiled with
`--no-build-isolation` so it builds against the venv's own, locked torch. When every sdist is
pure Python (`[build] toolchain = "none"`), the builder is the image's own base with no
compiler, and there is no toolchain.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from envbuild.core import resources
from envbuild.core.models import Lock, LockedPackage
from envbuild.core.values import check_hash, check_match, check_package_name, check_version
from envbuild.core.versions import major_minor
from envbuild.cuda import extensions

SCRIPT = "build-extensions.sh"
TOOLCHAIN_DIR = "/opt/envbuild/toolchain"
BUILD_DEPS_DIR = "/opt/envbuild/build-deps"
DEVEL_CUDA_HOME = "/usr/local/cuda"
"""Where nvidia/cuda devel images keep the toolkit."""
_ARCH_LIST = re.compile(r"[0-9]+\.[0-9]+[af]?(\+PTX)?( [0-9]+\.[0-9]+[af]?(\+PTX)?)*")
_CMAKE_ARCHS = re.compile(r"[0-9]+[af]?(-real|-virtual)?(;[0-9]+[af]?(-real|-virtual)?)*")


def template_values(lock: Lock, python: str) -> dict[str, Any]:
    """What the devel template needs to compile source packages ({"build": False} without)."""
    build = lock.build
    if build is None:
        return {"build": False, "build_sources_only": False}
    if build.toolchain == "none":
        return _pure_values(lock)
    arch_list = check_match(
        _ARCH_LIST, extensions.torch_cuda_arch_list(build.cuda_archs), "arch list", "bad arch"
    )
    cmake = check_match(
        _CMAKE_ARCHS, extensions.cmake_cuda_architectures(build.cuda_archs), "archs", "bad arch"
    )
    wheels = build.toolchain == "wheels"
    major = major_minor(lock.stack.cuda or "0")[0]
    site = f"/opt/venv/lib/python{python}/site-packages/nvidia/cu{major}"
    return {
        "build": True,
        "build_toolchain": build.toolchain,
        "build_has_deps": bool(_build_deps(lock)),
        # Every extra package is compiled: requirements.lock pins nothing to install.
        "build_sources_only": all(p.sdist for p in lock.packages),
        "torch_cuda_arch_list": arch_list,
        "cmake_cuda_architectures": cmake,
        "cuda_home": f"{TOOLCHAIN_DIR}/nvidia/cu{major}" if wheels else DEVEL_CUDA_HOME,
        # The runtime libraries' headers (cuBLAS, cuSPARSE, ...) that torch's CUDA headers
        # include: in the venv's CUDA wheels, not in the toolchain's.
        "cuda_cpath": f"{site}/include" if wheels else "",
        "toolchain_dir": TOOLCHAIN_DIR,
        "build_deps_dir": BUILD_DEPS_DIR,
        "build_gib_per_job": extensions.GIB_PER_JOB,
    }


def _pure_values(lock: Lock) -> dict[str, Any]:
    """Only pure-Python sdists: their wheels are built with the image's own Python (no
    compiler, no CUDA toolkit, no arch list)."""
    return {
        "build": True,
        "build_toolchain": "none",
        "build_has_deps": bool(_build_deps(lock)),
        "build_sources_only": all(p.sdist for p in lock.packages),
        "torch_cuda_arch_list": "",
        "cmake_cuda_architectures": "",
        "cuda_home": "",
        "cuda_cpath": "",
        "toolchain_dir": TOOLCHAIN_DIR,
        "build_deps_dir": BUILD_DEPS_DIR,
        "build_gib_per_job": extensions.GIB_PER_JOB,
    }


def _toolchain(lock: Lock) -> list[LockedPackage]:
    assert lock.build is not None
    names = set(lock.build.toolchain_packages)
    pool = {p.name: p for p in (*lock.packages, *lock.build.packages)}
    return [pool[n] for n in sorted(names) if n in pool]


def _build_deps(lock: Lock) -> list[LockedPackage]:
    assert lock.build is not None
    toolchain = set(lock.build.toolchain_packages)
    return [p for p in lock.build.packages if p.name not in toolchain]


def _requirements(title: str, packages: Sequence[LockedPackage]) -> bytes:
    lines = [f"# {title} (from envbuild.lock [build]; installed with --require-hashes)"]
    for p in sorted(packages, key=lambda p: p.name):
        name = check_package_name(p.name)
        version = check_version(p.version, f"version of {name}")
        hashes = sorted(check_hash(h, f"hash of {name}") for h in p.hashes)
        lines.append(f"{name}=={version} \\")
        lines += [f"    --hash={h} \\" for h in hashes[:-1]]
        lines.append(f"    --hash={hashes[-1]}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def cache_key(lock: Lock, package: LockedPackage) -> str:
    """What decides a built wheel: the sdist, the torch (or framework) it compiles against,
    the arch list and the toolchain pins. Same key = the same wheel can be reused."""
    assert lock.build is not None
    fw = lock.stack.framework
    parts = [
        *sorted(package.hashes),
        f"{fw.name}=={next((p.version for p in lock.packages if p.name == fw.name), fw.version)}",
        " ".join(lock.build.cuda_archs),
        *(f"{p.name}=={p.version}" for p in _toolchain(lock)),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def context_files(lock: Lock) -> dict[str, bytes]:
    """The builder's files in the build context (none for a lock without source packages)."""
    if lock.build is None:
        return {}
    files = {SCRIPT: (resources.templates_dir() / SCRIPT).read_bytes()}
    if lock.build.toolchain == "wheels":
        files["toolchain.lock"] = _requirements("the CUDA toolchain", _toolchain(lock))
    deps = _build_deps(lock)
    if deps:
        files["build-requirements.lock"] = _requirements("build requirements", deps)
    for p in lock.packages:
        if p.sdist:
            files[f"sources/{p.name}-{cache_key(lock, p)}.lock"] = _requirements(
                f"{p.name}, {'built' if p.pure else 'compiled'} from its sdist", [p]
            )
    return files


def source_names(lock: Lock) -> frozenset[str]:
    """Packages built from source: not in requirements.lock (the builder compiles them)."""
    return frozenset(p.name for p in lock.packages if p.sdist)
