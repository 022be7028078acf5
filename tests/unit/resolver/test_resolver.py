"""Rules of the pure resolver, on a small in-memory matrix built from the row dataclasses.

The rows copy published facts (the public source cited per row group);
they are a fixture for the rules, not the shipped matrix (that one is tested through
tests/cases/resolve/*.toml in test_resolver_cases.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.core.errors import UserError
from envbuild.core.models import Host, HostGpu, Request, Stack, Targets, Unsatisfiable
from envbuild.cuda.archs import covers
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
from envbuild.request.parse import check_request
from envbuild.resolver import (
    parse_gpu,
    resolve,
    result_to_json,
    result_to_text,
    sort_archs,
)

SRC = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/ (test fixture)"

# CUDA release notes Table 3 (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/) and the
# MVC floors (https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html).
CUDA = (
    CudaRelease("11.8.0", "520.61.05", "450.80.02", SRC),
    CudaRelease("12.0.0", "525.60.13", "525.60.13", SRC),
    CudaRelease("12.4.1", "550.54.15", "525.60.13", SRC),
    CudaRelease("12.5.1", "555.42.06", "525.60.13", SRC),
    CudaRelease("12.6.3", "560.35.05", "525.60.13", SRC),
    CudaRelease("12.8.0", "570.26", "525.60.13", SRC),
    CudaRelease("12.8.1", "570.124.06", "525.60.13", SRC),
    CudaRelease("12.9.1", "575.57.08", "525.60.13", SRC),
    CudaRelease("13.0.0", "580.65.06", "580", SRC),
    CudaRelease("13.0.2", "580.95.05", "580", SRC),
    CudaRelease("13.2.0", "595.45.04", "580", SRC),
)
# https://developer.nvidia.com/cuda-gpus; first/last CUDA from `ptxas --help` of the PyPI
# nvidia-cuda-nvcc wheels.
ARCHS = (
    Arch("7.0", "sm_70", "Volta", ("Tesla V100", "V100", "TITAN V"), None, "12.9", SRC),
    Arch("7.5", "sm_75", "Turing", ("Tesla T4", "T4", "GeForce RTX 2080"), "10.0", None, SRC),
    Arch("8.0", "sm_80", "Ampere", ("A100", "A30"), "11.0", None, SRC),
    Arch("8.6", "sm_86", "Ampere", ("A10", "A40", "GeForce RTX 3090"), "11.1", None, SRC),
    Arch("8.9", "sm_89", "Ada", ("L4", "L40S", "GeForce RTX 4090"), "11.8", None, SRC),
    Arch("9.0", "sm_90", "Hopper", ("H100", "H200", "GH200"), "11.8", None, SRC),
    Arch("10.0", "sm_100", "Blackwell", ("B200", "GB200"), "12.8", None, SRC),
    Arch("11.0", "sm_110", "Blackwell", ("Jetson T5000",), "13.0", None, SRC),
    Arch("12.0", "sm_120", "Blackwell", ("GeForce RTX 5090", "RTX PRO 6000"), "12.8", None, SRC),
    Arch("12.1", "sm_121", "Blackwell", ("GB10",), "12.9", None, SRC),
)
OLD = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
NEW = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120")
PT = "https://download.pytorch.org/whl/"


def _torch(
    versions: str, variant: str, cuda: str | None, archs: tuple[str, ...], *, default: bool = False
) -> FrameworkBuild:
    return FrameworkBuild(
        framework="torch",
        versions=versions,
        variant=variant,
        cuda=cuda,
        cudnn="9.10.2.21" if cuda else None,
        nccl="2.27.3" if cuda else None,
        archs=archs,
        requirement="torch=={version}",
        index_url=None if default else PT + variant,
        pypi_default=default,
        source=SRC,
    )


# PyPI metadata and pytorch/pytorch RELEASE.md (https://github.com/pytorch/pytorch/blob/main/RELEASE.md);
# arch lists simplified where it lists none: fixture only.
RELEASES = (
    FrameworkRelease("torch", "2.6.0", ">=3.9,<3.14", SRC),
    FrameworkRelease("torch", "2.7.1", ">=3.9,<3.14", SRC),
    FrameworkRelease("torch", "2.8.0", ">=3.9,<3.14", SRC),
    FrameworkRelease("torch", "2.14.1", ">=3.10,<3.15", SRC),
    FrameworkRelease("torch", "2.15.0", ">=3.11,<3.16", SRC),
    FrameworkRelease("tensorflow", "2.18.0", ">=3.9,<3.13", SRC),
    FrameworkRelease("jax", "0.7.2", ">=3.11", SRC),
)
BUILDS = (
    _torch("==2.6.*", "cu124", "12.4.1", OLD, default=True),
    _torch("==2.6.*", "cu126", "12.6.3", OLD),
    _torch("==2.7.*", "cu126", "12.6.3", OLD, default=True),
    _torch("==2.7.*", "cu128", "12.8.0", NEW),
    _torch("==2.8.*", "cu126", "12.6.3", OLD),
    _torch("==2.8.*", "cu128", "12.8.1", ("sm_70", *NEW[:-1]), default=True),
    _torch("==2.8.*", "cu129", "12.9.1", ("sm_70", *NEW)),
    _torch("==2.14.*", "cu126", "12.6.3", OLD),
    _torch("==2.14.*", "cu130", "13.0.2", NEW, default=True),
    _torch("==2.14.*", "cu132", "13.2.0", NEW),
    _torch("==2.15.*", "cu132", "13.2.0", NEW, default=True),
    _torch(">=2.0", "cpu", None, ()),
    FrameworkBuild(
        framework="tensorflow",
        versions="==2.18.*",
        variant="and-cuda",
        cuda="12.5.1",
        cudnn="9.3.0.75",
        nccl="2.21.5",
        archs=("sm_60", "sm_70", "sm_80", "sm_89", "compute_90"),
        requirement="tensorflow[and-cuda]=={version}",
        index_url=None,
        pypi_default=True,
        source=SRC,
    ),
    FrameworkBuild(
        framework="jax",
        versions="==0.7.*",
        variant="cuda12",
        cuda="12.9.1",
        cudnn="9.10.2.21",
        nccl="2.27.3",
        archs=("sm_52", "sm_60", "sm_70", "sm_80", "sm_90", "compute_90"),
        requirement="jax[cuda12]=={version}",
        index_url=None,
        pypi_default=True,
        source=SRC,
    ),
    FrameworkBuild(
        framework="jax",
        versions="==0.7.*",
        variant="cuda13",
        cuda="13.0.0",
        cudnn="9.12.0.46",
        nccl="2.27.7",
        archs=NEW,
        requirement="jax[cuda13]=={version}",
        index_url=None,
        pypi_default=False,
        source=SRC,
    ),
)
LIBS = (LibRelease("cudnn", "9.17.1.4", ">=12.0,<14", SRC, min_cc="7.5"),)


def _img(cuda: str, oses: tuple[str, ...], brands: tuple[int, ...]) -> CudaImage:
    mm = ".".join(cuda.split(".")[:2])
    clauses = " ".join(f"brand=tesla,driver>={b},driver<{b + 1}" for b in brands)
    return CudaImage(
        cuda=cuda,
        oses=oses,
        flavours=("base", "runtime", "cudnn", "devel"),
        cudnn="9.8.0.87",
        require_cuda=f"cuda>={mm} {clauses}".strip(),
        source=SRC,
    )


# nvidia/cuda supported tags (https://gitlab.com/nvidia/container-images/cuda).
IMAGES = (
    _img("12.4.1", ("ubuntu22.04",), (470, 525, 535)),
    _img("12.5.1", ("ubuntu22.04", "ubuntu24.04"), (470, 535, 550)),
    _img("12.6.3", ("ubuntu22.04", "ubuntu24.04"), (470, 535, 550)),
    _img("12.8.1", ("ubuntu22.04", "ubuntu24.04"), (470, 535, 550, 560, 565)),
    _img("12.9.1", ("ubuntu22.04", "ubuntu24.04"), (535, 550, 560, 565, 570)),
    _img("13.0.0", ("ubuntu22.04", "ubuntu24.04"), (535, 550, 565, 570, 575)),
)
OSES = (
    OsImage("debian12", "debian:bookworm-slim", "3.11", ("python3", "python3-venv"), SRC),
    OsImage("ubuntu22.04", "ubuntu:22.04", "3.10", ("python3", "python3-venv"), SRC),
    OsImage("ubuntu24.04", "ubuntu:24.04", "3.12", ("python3", "python3-venv"), SRC, default=True),
)
M = Matrix(
    cuda=CUDA,
    archs=ARCHS,
    releases=RELEASES,
    builds=BUILDS,
    libs=LIBS,
    cuda_images=IMAGES,
    os_images=OSES,
)


def req(
    framework: str = "torch",
    gpus: Sequence[str] = (),
    driver: str | None = None,
    **kw: Any,
) -> Request:
    return Request(framework=framework, targets=Targets(gpus=tuple(gpus), driver=driver), **kw)


def ok(result: Stack | Unsatisfiable) -> Stack:
    assert isinstance(result, Stack), result
    return result


def no(result: Stack | Unsatisfiable) -> Unsatisfiable:
    assert isinstance(result, Unsatisfiable), result
    return result


# --- kernel coverage (CUDA C++ Programming Guide: binary and PTX compatibility) -------------


@pytest.mark.parametrize(
    ("arch", "cc", "expected"),
    [
        ("sm_80", (8, 0), "cubin"),
        ("sm_80", (8, 6), "cubin"),  # same major, higher minor
        ("sm_80", (8, 9), "cubin"),
        ("sm_86", (8, 9), "cubin"),
        ("sm_86", (8, 0), None),  # never to a lower minor
        ("sm_90", (10, 0), None),  # never across majors
        ("sm_90", (12, 0), None),
        ("sm_100", (10, 3), "cubin"),
        ("sm_100", (12, 0), None),
        ("sm_90a", (9, 0), "cubin"),
        ("sm_90a", (10, 0), None),  # arch-specific: exactly 9.0
        ("sm_100f", (10, 3), "cubin"),  # family: same major
        ("compute_90", (9, 0), "ptx"),
        ("compute_90", (12, 0), "ptx"),  # PTX JITs forward
        ("compute_120", (10, 0), None),  # but not backward
        ("compute_90a", (10, 0), None),
    ],
)
def test_coverage_rules(arch: str, cc: tuple[int, int], expected: str | None) -> None:
    assert covers(arch, cc) == expected


def test_sort_archs_is_numeric_cubins_before_ptx() -> None:
    assert sort_archs(["compute_120", "sm_120", "sm_90", "sm_100", "sm_75"]) == (
        "sm_75",
        "sm_90",
        "sm_100",
        "sm_120",
        "compute_120",
    )


# --- GPU names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cc"),
    [
        ("H100", "9.0"),
        ("h100", "9.0"),
        ("NVIDIA H100 80GB HBM3", "9.0"),  # NVML name
        ("RTX 5090", "12.0"),
        ("rtx5090", "12.0"),
        ("NVIDIA GeForce RTX 5090", "12.0"),
        ("V100", "7.0"),
        ("Tesla V100-SXM2-16GB", "7.0"),
        ("sm_90", "9.0"),
        ("sm_120", "12.0"),
        ("9.0", "9.0"),
        ("12.1", "12.1"),
    ],
)
def test_parse_gpu(text: str, cc: str) -> None:
    assert parse_gpu(M, text).cc == cc


@pytest.mark.parametrize("text", ["H900", "sm_99", "9.9", "", "A1000"])
def test_unknown_gpu_is_a_user_error_with_a_next_step(text: str) -> None:
    with pytest.raises(UserError) as err:
        parse_gpu(M, text)
    assert err.value.exit_code == 2
    assert err.value.hint


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (req("pytorch"), "unknown framework"),
        (req("torch==="), "not valid"),
        (req("torch", ["H100"], driver="five-three-five"), "not a version"),
        (req("torch", cuda="twelve"), "not a version range"),
        (req("torch", python="3"), "not a version like"),
        (req("torch", os="windows11"), "unknown OS"),
        (req("torch", os="windows"), "not an OS name"),
        (req("torch", ["H100"], device="cpu"), "GPUs are listed"),
        (req("torch", flavour="fat"), "unknown flavour"),
        (req("jax[cuda99]"), "no variant"),
        (req("torch", os="ubuntu22.04", python="3.12"), "ships Python 3.10"),
        (req("torch", device="cpu", flavour="runtime"), "CPU stack"),
    ],
)
def test_bad_input_raises_user_error(request_: Request, words: str) -> None:
    # As the CLI does it: the one request validator, then the resolver (matrix checks).
    with pytest.raises(UserError) as err:
        resolve(check_request(request_), M)
    assert words in err.value.message
    assert err.value.hint


def test_os_python_mismatch_names_the_way_out() -> None:
    with pytest.raises(UserError) as err:
        resolve(req("torch", os="ubuntu22.04", python="3.12"), M)
    assert "--os ubuntu24.04" in err.value.hint


# --- preference ------------------------------------------------------------------------------


def test_newest_release_then_newest_cuda_variant() -> None:
    s = ok(resolve(req("torch", ["H100"]), M))
    assert (s.framework.version, s.framework.variant) == ("2.15.0", "cu132")
    s = ok(resolve(req("torch==2.14.*", ["H100"]), M))
    assert s.framework.variant == "cu132"  # newest CUDA, although cu130 is the PyPI default
    assert "not the PyPI default" in " ".join(s.notes)


def test_pypi_default_wins_between_equal_cuda_versions() -> None:
    twin = FrameworkBuild(**{**BUILDS[9].__dict__, "variant": "cu132x", "pypi_default": True})
    m = Matrix(**{**M.__dict__, "builds": (*BUILDS, twin)})
    s = ok(resolve(req("torch==2.14.*", ["H100"]), m))
    assert s.framework.variant == "cu132x"


def test_deterministic() -> None:
    r = req("torch", ["V100", "RTX 5090"], driver="570.124.06")
    assert resolve(r, M) == resolve(r, M)
    bad = req("torch>=2.9", ["V100", "RTX 5090"], driver="570.124.06")
    assert result_to_json(resolve(bad, M)) == result_to_json(resolve(bad, M))


# --- architectures ---------------------------------------------------------------------------


def test_blackwell_on_old_torch_explains_the_first_build_that_has_it() -> None:
    u = no(resolve(req("torch==2.6.*", ["RTX 5090"]), M))
    text = " ".join(u.reasons)
    assert "torch 2.6.0 has no build with sm_120 kernels" in text
    assert "sm_120 needs CUDA >= 12.8, first in torch 2.7 cu128" in text
    assert any("torch 2.7.1 cu128" in a for a in u.alternatives)


def test_volta_on_new_torch_falls_back_to_cu126() -> None:
    s = ok(resolve(req("torch", ["V100"]), M))
    assert (s.framework.version, s.framework.variant) == ("2.14.1", "cu126")
    assert "why not newer (torch 2.15.0 skipped): torch 2.15.0 has no build with sm_70" in " ".join(
        s.notes
    )
    u = no(resolve(req("torch==2.15.*", ["V100"]), M))
    assert "sm_70 needs CUDA <= 12.9, last in torch 2.14 cu126" in " ".join(u.reasons)


def test_mixed_fleet_needs_one_build_with_both() -> None:
    s = ok(resolve(req("torch", ["V100", "RTX 5090"]), M))
    assert (s.framework.version, s.framework.variant) == ("2.8.0", "cu129")
    assert s.target_archs == ("sm_70", "sm_120")
    u = no(resolve(req("torch>=2.9", ["V100", "RTX 5090"]), M))
    alts = " ".join(u.alternatives)
    assert "drop V100 (sm_70)" in alts and "drop RTX 5090 (sm_120)" in alts
    assert "torch 2.8.0 cu129" in alts  # the nearest other version


def test_cudnn_minimum_capability_excludes_a_build() -> None:
    b = FrameworkBuild(**{**BUILDS[4].__dict__, "cudnn": "9.17.1.4"})  # 2.8 cu126
    m = Matrix(**{**M.__dict__, "builds": (b,)})
    u = no(resolve(req("torch==2.8.*", ["V100"]), m))
    assert "cuDNN 9.17.1.4" in " ".join(u.reasons)


# --- drivers ---------------------------------------------------------------------------------


def test_minor_version_compatibility_is_allowed_and_recorded() -> None:
    s = ok(resolve(req("torch==2.8.*", ["H100"], driver="535.104.05"), M))
    assert s.framework.variant == "cu129"
    assert s.floors is not None
    assert (s.floors.toolkit, s.floors.minor_compat) == ("575.57.08", "525.60.13")
    assert s.floors.relied_on == "minor_compat"
    assert s.base_image.require_cuda.startswith("cuda>=12.0 ")  # not more than it needs
    assert "brand=tesla,driver>=535,driver<536" in s.base_image.require_cuda
    assert "relies on minor-version compatibility" in " ".join(s.notes)


def test_strict_policy_needs_the_toolkit_floor() -> None:
    u = no(resolve(req("torch==2.8.*", ["H100"], driver="535.104.05", compat="strict"), M))
    assert "strict" in " ".join(u.reasons)
    assert any("drop --strict-compat" in a for a in u.alternatives)
    assert any("a newer driver: >= 560.35.05" in a for a in u.alternatives)
    s = ok(resolve(req("torch==2.8.*", ["H100"], driver="570.124.06", compat="strict"), M))
    assert s.framework.variant == "cu128"
    assert s.floors is not None and s.floors.relied_on == "toolkit"
    assert s.base_image.require_cuda.startswith("cuda>=12.8 ")


def test_cuda13_needs_580_even_with_minor_compatibility() -> None:
    s = ok(resolve(req("torch==2.14.*", ["H100"], driver="575.57.08"), M))
    assert s.framework.variant == "cu126"
    u = no(resolve(req("torch==2.15.*", ["H100"], driver="575.57.08"), M))
    assert "or >= 580 with minor-version compatibility" in " ".join(u.reasons)
    assert "the oldest target driver is 575.57.08" in " ".join(u.reasons)


def test_ptx_only_coverage_needs_the_toolkit_floor() -> None:
    # TF 2.18 carries compute_90 but no sm_90 cubin: H100 runs it through PTX JIT only.
    u = no(resolve(req("tensorflow", ["H100"], driver="550.54.15"), M))
    assert "only through PTX (compute_90)" in " ".join(u.reasons)
    s = ok(resolve(req("tensorflow", ["H100"], driver="560.35.05"), M))
    assert s.floors is not None and s.floors.relied_on == "toolkit"
    assert "JIT of compute_90" in " ".join(s.notes)
    s = ok(resolve(req("tensorflow", ["A100"], driver="550.54.15"), M))  # sm_80 cubin: MVC ok
    assert s.floors is not None and s.floors.relied_on == "minor_compat"


def test_gpu_needs_a_driver_branch_that_knows_it() -> None:
    u = no(resolve(req("torch", ["RTX 5090"], driver="535.104.05"), M))
    assert "branch 570 or newer" in u.reasons[0]
    assert any("a newer driver: >= 570.26" in a for a in u.alternatives)
    # A mixed fleet: the oldest driver may sit on the V100 hosts; a note, not a failure.
    s = ok(resolve(req("torch", ["V100", "RTX 5090"], driver="535.104.05"), M))
    assert "its hosts must run a newer driver" in " ".join(s.notes)


def test_no_driver_notes_the_floor_the_image_needs() -> None:
    s = ok(resolve(req("torch==2.7.*", ["H100"]), M))
    assert "no driver given: the image needs driver >= 525.60.13" in " ".join(s.notes)


def test_hosts_add_gpus_and_the_oldest_driver() -> None:
    hosts = [
        Host(driver="580.95.05", gpus=(HostGpu(name="NVIDIA H100 80GB HBM3", cc="9.0"),)),
        Host(driver="560.35.05", gpus=(HostGpu(name="Tesla V100-SXM2-16GB", cc="7.0"),)),
    ]
    s = ok(resolve(req("torch"), M, hosts))
    assert s.target_archs == ("sm_70", "sm_90")
    assert s.framework.variant == "cu126"  # V100 rules out cu13x; 560 covers 12.6.3


def test_unknown_host_capability_is_a_user_error() -> None:
    with pytest.raises(UserError):
        resolve(req("torch"), M, [Host(driver="580.95.05", gpus=(HostGpu("X", "15.0"),))])


# --- python, OS, flavour ---------------------------------------------------------------------


def test_python_too_old_for_the_framework() -> None:
    u = no(resolve(req("torch==2.15.*", ["H100"], python="3.9"), M))
    text = " ".join(u.reasons)
    assert "torch 2.15.0 supports Python >=3.11,<3.16; requested 3.9" in text
    assert "no OS image in the matrix ships Python 3.9" in text
    assert any(a.startswith("drop --python: torch 2.15.0") for a in u.alternatives)


def test_python_picks_the_os_that_ships_it() -> None:
    s = ok(resolve(req("torch", ["H100"], python="3.11"), M))
    assert (s.python, s.os) == ("3.11", "debian12")
    # No nvidia/cuda image for Debian: auto falls back to the plain OS image.
    assert (s.flavour, s.base_image.ref) == ("plain", "debian:bookworm-slim")
    assert " brand=" not in s.base_image.require_cuda


def test_default_os_and_base_flavour() -> None:
    s = ok(resolve(req("torch==2.8.*", ["H100"], driver="570.124.06", compat="strict"), M))
    assert (s.os, s.python, s.flavour) == ("ubuntu24.04", "3.12", "base")
    assert s.base_image.ref == "nvidia/cuda:12.8.1-base-ubuntu24.04"
    assert s.base_image.cudnn is None
    assert "image:nvidia/cuda:12.8.1" in s.rows and "build:torch:==2.8.*:cu128" in s.rows


def test_cudnn_flavour_and_devel_builder() -> None:
    s = ok(resolve(req("torch==2.8.*", ["H100"], flavour="cudnn", compile_extensions=True), M))
    assert s.base_image.ref == "nvidia/cuda:12.9.1-cudnn-runtime-ubuntu24.04"
    assert s.base_image.cudnn == "9.8.0.87"
    assert s.base_image.builder == "nvidia/cuda:12.9.1-devel-ubuntu24.04"


def test_cuda_specifier() -> None:
    s = ok(resolve(req("torch", ["H100"], cuda="12.8"), M))
    assert (s.framework.version, s.framework.variant) == ("2.8.0", "cu128")
    u = no(resolve(req("torch==2.15.*", ["H100"], cuda="12.8"), M))
    assert "outside --cuda 12.8" in " ".join(u.reasons)
    assert any(a.startswith("drop --cuda") for a in u.alternatives)


def test_cpu_stack() -> None:
    s = ok(resolve(req("torch", ["H100"], driver="470.82.01", device="cpu"), M))
    assert (s.framework.variant, s.flavour, s.cuda, s.floors) == ("cpu", "cpu", None, None)
    assert s.base_image.ref == "ubuntu:24.04" and s.base_image.require_cuda == ""
    assert s.target_archs == ()


def test_jax_variant_from_extra() -> None:
    s = ok(resolve(req("jax[cuda12]", ["H100"]), M))
    assert s.framework.variant == "cuda12" and s.framework.requirement == "jax[cuda12]==0.7.2"
    s = ok(resolve(req("jax", ["RTX 5090"], driver="580.65.06"), M))
    assert s.framework.variant == "cuda13"


def test_no_release_in_range() -> None:
    u = no(resolve(req("torch==3.0.*"), M))
    assert "no torch release in the matrix matches torch==3.0.*" in u.reasons[0]


# --- output ----------------------------------------------------------------------------------


def test_json_and_text_carry_the_same_content() -> None:
    u = no(resolve(req("torch==2.6.*", ["RTX 5090"]), M))
    j = result_to_json(u)
    assert j["ok"] is False and j["reasons"] == list(u.reasons)
    text = "\n".join(result_to_text(u))
    for line in [*j["reasons"], *j["alternatives"]]:
        assert line in text
    s = ok(resolve(req("torch", ["H100"], driver="580.95.05"), M))
    j = result_to_json(s)
    assert j["ok"] is True
    assert set(j["stack"]) >= {
        "framework",
        "cuda",
        "cudnn",
        "nccl",
        "python",
        "os",
        "flavour",
        "base_image",
        "require_cuda",
        "archs",
        "target_archs",
        "driver_floor",
    }
    assert set(j["stack"]["driver_floor"]) >= {"toolkit", "minor_compat", "relied_on"}
    text = "\n".join(result_to_text(s))
    assert s.base_image.ref in text and all(n in text for n in j["notes"])


# --- properties ------------------------------------------------------------------------------

DRIVERS = ["470.82.01", "535.104.05", "550.54.15", "560.35.05", "570.124.06", "575.57.08"]
DRIVERS += ["580.65.06", "595.45.04", None]  # type: ignore[list-item]


@settings(max_examples=150, deadline=None)
@given(
    gpus=st.lists(st.sampled_from([a.sm for a in ARCHS]), max_size=3),
    driver=st.sampled_from(DRIVERS),
    framework=st.sampled_from(["torch", "torch==2.8.*", "torch>=2.14", "tensorflow", "jax"]),
    strict=st.booleans(),
)
def test_every_stack_runs_on_every_target(
    gpus: list[str], driver: str | None, framework: str, strict: bool
) -> None:
    from packaging.version import Version

    from envbuild.cuda.archs import coverage

    r = req(framework, gpus, driver=driver, compat="strict" if strict else "minor")
    result = resolve(r, M)
    if isinstance(result, Unsatisfiable):
        assert result.reasons
        return
    assert result.floors is not None
    for sm in gpus:
        cc = parse_gpu(M, sm).cc
        how, _ = coverage(result.archs, cc)
        assert how is not None
        if how == "ptx" or strict:
            assert result.floors.relied_on == "toolkit"
    if driver:
        assert Version(driver) >= Version(result.floors.effective)


def test_resolve_is_fast_on_the_fixture() -> None:
    r = req("torch>=2.9", ["V100", "RTX 5090"], driver="535.104.05")  # worst case: explains
    start = time.perf_counter()
    for _ in range(10):
        resolve(r, M)
    assert (time.perf_counter() - start) / 10 < 0.05


def test_renamed_arch_is_covered_by_either_name() -> None:
    # Thor is sm_101 in CUDA 12.8/12.9 numbering and sm_110 from CUDA 13.0 (nvCOMPDx/cuRANDDx release notes).
    thor = Arch("10.1", "sm_101", "Blackwell", ("Thor",), "12.8", "12.9", SRC, renamed_to="sm_110")
    cu130 = FrameworkBuild(**{**BUILDS[8].__dict__, "archs": ("sm_90", "sm_110")})
    m = Matrix(**{**M.__dict__, "archs": (*ARCHS, thor), "builds": (cu130,)})
    s = ok(resolve(req("torch==2.14.*", ["Thor"]), m))
    assert s.framework.variant == "cu130"


def test_unpublished_image_tags_are_not_used() -> None:
    # NVIDIA publishes no cudnn image for some CUDA/OS pairs (https://gitlab.com/nvidia/container-images/cuda doc/supported-tags.md).
    imgs = tuple(CudaImage(**{**i.__dict__, "missing": ("cudnn-ubuntu24.04",)}) for i in IMAGES)
    m = Matrix(**{**M.__dict__, "cuda_images": imgs})
    u = no(resolve(req("torch==2.8.*", ["H100"], flavour="cudnn", os="ubuntu24.04"), m))
    assert "no nvidia/cuda 12.9 cudnn image for ubuntu24.04" in " ".join(u.reasons)
    s = ok(resolve(req("torch==2.8.*", ["H100"], flavour="cudnn"), m))
    assert s.base_image.ref == "nvidia/cuda:12.9.1-cudnn-runtime-ubuntu22.04"


@pytest.mark.parametrize(
    ("arch", "cc", "expected"),
    [
        ("sm_80", (8, 7), None),  # desktop cubin on Tegra (Jetson Orin): not compatible
        ("sm_87", (8, 9), None),  # Tegra cubin on desktop: not compatible
        ("sm_87", (8, 7), "cubin"),
        ("compute_80", (8, 7), "ptx"),  # PTX still JITs
    ],
)
def test_tegra_has_no_cubin_compatibility(
    arch: str, cc: tuple[int, int], expected: str | None
) -> None:
    assert covers(arch, cc, frozenset({(8, 7)})) == expected
