"""CUDA extensions built from source: the arch list and toolchain rules, sdist metadata read
without building, source packages at lock time (uv's answers replayed), the lock's [build]
table, the builder stage's render and files, and the example's committed sdist."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from envbuild.app import lock_source as source_lock
from envbuild.build.buildlog import compile_failure
from envbuild.core.errors import LockError, UnsatisfiableError
from envbuild.core.models import ExtensionBuild, LockedPackage, Request
from envbuild.cuda import extensions
from envbuild.lock import pins as pydeps
from envbuild.lock.format import dumps, loads
from envbuild.lock.pinfailure import classify_failure
from envbuild.render import builder_stage
from envbuild.render.dockerfile import RenderOptions, build_context, requirements_text
from tests.sdist import make_sdist

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "images" / "torch-ext"
SDIST = EXAMPLE / "wheels" / "envbuild_vecadd-0.1.0.tar.gz"
H = "sha256:" + "a" * 64

# --- arch list, toolchain ------------------------------------------------------------------


def test_one_cubin_per_target_and_ptx_only_where_the_framework_has_ptx() -> None:
    with_ptx = extensions.build_archs(["sm_90", "sm_89"], ["sm_80", "compute_90"])
    assert with_ptx == ("sm_89", "sm_90", "compute_90")
    assert extensions.torch_cuda_arch_list(with_ptx) == "8.9 9.0+PTX"
    assert extensions.cmake_cuda_architectures(with_ptx) == "89-real;90"
    cubins = extensions.build_archs(["sm_90", "sm_89"], ["sm_80", "sm_90"])
    assert cubins == ("sm_89", "sm_90")
    assert extensions.torch_cuda_arch_list(cubins) == "8.9 9.0"
    assert extensions.cmake_cuda_architectures(cubins) == "89-real;90-real"
    assert extensions.build_archs([], ["compute_90"]) == ()


def test_toolchain_follows_the_locked_cuda_wheels() -> None:
    def pkg(name: str, version: str) -> LockedPackage:
        return LockedPackage(name, version, (H,), "https://pypi.org/simple")

    torch_cu13 = [pkg("cuda-toolkit", "13.2.2"), pkg("nvidia-cuda-cccl", "13.3.5.0.6")]
    assert extensions.toolchain_requirements("13.2.1", torch_cu13) == (
        "cuda-toolkit[nvcc]==13.2.2",
        "nvidia-cuda-cccl",
    )
    assert extensions.toolchain_requirements("13.0.2", [pkg("nvidia-cuda-runtime", "13.0.96")]) == (
        "cuda-toolkit[nvcc,cccl,cudart]==13.0.*",
    )
    assert extensions.wheels_have_nvcc("13.0.2") and not extensions.wheels_have_nvcc("12.8.1")


# --- an sdist's metadata, read without building --------------------------------------------


def _sdist(files: dict[str, str]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"pkg-1.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def test_the_example_sdist_declares_static_metadata_and_its_build_requirements() -> None:
    meta = extensions.sdist_metadata(SDIST.read_bytes(), SDIST.name)
    assert meta == extensions.SdistMetadata(
        requires_dist=("torch",),
        build_requires=("setuptools>=77", "torch", "ninja"),
        static=True,
        metadata_version="2.2",
        compiled="it holds csrc/vecadd.cpp",
    )


def test_a_legacy_sdist_is_read_but_marked_not_static() -> None:
    data = _sdist(
        {
            "PKG-INFO": "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\nRequires-Dist: numpy\n",
            "setup.py": "raise SystemExit('must never run at lock time')\n",
        }
    )
    meta = extensions.sdist_metadata(data, "pkg-1.0.tar.gz")
    assert meta.requires_dist == ("numpy",) and not meta.static
    assert meta.build_requires == ("setuptools>=40.8.0",)  # pip's default without pyproject


@pytest.mark.parametrize("folder", ["", "src/"])
def test_a_pkg_info_without_requires_dist_is_read_from_the_egg_info(folder: str) -> None:
    """transformers-stream-generator 0.0.5 on PyPI: PKG-INFO 2.1 has no Requires-Dist, its
    egg-info's requires.txt (what setup.py egg_info wrote) has transformers>=4.26.1."""
    data = _sdist(
        {
            "PKG-INFO": "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n",
            "setup.py": "raise SystemExit('must never run at lock time')\n",
            f"{folder}pkg.egg-info/requires.txt": (
                "transformers>=4.26.1\n\n[dev]\npytest\n\n"
                '[:python_version < "3.8"]\nimportlib-metadata\n\n'
                '[gpu:sys_platform == "linux"]\npynvml\n'
            ),
        }
    )
    meta = extensions.sdist_metadata(data, "pkg-1.0.tar.gz")
    assert meta.requires_dist == (
        "transformers>=4.26.1",
        'pytest ; extra == "dev"',
        'importlib-metadata ; (python_version < "3.8")',
        'pynvml ; (sys_platform == "linux") and extra == "gpu"',
    )
    assert not meta.static and meta.source == extensions.REQUIRES_TXT
    for line in meta.requires_dist:  # each one a requirement uv and packaging read
        Requirement(line)


def test_requires_dist_in_pkg_info_wins_over_the_egg_info() -> None:
    data = _sdist(
        {
            "PKG-INFO": "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\nRequires-Dist: numpy\n",
            "pkg.egg-info/requires.txt": "numpy\nscipy\n",
        }
    )
    meta = extensions.sdist_metadata(data, "pkg-1.0.tar.gz")
    assert meta.requires_dist == ("numpy",) and meta.source == "PKG-INFO"


# --- uv argv and uv's answers ----------------------------------------------------------------

UV_SOURCE_ONLY = """error: No solution found when resolving dependencies
  cause: Because envbuild-vecadd==0.1.0 has no usable wheels and you require envbuild-vecadd==0.1.0, we can conclude that your requirements are unsatisfiable.

hint: Wheels are required for `envbuild-vecadd` because building from source is disabled for all packages (i.e., with `--no-build`)
"""


def _req(**kw: object) -> pydeps.PinRequest:
    base = pydeps.PinRequest(
        requirements=("torch==2.15.*", "envbuild-vecadd==0.1.0"), python="3.11"
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_a_wheel_less_requirement_gets_the_right_advice() -> None:
    err = classify_failure("uv", UV_SOURCE_ONLY, _req())
    assert isinstance(err, UnsatisfiableError)
    assert err.fields["source_only"] == ["envbuild-vecadd"]
    assert "compile_extensions = true" in err.hint and "loosen" not in err.hint


def test_source_packages_are_the_only_exceptions_to_wheel_only() -> None:
    meta = (pydeps.DependencyMetadata("envbuild-vecadd", "0.1.0", ("torch",)),)
    argv = pydeps.uv_argv(
        ["uv"], _req(source_packages=("envbuild-vecadd",), dependency_metadata=meta)
    )
    joined = " ".join(argv)
    assert "--only-binary :all:" in joined and "--no-binary envbuild-vecadd" in joined
    assert "--config-file uv-dependency-metadata.toml" in joined
    assert pydeps.dependency_metadata_text(meta) == (
        '[[dependency-metadata]]\nname = "envbuild-vecadd"\nversion = "0.1.0"\n'
        'requires-dist = ["torch"]\n'
    )


PYLOCK = f"""lock-version = "1.0"
created-by = "uv"

[[packages]]
name = "envbuild-vecadd"
version = "0.1.0"
sdist = {{ url = "{SDIST.as_uri()}", hashes = {{ sha256 = "{hashlib.sha256(SDIST.read_bytes()).hexdigest()}" }} }}

[[packages]]
name = "torch"
version = "2.15.0"
wheels = [{{ url = "https://files.pythonhosted.org/t/torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl", hashes = {{ sha256 = "{"b" * 64}" }} }}]
"""


def test_source_packages_are_locked_from_their_sdist_without_building() -> None:
    seen: list[pydeps.PinRequest] = []

    def pin(req: pydeps.PinRequest) -> pydeps.PinResult:
        seen.append(req)
        if not req.source_packages:
            raise classify_failure("uv", UV_SOURCE_ONLY, req)
        return pydeps.PinResult(
            pydeps.parse_pylock(PYLOCK, req), "uv", tuple(pydeps.sdist_urls(PYLOCK).items())
        )

    request = Request(framework="torch", compile_extensions=True)
    out = source_lock.pin_allowing_sources(pin, _req(), request)
    # 1: wheels only (refused); 2: pick a version, no dependencies read yet; 3: with them.
    assert len(seen) == 3
    assert seen[1].dependency_metadata == (pydeps.DependencyMetadata("envbuild-vecadd", None),)
    assert seen[2].dependency_metadata == (
        pydeps.DependencyMetadata("envbuild-vecadd", "0.1.0", ("torch",)),
    )
    assert "envbuild-vecadd==0.1.0" in seen[2].requirements
    vecadd = next(p for p in out.result.packages if p.name == "envbuild-vecadd")
    assert vecadd.sdist and vecadd.build_requires == ("setuptools>=77", "torch", "ninja")
    assert out.notes == ()  # static metadata: nothing to warn about


def test_without_compile_extensions_a_compiled_sdist_is_refused_saying_how_to_allow_it() -> None:
    def pin(req: pydeps.PinRequest) -> pydeps.PinResult:
        if not req.source_packages:
            raise classify_failure("uv", UV_SOURCE_ONLY, req)
        return pydeps.PinResult(
            pydeps.parse_pylock(PYLOCK, req), "uv", tuple(pydeps.sdist_urls(PYLOCK).items())
        )

    with pytest.raises(LockError) as err:
        source_lock.pin_allowing_sources(pin, _req(), Request(framework="torch"))
    assert err.value.exit_code == 2 and "compile_extensions = true" in err.value.hint
    assert "holds compiled code (it holds csrc/vecadd.cpp)" in err.value.message


# --- the lock's [build], the builder stage -------------------------------------------------


def test_the_example_lock_records_the_sdist_and_the_builder_pins() -> None:
    text = (EXAMPLE / "envbuild.lock").read_text()
    lock = loads(text)
    assert dumps(lock, command="envbuild lock images/torch-ext") == text  # round trip
    vecadd = next(p for p in lock.packages if p.name == "envbuild-vecadd")
    assert vecadd.sdist and vecadd.source == "wheels"
    assert vecadd.hashes == ("sha256:" + hashlib.sha256(SDIST.read_bytes()).hexdigest(),)
    assert lock.build is not None and lock.build.toolchain == "wheels"
    assert lock.build.cuda_archs == ("sm_89", "sm_90")
    assert "nvidia-cuda-nvcc" in lock.build.toolchain_packages
    assert {p.name for p in lock.build.packages} >= {"ninja", "nvidia-cuda-nvcc"}
    # The image's own packages do not include the toolchain.
    assert not {p.name for p in lock.packages} & {"ninja", "nvidia-cuda-nvcc"}


def test_the_builder_stage_compiles_what_requirements_lock_leaves_out() -> None:
    lock = loads((EXAMPLE / "envbuild.lock").read_text())
    assert "envbuild-vecadd" not in requirements_text(lock)
    files = builder_stage.context_files(lock)
    key = builder_stage.cache_key(lock, next(p for p in lock.packages if p.sdist))
    assert set(files) == {
        "build-extensions.sh",
        "toolchain.lock",
        "build-requirements.lock",
        f"sources/envbuild-vecadd-{key}.lock",
    }
    assert b"nvidia-cuda-nvcc==" in files["toolchain.lock"]
    assert b"ninja==" in files["build-requirements.lock"]
    # Another arch list is another cache key (a cached wheel is reused only for the same).
    assert lock.build is not None
    other = dataclasses.replace(lock, build=dataclasses.replace(lock.build, cuda_archs=("sm_80",)))
    assert builder_stage.cache_key(other, next(p for p in lock.packages if p.sdist)) != key


def test_the_build_context_holds_the_builder_files_and_the_sdist_folder(tmp_path: Path) -> None:
    from envbuild.matrix import load_matrix_from

    text = (EXAMPLE / "envbuild.lock").read_text()
    files = build_context(
        loads(text),
        text,
        image_dir=EXAMPLE,
        options=RenderOptions(find_links=EXAMPLE / "wheels"),
        matrix=load_matrix_from(None),
    )
    assert f"wheels/{SDIST.name}" in files and "build-extensions.sh" in files
    dockerfile = files["Dockerfile"].decode()
    assert 'TORCH_CUDA_ARCH_LIST="8.9 9.0"' in dockerfile
    assert "--target /opt/envbuild/toolchain" in dockerfile
    assert dockerfile.count("FROM ") == 2  # the toolchain stays in the builder
    import json

    plan = json.loads(files["plan.json"])
    assert plan["extensions"] == [{"name": "envbuild-vecadd", "version": "0.1.0"}]
    assert plan["target_ccs"] == ["8.9", "9.0"]


def test_a_build_table_round_trips() -> None:
    text = (EXAMPLE / "envbuild.lock").read_text()
    lock = loads(text)
    build = ExtensionBuild(toolchain="devel", cuda_archs=("sm_80",))
    again = loads(dumps(dataclasses.replace(lock, build=build)))
    assert again.build == build


# --- errors people can act on --------------------------------------------------------------

FAILED_LOG = """envbuild: compiling envbuild-vecadd for TORCH_CUDA_ARCH_LIST='8.9 9.0' with MAX_JOBS=1
---- last lines of the build of envbuild-vecadd (/tmp/envbuild-build.log) ----
csrc/vecadd.cpp:3:10: fatal error: cusparse.h: No such file or directory
compilation terminated.
envbuild-compile-failed package=envbuild-vecadd arch_list='8.9 9.0' max_jobs=1 mem_available_mib=3072 gpu_probe=no out_of_memory=no"""


def test_a_failed_compile_shows_the_compiler_lines_archs_and_memory() -> None:
    found = compile_failure(FAILED_LOG)
    assert found is not None
    message, hint = found
    assert "TORCH_CUDA_ARCH_LIST='8.9 9.0', MAX_JOBS=1, 3.0 GiB available" in message
    assert message.endswith("cusparse.h: No such file or directory\ncompilation terminated.")
    assert "missing header" in hint
    gpu = FAILED_LOG.replace("gpu_probe=no", "gpu_probe=yes")
    assert "needs a GPU at build time" in (compile_failure(gpu) or ("", ""))[1]
    oom = FAILED_LOG.replace("out_of_memory=no", "out_of_memory=yes")
    assert "ran out of memory with MAX_JOBS=1" in (compile_failure(oom) or ("", ""))[1]
    assert compile_failure("ERROR: some other failure") is None


# --- the example's sdist is its source folder ----------------------------------------------


def test_the_committed_sdist_is_made_from_the_committed_source() -> None:
    name, data = make_sdist(EXAMPLE / "vecadd")
    assert name == SDIST.name
    assert data == SDIST.read_bytes(), (
        "regenerate: python -m tests.sdist images/torch-ext/vecadd images/torch-ext/wheels, then re-lock"
    )


# --- the resolver: where nvcc comes from -----------------------------------------------------


def test_plain_stacks_compile_with_toolkit_wheels_from_cuda_13_only() -> None:
    from envbuild.core.models import Stack, Unsatisfiable
    from envbuild.matrix import load_matrix_from
    from envbuild.request.parse import request_from_flags
    from envbuild.resolver import resolve

    matrix = load_matrix_from(None)

    def plain(framework: str, cuda: str | None = None) -> Stack | Unsatisfiable:
        request = request_from_flags(
            framework=framework,
            python="3.11",
            os_name="debian12",
            flavour="plain",
            gpus=("H100",),
            driver="580.65.06",
            cuda=cuda,
            compile_extensions=True,
        )
        return resolve(request, matrix)

    ok = plain("torch==2.15.*")
    assert isinstance(ok, Stack) and ok.base_image.builder is None
    assert any("toolkit wheels from PyPI" in n for n in ok.notes)
    refused = plain("torch==2.10.*", cuda="12.8")
    assert isinstance(refused, Unsatisfiable)
    assert any("wheels on PyPI hold no nvcc" in r for r in refused.reasons)


def test_a_devel_builder_compiles_with_its_own_nvcc() -> None:
    from envbuild.render.dockerfile import render_dockerfile

    lock = loads((EXAMPLE / "envbuild.lock").read_text())
    assert lock.build is not None
    devel = dataclasses.replace(
        lock,
        stack=dataclasses.replace(
            lock.stack,
            base_image=dataclasses.replace(
                lock.stack.base_image, builder="nvidia/cuda:13.0.2-devel-ubuntu24.04"
            ),
        ),
        build=dataclasses.replace(lock.build, toolchain="devel", toolchain_packages=()),
    )
    text = render_dockerfile(devel, options=RenderOptions())
    assert "FROM nvidia/cuda:13.0.2-devel-ubuntu24.04 AS builder" in text
    assert "CUDA_HOME=/usr/local/cuda " in text and "toolchain.lock" not in text
    assert set(builder_stage.context_files(devel)) == {
        "build-extensions.sh",
        "build-requirements.lock",
        f"sources/envbuild-vecadd-{builder_stage.cache_key(devel, next(p for p in devel.packages if p.sdist))}.lock",
    }
