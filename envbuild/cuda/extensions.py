"""CUDA extensions built from source (pure): what to compile for, with which toolchain, and what
an sdist says about itself.

- Architectures: a cubin for each target GPU of the lock, and PTX of the newest target only
  where the framework build itself ships PTX (the image then reaches newer GPUs the way its
  framework does); `TORCH_CUDA_ARCH_LIST` and `CMAKE_CUDA_ARCHITECTURES` spell the same list
  (https://pytorch.org/docs/stable/cpp_extension.html, "TORCH_CUDA_ARCH_LIST";
  https://cmake.org/cmake/help/latest/prop_tgt/CUDA_ARCHITECTURES.html, `-real`/`-virtual`).
- Toolchain: nvcc of an `nvidia/cuda` devel builder image, or NVIDIA's CUDA toolkit wheels from
  PyPI through the `cuda-toolkit` meta-package (`[nvcc,cccl]` extras), matched to the CUDA
  wheels the framework pins. The `nvidia-cuda-nvcc` wheels hold the nvcc driver, cudafe++,
  fatbinary and nvlink from CUDA 13.0 on; the CUDA 12 `nvidia-cuda-nvcc-cu12` wheels hold
  only ptxas and libnvvm (https://pypi.org/simple/nvidia-cuda-nvcc/ and
  https://pypi.org/simple/nvidia-cuda-nvcc-cu12/: compare the file lists), so CUDA 12 stacks
  compile on a devel image.
- An sdist's metadata: PKG-INFO (core metadata; trusted as static from 2.2 when it does not
  mark Requires-Dist dynamic, PEP 643) or pyproject.toml's [project] table (PEP 621), and its
  `[build-system] requires` (PEP 518; without one, pip assumes setuptools>=40.8.0:
  https://pip.pypa.io/en/stable/reference/build-system/pyproject-toml/), and whether it holds
  compiled code at all (`compiled_code`: its file list, setup.py text and build backend; a
  pure-Python sdist is only turned into a wheel, with no compiler). Read from the bytes, never
  by running the build backend.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from envbuild.core.models import LockedPackage
from envbuild.core.versions import major_minor
from envbuild.cuda.archs import parse_arch, sort_archs
from envbuild.cuda.wheels import TOOLKIT_WHEEL

NVCC_WHEELS_FROM = (13, 0)
"""The first CUDA whose PyPI nvcc wheel holds the compiler driver (module docstring)."""
GIB_PER_JOB = 3
"""Memory one parallel compile job may take: MAX_JOBS = available GiB / this (at least 1, at
most the CPUs). Files that include torch's headers take 1-2 GiB each in g++ and nvcc
(images/torch-ext measured 0.8 GiB for its binding); CUTLASS-heavy kernels take more."""
DEFAULT_BUILD_REQUIRES = ("setuptools>=40.8.0",)


def build_archs(target_archs: Sequence[str], framework_archs: Sequence[str]) -> tuple[str, ...]:
    """A cubin per target ("sm_89", "sm_90"), plus PTX of the newest target when the framework
    build carries PTX (forward compatibility as the framework has it); sorted."""
    cubins = sorted({f"sm_{a.split('_', 1)[1]}" for a in target_archs})
    if not cubins:
        return ()
    out = list(cubins)
    if any(a.startswith("compute_") for a in framework_archs):
        newest = sort_archs(cubins)[-1]
        out.append("compute_" + newest.split("_", 1)[1])
    return sort_archs(out)


def _cc_text(arch: str) -> str:
    _, major, minor, suffix = parse_arch(arch)
    return f"{major}.{minor}{suffix}"


def torch_cuda_arch_list(archs: Sequence[str]) -> str:
    """ "8.9 9.0+PTX": torch.utils.cpp_extension's spelling (a `+PTX` entry adds PTX of it)."""
    cubins = [a for a in sort_archs(archs) if a.startswith("sm_")]
    ptx = {a.split("_", 1)[1] for a in archs if a.startswith("compute_")}
    parts = [_cc_text(a) + ("+PTX" if a.split("_", 1)[1] in ptx else "") for a in cubins]
    parts += [_cc_text(f"sm_{p}") + "+PTX" for p in sorted(ptx) if f"sm_{p}" not in cubins]
    return " ".join(parts)


def cmake_cuda_architectures(archs: Sequence[str]) -> str:
    """ "89-real;90": CMake's spelling (`-real` = cubin only, bare = cubin and PTX)."""
    cubins = {a.split("_", 1)[1] for a in archs if a.startswith("sm_")}
    ptx = {a.split("_", 1)[1] for a in archs if a.startswith("compute_")}
    out = []
    for arch in sort_archs([f"sm_{n}" for n in cubins | ptx]):
        n = arch.split("_", 1)[1]
        out.append(
            n if n in cubins and n in ptx else f"{n}-real" if n in cubins else f"{n}-virtual"
        )
    return ";".join(out)


def wheels_have_nvcc(cuda: str) -> bool:
    """Whether NVIDIA's PyPI wheels of this CUDA hold nvcc (module docstring)."""
    return major_minor(cuda) >= NVCC_WHEELS_FROM


def toolchain_requirements(cuda: str, packages: Sequence[LockedPackage]) -> tuple[str, ...]:
    """What to pin as the toolchain of a CUDA `cuda` stack whose runtime pins are `packages`
    (pinned against them, so every shared component keeps its runtime version): the
    `cuda-toolkit` the framework pins, with nvcc (which brings crt, nvvm and the runtime
    headers), else the meta-package of the same CUDA minor; CCCL through the toolkit's extra,
    or the runtime's own CCCL wheel where a runtime package already pins one (nvshmem does)."""
    pinned = {p.name: p.version for p in packages}
    cccl = next((name for name in pinned if _CCCL_WHEEL.match(name)), None)
    extras = "nvcc" if cccl else "nvcc,cccl"
    if TOOLKIT_WHEEL in pinned:
        toolkit = f"{TOOLKIT_WHEEL}[{extras}]=={pinned[TOOLKIT_WHEEL]}"
    else:
        major, minor = major_minor(cuda)
        toolkit = f"{TOOLKIT_WHEEL}[{extras},cudart]=={major}.{minor}.*"
    return (toolkit, cccl) if cccl else (toolkit,)


_CCCL_WHEEL = re.compile(r"^nvidia-cuda-cccl(-cu\d+)?$")


# --- an sdist's own metadata -----------------------------------------------------------------


@dataclass(frozen=True)
class SdistMetadata:
    """What an sdist says about itself, read without building it."""

    requires_dist: tuple[str, ...]
    build_requires: tuple[str, ...]
    static: bool
    """True when the dependencies are declared static (metadata >= 2.2 without Dynamic:
    Requires-Dist, or pyproject [project] dependencies not dynamic); False = read from a
    PKG-INFO that setup.py may contradict at build time."""
    metadata_version: str
    compiled: str = ""
    """Why it holds compiled code (`compiled_code`); "" = pure Python."""
    source: str = "PKG-INFO"
    """Where `requires_dist` was read: "PKG-INFO", "pyproject.toml" or the egg-info's
    requires.txt (`REQUIRES_TXT`)."""


_MAX_MEMBER = 4 * 1024 * 1024  # PKG-INFO, pyproject.toml and setup.py are kilobytes
_READ = ("PKG-INFO", "pyproject.toml", "setup.py")
REQUIRES_TXT = "egg-info/requires.txt"
"""The key `_members` gives setuptools' `<name>.egg-info/requires.txt` (at the sdist's top or
under src/): the install_requires and extras that `setup.py egg_info` wrote when the sdist was
made, which a PKG-INFO of metadata 2.1 or older may leave out (transformers-stream-generator
0.0.5: no Requires-Dist, `transformers>=4.26.1` in requires.txt; nanoVLM's lock, 2026-12-07)."""


def _requires_txt_member(parts: Sequence[str]) -> bool:
    inner = list(parts[1:])
    if inner[:1] == ["src"]:
        inner = inner[1:]
    return len(inner) == 2 and inner[0].endswith(".egg-info") and inner[1] == "requires.txt"


def requires_txt(text: str) -> tuple[str, ...]:
    """requires.txt as Requires-Dist lines: its first lines are unconditional; a `[name]`
    section is an extra's, `[:marker]` a marker's, `[name:marker]` both (the format
    pkg_resources reads: setuptools/_vendor/.../pkg_resources `split_sections`)."""
    out: list[str] = []
    extra, marker = "", ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            extra, _, marker = line[1:-1].partition(":")
            continue
        conditions = [f"({marker})"] if marker else []
        conditions += [f'extra == "{extra}"'] if extra else []
        out.append(f"{line} ; {' and '.join(conditions)}" if conditions else line)
    return tuple(out)


def _members(data: bytes, filename: str) -> tuple[dict[str, bytes], tuple[str, ...]]:
    """(the top-level PKG-INFO, pyproject.toml and setup.py, every file's path below the
    sdist's root folder) of a .tar.gz or .zip sdist."""
    # Imported here: the resolver imports this module (wheels_have_nvcc) on every resolve.
    import io
    import tarfile
    import zipfile

    out: dict[str, bytes] = {}
    names: list[str] = []
    if filename.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for info in zf.infolist():
                parts = info.filename.split("/")
                names.append("/".join(parts[1:]))
                key = parts[1] if len(parts) == 2 and parts[1] in _READ else ""
                key = REQUIRES_TXT if not key and _requires_txt_member(parts) else key
                if key and info.file_size <= _MAX_MEMBER:
                    out.setdefault(key, zf.read(info))
        return out, tuple(names)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
        for member in tf.getmembers():
            parts = member.name.lstrip("./").split("/")
            if member.isfile():
                names.append("/".join(parts[1:]))
            small = member.isfile() and member.size <= _MAX_MEMBER
            key = parts[1] if len(parts) == 2 and parts[1] in _READ else ""
            key = REQUIRES_TXT if not key and _requires_txt_member(parts) else key
            if key and small:
                f = tf.extractfile(member)
                if f is not None:
                    out.setdefault(key, f.read())
    return out, tuple(names)


# What makes an sdist compiled code, read from its file list and texts (never run): sources a
# compiler or Cython translates, a native build system's input, an extension module in setup.py
# (https://setuptools.pypa.io/en/latest/userguide/ext_modules.html; torch.utils.cpp_extension's
# CppExtension/CUDAExtension), a build backend other than the pure-Python ones, or a build
# requirement that only compiled builds need.
COMPILED_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".cu", ".pyx", ".f", ".f90", ".rs")
COMPILED_FILES = ("CMakeLists.txt", "meson.build", "Cargo.toml")
_SETUP_MARKERS = ("ext_modules", "Extension(", "CUDAExtension", "CppExtension", "cythonize")
PURE_BACKENDS = (
    "setuptools.build_meta",
    "setuptools.build_meta:__legacy__",
    "flit_core.buildapi",
    "hatchling.build",
    "poetry.core.masonry.api",
    "pdm.backend",
)
_COMPILED_REQUIRES = re.compile(
    r"^\s*(cython|pybind11|nanobind|torch|cmake|ninja|scikit-build(-core)?|meson-python|"
    r"setuptools-rust|maturin|cffi)\b",
    re.IGNORECASE,
)


def compiled_code(
    names: Sequence[str], setup_py: str, backend: str | None, build_requires: Sequence[str]
) -> str:
    """Why an sdist holds compiled code ("" when it is pure Python), from its file list, its
    setup.py text, its build backend (None: none declared, setuptools' legacy) and its build
    requirements."""
    for name in sorted(names):
        base = name.rsplit("/", 1)[-1]
        if base.lower().endswith(COMPILED_SUFFIXES) or base in COMPILED_FILES:
            return f"it holds {name}"
    marker = next((m for m in _SETUP_MARKERS if m in setup_py), None)
    if marker is not None:
        return f"its setup.py names {marker.rstrip('(')}"
    if backend is not None and backend not in PURE_BACKENDS:
        return f"its build backend is {backend}"
    wanted = next((r for r in build_requires if _COMPILED_REQUIRES.match(r)), None)
    if wanted is not None:
        return f"it builds with {wanted}"
    return ""


def sdist_metadata(data: bytes, filename: str) -> SdistMetadata:
    """The dependencies and build requirements of an sdist (its bytes); ValueError when it
    holds neither PKG-INFO nor pyproject.toml."""
    from email.parser import HeaderParser

    from envbuild.request.parse import toml_loads

    members, names = _members(data, filename)
    if not {"PKG-INFO", "pyproject.toml"} & set(members):
        raise ValueError(f"{filename} has no PKG-INFO or pyproject.toml at its top level")
    pyproject: dict[str, object] = {}
    if "pyproject.toml" in members:
        pyproject = toml_loads(members["pyproject.toml"].decode("utf-8"))
    system = pyproject.get("build-system")
    requires = system.get("requires") if isinstance(system, dict) else None
    build_requires = (
        tuple(str(r) for r in requires) if isinstance(requires, list) else DEFAULT_BUILD_REQUIRES
    )
    version, static, source = "", False, "PKG-INFO"
    deps: tuple[str, ...] = ()
    if "PKG-INFO" in members:
        headers = HeaderParser().parsestr(members["PKG-INFO"].decode("utf-8", "replace"))
        version = str(headers.get("Metadata-Version", ""))
        deps = tuple(str(v) for v in headers.get_all("Requires-Dist") or ())
        dynamic = {str(v).strip().lower() for v in headers.get_all("Dynamic") or ()}
        static = _at_least(version, (2, 2)) and "requires-dist" not in dynamic
    project = pyproject.get("project")
    if (
        not static
        and isinstance(project, dict)
        and "dependencies" not in project.get("dynamic", [])
    ):
        deps = tuple(str(d) for d in project.get("dependencies", []) or [])
        static, source = True, "pyproject.toml"
    if not static and not deps and REQUIRES_TXT in members:
        deps = requires_txt(members[REQUIRES_TXT].decode("utf-8", "replace"))
        source = REQUIRES_TXT
    backend = system.get("build-backend") if isinstance(system, dict) else None
    setup_py = members.get("setup.py", b"").decode("utf-8", "replace")
    why = compiled_code(names, setup_py, str(backend) if backend else None, build_requires)
    return SdistMetadata(deps, build_requires, static, version, why, source)


def _at_least(version: str, want: tuple[int, int]) -> bool:
    try:
        return major_minor(version) >= want
    except Exception:
        return False
