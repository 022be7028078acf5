"""The framework-base template with source packages and a project (templates/framework.
Dockerfile.j2): the builder is the base itself, only the compiled wheels reach the final stage,
and a builder without nvcc says so in words the build error carries."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

from envbuild.build.buildlog import compile_failure
from envbuild.matrix import load_matrix_from
from envbuild.render.dockerfile import RenderOptions, build_context, render_dockerfile
from tests.golden import fixtures

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "templates" / "build-extensions.sh"


def _render(lock: fixtures.Lock, **options: object) -> str:
    return render_dockerfile(lock, options=RenderOptions(**options), lock_text="x\n")  # type: ignore[arg-type]


def test_buildkit_installs_the_wheels_through_a_mount_of_the_builder() -> None:
    text = _render(fixtures.framework_ext_lock(), buildkit=True)
    assert text.count(f"FROM {fixtures.NGC_REF}") == 2
    assert (
        "RUN --mount=type=bind,from=builder,source=/opt/envbuild/built,target=/opt/envbuild/built"
        " \\\n    python -m pip install --no-cache-dir --no-deps --no-index "
        "/opt/envbuild/built/*.whl\n"
    ) in text
    assert "COPY --from=builder" not in text
    assert "--mount=type=cache,target=/root/.cache/envbuild-built" in text


def test_only_sources_means_no_requirements_to_install(tmp_path: Path) -> None:
    lock = fixtures.framework_ext_lock()
    lock = dataclasses.replace(lock, packages=tuple(p for p in lock.packages if p.sdist))
    text = _render(lock)
    assert "-r /opt/envbuild/requirements.lock" not in text
    wheels = tmp_path / "wheels"  # the wheelhouse the sdist was locked from (empty here)
    wheels.mkdir()
    options = RenderOptions(find_links=wheels)
    files = build_context(
        lock, "x\n", image_dir=tmp_path, options=options, matrix=load_matrix_from(None)
    )
    assert sorted(n for n in files if not n.startswith("payload/")) == [
        "Dockerfile",
        "build-extensions.sh",
        "build-requirements.lock",
        "constraints.txt",
        "envbuild.lock",
        "plan.json",
        "requirements.lock",
        f"sources/envbuild-vecadd-{_key(lock)}.lock",
    ]
    assert b"envbuild-vecadd" not in files["requirements.lock"]


def _key(lock: fixtures.Lock) -> str:
    from envbuild.render.builder_stage import cache_key

    return cache_key(lock, lock.packages[0])


def test_a_builder_without_nvcc_fails_with_the_package_names(tmp_path: Path) -> None:
    (tmp_path / "sources").mkdir()
    (tmp_path / "sources" / "envbuild-vecadd-0123456789abcdef.lock").write_text("")
    script = SCRIPT.read_text().replace("/opt/envbuild/sources", str(tmp_path / "sources"))
    env = {
        "PATH": "/usr/bin:/bin",
        "CUDA_HOME": str(tmp_path / "no-cuda"),
        "TORCH_CUDA_ARCH_LIST": "9.0",
    }
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    found = compile_failure(done.stdout)
    assert found is not None
    message, _hint = found
    assert message.startswith(
        "compiling envbuild-vecadd failed in the builder stage (TORCH_CUDA_ARCH_LIST='9.0', "
    )
    assert message.endswith(
        f"its last lines:\nenvbuild: no nvcc on PATH or in CUDA_HOME={tmp_path}/no-cuda: the "
        "builder image is not a CUDA devel image (NGC's framework containers are; nvidia/cuda "
        "*-runtime images and slim bases are not)"
    )
