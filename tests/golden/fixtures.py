"""Hand-built locks for render tests and golden files, one per flavour, independent of the
example folders (whose locks come from `envbuild lock`). Values mirror the shapes the
resolver and locker write: nvidia/cuda tag scheme, NVIDIA_REQUIRE_CUDA syntax, sha256 pins.
"""

from __future__ import annotations

import dataclasses
import hashlib

from envbuild.core.models import (
    FRAMEWORK_FLAVOUR,
    BaseFacts,
    BaseImage,
    ExtensionBuild,
    Floors,
    FrameworkPick,
    Indexes,
    LockedPackage,
    ProjectSettings,
    SmokeSettings,
    Stack,
    Targets,
)
from envbuild.core.models import Lock as Lock


def fake_sha(seed: str) -> str:
    """A well-formed, stable sha256 pin for a fixture package (not a real file's hash)."""
    return "sha256:" + hashlib.sha256(seed.encode()).hexdigest()


def _pkg(name: str, version: str, source: str = "https://pypi.org/simple") -> LockedPackage:
    hashes = tuple(sorted({fake_sha(f"{name}-{version}-a"), fake_sha(f"{name}-{version}-b")}))
    return LockedPackage(name=name, version=version, hashes=hashes, source=source)


TORCH_INDEX = "https://download.pytorch.org/whl/cu128"


def gpu_lock() -> Lock:
    """torch 2.7.1+cu128 wheels on nvidia/cuda 12.8.1 base, ubuntu24.04 (the default shape)."""
    base = BaseImage(
        ref="nvidia/cuda:12.8.1-base-ubuntu24.04",
        flavour="base",
        os="ubuntu24.04",
        require_cuda="cuda>=12.0",
    )
    stack = Stack(
        framework=FrameworkPick(
            name="torch",
            version="2.7.1",
            variant="cu128",
            requirement="torch==2.7.1",
            index_url=TORCH_INDEX,
            pypi_default=False,
        ),
        cuda="12.8.1",
        cudnn="9.7.1",
        nccl="2.26.2",
        python="3.12",
        os="ubuntu24.04",
        flavour="base",
        base_image=base,
        archs=("sm_100", "sm_120", "sm_80", "sm_90"),
        target_archs=("sm_90",),
        floors=Floors(toolkit="570.124.06", minor_compat="525.60.13", relied_on="minor_compat"),
        rows=("cuda:12.8.1",),
    )
    return Lock(
        name="torch-train",
        input_hash="sha256:" + "0" * 64,
        stack=stack,
        targets=Targets(gpus=("H100",), driver="535.104.05"),
        platform="x86_64",
        indexes=Indexes(),
        smoke=SmokeSettings(),
        base_digest="sha256:" + "ab" * 32,
        packages=(
            _pkg("torch", "2.7.1+cu128", TORCH_INDEX),
            _pkg("filelock", "3.18.0"),
            _pkg("nvidia-cublas-cu12", "12.8.3.14"),
            _pkg("numpy", "2.2.6"),
        ),
    )


def cpu_lock() -> Lock:
    """torch CPU wheels on a plain Debian image: no toolkit variables."""
    g = gpu_lock()
    cpu_index = "https://download.pytorch.org/whl/cpu"
    stack = dataclasses.replace(
        g.stack,
        framework=dataclasses.replace(
            g.stack.framework, variant="cpu", index_url=cpu_index, requirement="torch==2.7.1"
        ),
        cuda=None,
        cudnn=None,
        nccl=None,
        python="3.11",
        os="debian12",
        flavour="cpu",
        base_image=BaseImage(ref="debian:bookworm-slim", flavour="cpu", os="debian12"),
        archs=(),
        target_archs=(),
        floors=None,
    )
    return dataclasses.replace(
        g,
        name="torch-cpu",
        stack=stack,
        base_digest=None,
        packages=(_pkg("torch", "2.7.1+cpu", cpu_index), _pkg("numpy", "2.2.6")),
    )


def cpu_uv_lock() -> Lock:
    """The CPU lock with its installer pinned (uv): the image installs with uv."""
    return dataclasses.replace(cpu_lock(), installer=(_pkg("uv", "0.13.9"),))


def devel_lock() -> Lock:
    """A request that compiles CUDA extensions: devel builder, slim base final stage."""
    g = gpu_lock()
    base = dataclasses.replace(g.stack.base_image, builder="nvidia/cuda:12.8.1-devel-ubuntu24.04")
    stack = dataclasses.replace(g.stack, base_image=base)
    return dataclasses.replace(
        g,
        name="torch-ext",
        stack=stack,
        packages=(*g.packages, _pkg("flash-attn", "2.8.0.post2")),
    )


def plain_lock() -> Lock:
    """CUDA only from wheels on a plain Ubuntu image, with a mirror index and extra indexes."""
    g = gpu_lock()
    base = BaseImage(
        ref="ubuntu:22.04", flavour="plain", os="ubuntu22.04", require_cuda="cuda>=12.0"
    )
    stack = dataclasses.replace(
        g.stack, python="3.10", os="ubuntu22.04", flavour="plain", base_image=base
    )
    return dataclasses.replace(
        g,
        name="torch-slim",
        stack=stack,
        base_digest=None,
        indexes=Indexes(
            index_url="https://mirror.example.com/pypi/simple",
            extra_index_urls=("https://extra.example.com/simple",),
        ),
    )


def project_lock() -> Lock:
    """The GPU lock with a project's code copied, not installed (a plain folder of scripts),
    its own command and smoke step."""
    return dataclasses.replace(
        gpu_lock(),
        project=ProjectSettings(
            path="../../app", install=False, command=("python", "train.py", "--epochs", "3")
        ),
        smoke=SmokeSettings(command=("python", "train.py", "--epochs", "1", "--steps", "5")),
    )


def pure_sdist_lock() -> Lock:
    """The GPU lock with a pure-Python package that only an sdist provides (no compiled code,
    no compile_extensions): its wheel is built in a plain builder stage FROM the same base."""
    g = gpu_lock()
    sdist = dataclasses.replace(
        _pkg("envbuild-puredep", "0.6.0"),
        hashes=(fake_sha("envbuild_puredep-0.6.0.tar.gz"),),
        sdist=True,
        build_requires=("flit_core>=3.2,<4",),
        pure=True,
    )
    return dataclasses.replace(
        g,
        name="torch-pure-sdist",
        packages=(*g.packages, sdist, _pkg("packaging", "25.0")),
        build=ExtensionBuild(
            toolchain="none", cuda_archs=(), packages=(_pkg("flit-core", "3.12.0"),)
        ),
    )


NGC_REF = "nvcr.io/nvidia/pytorch:25.09-py3"


def framework_lock() -> Lock:
    """A framework base (an NGC PyTorch container): its torch, CUDA and Python, as probed."""
    facts = BaseFacts(
        source="probe",
        framework="torch",
        framework_version="2.9.0a0+50eac811a6.nv25.09",
        cuda="13.0",
        cudnn="9.13.0",
        nccl="2.27.7",
        archs=("compute_120", "sm_100", "sm_110", "sm_120", "sm_80", "sm_86", "sm_90"),
        python="3.12",
        python_path="/usr/bin/python",
        os="ubuntu24.04",
        image_id="sha256:" + "1" * 64,
        packages=(("ninja", "1.13.0"), ("setuptools", "78.1.1"), ("torch", "2.9.0a0")),
    )
    base = BaseImage(
        ref=NGC_REF, flavour=FRAMEWORK_FLAVOUR, os="ubuntu24.04", require_cuda="cuda>=13.0"
    )
    g = gpu_lock()
    stack = dataclasses.replace(
        g.stack,
        framework=FrameworkPick(
            name="torch",
            version=facts.framework_version,
            variant="base",
            requirement=f"torch=={facts.framework_version}",
            pypi_default=False,
        ),
        cuda="13.0",
        python="3.12",
        flavour=FRAMEWORK_FLAVOUR,
        base_image=base,
        archs=facts.archs,
        target_archs=("sm_90",),
    )
    return dataclasses.replace(
        g, name="ngc-torch", stack=stack, packages=(), base_facts=facts, base_digest=None
    )


def framework_ext_lock() -> Lock:
    """A framework base compiling a CUDA extension from its sdist with the base's own nvcc
    and torch, with one extra wheel and one build requirement the base lacks."""
    f = framework_lock()
    sdist = dataclasses.replace(
        _pkg("envbuild-vecadd", "0.1.0", "wheels"),
        sdist=True,
        build_requires=("ninja", "setuptools>=77", "torch", "wheel"),
    )
    return dataclasses.replace(
        f,
        name="ngc-torch-ext",
        packages=(sdist, _pkg("einops", "0.8.1")),
        build=ExtensionBuild(
            toolchain="devel",
            cuda_archs=("sm_90", "compute_90"),
            packages=(_pkg("wheel", "0.45.1"),),
        ),
    )


def framework_project_lock() -> Lock:
    """A framework base with a project installed (--no-deps; its build backend is the base's
    setuptools) and its own command and smoke step."""
    return dataclasses.replace(
        framework_lock(),
        name="ngc-torch-project",
        packages=(_pkg("tqdm", "4.67.1"),),
        project=ProjectSettings(path=".", install=True, command=("python", "-m", "train")),
        smoke=SmokeSettings(command=("python", "-m", "train", "--steps", "5")),
    )


FIXTURES = {
    "fixture-gpu": gpu_lock,
    "fixture-cpu": cpu_lock,
    "fixture-devel": devel_lock,
    "fixture-plain": plain_lock,
    "fixture-project": project_lock,
    "fixture-framework-ext": framework_ext_lock,
    "fixture-framework-project": framework_project_lock,
    "fixture-pure-sdist": pure_sdist_lock,
}
