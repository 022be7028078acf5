"""Requirements that only an sdist provides and that hold no compiled code: classified from
the sdist's file list at lock time (nothing run), locked without [image] compile_extensions,
recorded as `kind = "pure"`, and built into wheels in a plain builder stage FROM the image's
own base (no devel image, no nvcc, no arch list, no extension claim in the smoke plan).
A compiled sdist without compile_extensions is still refused at lock time."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from envbuild.app import lock_source as source_lock
from envbuild.cli.commands.lock import _built_from_source
from envbuild.core.errors import LockError
from envbuild.core.models import LockedPackage, Request
from envbuild.cuda import extensions
from envbuild.lock import pins as pydeps
from envbuild.lock.format import dumps, loads
from envbuild.lock.pinfailure import classify_failure
from envbuild.render.dockerfile import RenderOptions, build_context, requirements_text
from envbuild.smoke.plan import _extension_plan
from tests.golden.fixtures import pure_sdist_lock
from tests.sdist import make_sdist

REPO = Path(__file__).resolve().parents[3]
PUREDEP = REPO / "tests" / "fixtures" / "sdists" / "puredep"
VECADD = REPO / "images" / "torch-ext" / "wheels" / "envbuild_vecadd-0.1.0.tar.gz"

UV_SOURCE_ONLY = """error: No solution found when resolving dependencies
  cause: Because envbuild-puredep==0.6.0 has no usable wheels and you require envbuild-puredep==0.6.0, we can conclude that your requirements are unsatisfiable.

hint: Wheels are required for `envbuild-puredep` because building from source is disabled for all packages (i.e., with `--no-build`)
"""


def _tar(files: dict[str, str]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"pkg-1.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


PKG_INFO = "Metadata-Version: 2.2\nName: pkg\nVersion: 1.0\n"


def test_the_fixture_sdist_is_pure_python() -> None:
    name, data = make_sdist(PUREDEP)
    meta = extensions.sdist_metadata(data, name)
    assert meta.compiled == "" and meta.static
    assert meta.requires_dist == ("packaging",)
    assert meta.build_requires == ("flit_core>=3.2,<4",)


@pytest.mark.parametrize(
    ("files", "why"),
    [
        ({"src/fast.c": ""}, "it holds src/fast.c"),
        ({"kernels/k.cu": ""}, "it holds kernels/k.cu"),
        ({"pkg/speed.pyx": ""}, "it holds pkg/speed.pyx"),
        ({"setup.py": "setup(ext_modules=[])"}, "its setup.py names ext_modules"),
        ({"setup.py": "from torch.utils.cpp_extension import CUDAExtension"}, "CUDAExtension"),
        (
            {"pyproject.toml": '[build-system]\nbuild-backend = "scikit_build_core.build"\n'},
            "its build backend is scikit_build_core.build",
        ),
        (
            {"pyproject.toml": '[build-system]\nrequires = ["setuptools", "pybind11"]\n'},
            "it builds with pybind11",
        ),
    ],
)
def test_compiled_code_is_read_from_the_file_list_and_texts(
    files: dict[str, str], why: str
) -> None:
    meta = extensions.sdist_metadata(_tar({"PKG-INFO": PKG_INFO, **files}), "pkg-1.0.tar.gz")
    assert why in meta.compiled


@pytest.mark.parametrize(
    "backend", ["hatchling.build", "poetry.core.masonry.api", "pdm.backend", None]
)
def test_pure_backends_and_plain_setup_py_are_pure(backend: str | None) -> None:
    system = f'[build-system]\nbuild-backend = "{backend}"\n' if backend else ""
    files = {"PKG-INFO": PKG_INFO, "pkg/__init__.py": "", "pyproject.toml": system}
    files["setup.py"] = "from setuptools import setup\nsetup(packages=['pkg'])\n"
    meta = extensions.sdist_metadata(_tar(files), "pkg-1.0.tar.gz")
    assert meta.compiled == ""


def _pylock(sdist: Path) -> str:
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    return f"""lock-version = "1.0"
created-by = "uv"

[[packages]]
name = "envbuild-puredep"
version = "0.6.0"
sdist = {{ url = "{sdist.as_uri()}", hashes = {{ sha256 = "{sha}" }} }}

[[packages]]
name = "packaging"
version = "25.0"
wheels = [{{ url = "https://files.pythonhosted.org/p/packaging-25.0-py3-none-any.whl", hashes = {{ sha256 = "{"c" * 64}" }} }}]
"""


def _replay(pylock: str, seen: list[pydeps.PinRequest]) -> source_lock.Pin:
    """uv's answers: wheels only is refused (only an sdist), then the sdist is locked."""

    def pin(req: pydeps.PinRequest) -> pydeps.PinResult:
        seen.append(req)
        if not req.source_packages:
            raise classify_failure("uv", UV_SOURCE_ONLY, req)
        return pydeps.PinResult(
            pydeps.parse_pylock(pylock, req), "uv", tuple(pydeps.sdist_urls(pylock).items())
        )

    return pin


def _req() -> pydeps.PinRequest:
    return pydeps.PinRequest(requirements=("envbuild-puredep==0.6.0",), python="3.12")


def test_a_pure_sdist_locks_without_compile_extensions(tmp_path: Path) -> None:
    name, data = make_sdist(PUREDEP)
    sdist = tmp_path / name
    sdist.write_bytes(data)
    seen: list[pydeps.PinRequest] = []
    out = source_lock.pin_allowing_sources(
        _replay(_pylock(sdist), seen), _req(), Request(framework="torch")
    )
    dep = next(p for p in out.result.packages if p.name == "envbuild-puredep")
    assert dep.sdist and dep.pure and dep.build_requires == ("flit_core>=3.2,<4",)
    assert seen[-1].dependency_metadata == (
        pydeps.DependencyMetadata("envbuild-puredep", "0.6.0", ("packaging",)),
    )


def test_a_compiled_sdist_without_compile_extensions_is_refused(tmp_path: Path) -> None:
    sdist = tmp_path / "envbuild_puredep-0.6.0.tar.gz"
    sdist.write_bytes(VECADD.read_bytes())  # compiled code under the fixture's name
    with pytest.raises(LockError) as err:
        source_lock.pin_allowing_sources(
            _replay(_pylock(sdist), []), _req(), Request(framework="torch")
        )
    assert err.value.exit_code == 2 and "compile_extensions = true" in err.value.hint
    assert "holds compiled code (it holds csrc/vecadd.cpp)" in err.value.message


def test_the_builder_of_pure_sdists_needs_no_toolchain_and_no_target_gpus() -> None:
    lock = pure_sdist_lock()
    stack = dataclasses.replace(lock.stack, target_archs=())  # no [targets] gpus needed
    flit = LockedPackage("flit-core", "3.12.0", ("sha256:" + "d" * 64,), "https://pypi.org/simple")
    seen: list[pydeps.PinRequest] = []

    def pin(req: pydeps.PinRequest) -> pydeps.PinResult:
        seen.append(req)
        return pydeps.PinResult((flit,), "uv")

    build = source_lock.lock_build(pin, _req(), stack, lock.packages)
    assert build is not None and build.toolchain == "none" and build.cuda_archs == ()
    assert build.toolchain_packages == () and build.packages == (flit,)
    assert seen[0].requirements == ("flit_core>=3.2,<4",)  # only the build requirements
    assert "torch==2.7.1+cu128" in seen[0].constraints  # against the image's own pins


def test_the_lock_records_the_kind_and_round_trips() -> None:
    lock = pure_sdist_lock()
    text = dumps(lock)
    assert 'kind = "pure"' in text and 'toolchain = "none"' in text
    again = loads(text)
    assert again.build == lock.build
    assert sorted(again.packages, key=lambda p: p.name) == sorted(
        lock.packages, key=lambda p: p.name
    )


def test_the_dockerfile_builds_wheels_in_a_plain_builder_of_the_image_base(
    tmp_path: Path,
) -> None:
    from envbuild.matrix import load_matrix_from

    lock = pure_sdist_lock()
    text = dumps(lock)
    files = build_context(
        lock, text, image_dir=tmp_path, options=RenderOptions(), matrix=load_matrix_from(None)
    )
    dockerfile = files["Dockerfile"].decode()
    base = lock.stack.base_image.ref
    assert dockerfile.count(f"FROM {base}") == 2 and "AS builder" in dockerfile
    for compiled in ("devel", "TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "build-essential", "nvcc"):
        assert compiled not in dockerfile, compiled
    assert "ENVBUILD_TOOLCHAIN=none" in dockerfile
    assert "toolchain.lock" not in files and "build-requirements.lock" in files
    assert "envbuild-puredep" not in requirements_text(lock)  # the builder builds it
    specs = [n for n in files if n.startswith("sources/envbuild-puredep-")]
    assert len(specs) == 1 and b"--hash=sha256:" in files[specs[0]]
    plan = json.loads(files["plan.json"])
    assert plan["extensions"] == [] and plan["target_ccs"] == []


def test_no_extension_claim_in_the_smoke_plan_or_the_lock_output() -> None:
    from envbuild.matrix import load_matrix_from

    lock = pure_sdist_lock()
    assert _extension_plan(lock, load_matrix_from(None)) == ([], [], [])
    (source,) = _built_from_source(lock)
    assert source["pure"] and source["cuda_archs"] == [] and source["toolchain"] == "no compiler"
