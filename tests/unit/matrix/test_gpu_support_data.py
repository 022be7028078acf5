"""The matrix's GPU-support data beyond kernels: last driver branches, cuDNN GPU ranges, host
platforms, other vendors' accelerators, known failures, and how `lock` and `render` use them.

Facts and their sources are in matrix/gpus.toml, matrix/cudnn.toml and the framework files;
the resolver's behaviour on them is covered by tests/cases/resolve/pub-*.toml.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from packaging.version import Version

from envbuild import matrix as mx
from envbuild.app import lock as lock_use_case
from envbuild.core.errors import LockError
from envbuild.core.resources import matrix_dir
from envbuild.render.dockerfile import RenderOptions, render_dockerfile
from tests.golden import fixtures


def _files() -> dict[str, str]:
    return mx.read_matrix_files(matrix_dir(), label="matrix")


def _problems(files: dict[str, str]) -> list[str]:
    return mx.collect(files)[1]


def test_last_driver_branches_are_kepler_470_and_maxwell_to_volta_580() -> None:
    m = mx.parse_matrix(_files())
    last = {a.sm: a.last_driver_branch for a in m.archs}
    assert last["sm_37"] == 470 and last["sm_35"] == 470
    assert {last[sm] for sm in ("sm_50", "sm_52", "sm_60", "sm_61", "sm_70")} == {580}
    assert last["sm_75"] is None and last["sm_90"] is None


def test_every_cudnn_row_has_a_gpu_range_and_911_drops_pre_turing() -> None:
    m = mx.parse_matrix(_files())
    cudnn = [lib for lib in m.libs if lib.library == "cudnn"]
    assert all(lib.min_cc and lib.max_cc for lib in cudnn)
    assert m.lib("cudnn", "9.10.2.21").min_cc == "5.0"  # type: ignore[union-attr]
    assert m.lib("cudnn", "9.11.0.98").min_cc == "7.5"  # type: ignore[union-attr]
    assert all(lib.forward_compatible == lib.version.startswith("9.") for lib in cudnn)


@pytest.mark.parametrize(
    ("table", "row", "problem"),
    [
        (
            "host_platform",
            'gpus = ["GH999"]\nplatform = "aarch64"\nsource = "x"\n',
            "GPU 'GH999' is not a name under any [[arch]]",
        ),
        (
            "host_platform",
            'gpus = ["GH200"]\nplatform = "arm64"\nsource = "x"\n',
            "platform 'arm64' must be one of",
        ),
        (
            "not_nvidia",
            'vendor = "Other"\ngpus = ["H100"]\nsource = "x"\n',
            "'H100' is also an NVIDIA GPU name",
        ),
        ("not_nvidia", 'vendor = "Other"\ngpus = ["X1"]\nsource = "x"\ncolour = 1\n', "colour"),
    ],
)
def test_gpu_tables_are_checked_strictly(table: str, row: str, problem: str) -> None:
    files = _files()
    files["matrix/gpus.toml"] += f"\n[[{table}]]\n{row}"
    assert any(problem in p for p in _problems(files)), _problems(files)


def test_last_driver_branch_must_be_a_branch_number() -> None:
    files = _files()
    files["matrix/gpus.toml"] = files["matrix/gpus.toml"].replace(
        "last_driver_branch = 470", "last_driver_branch = 47", 1
    )
    assert any("last_driver_branch 47 must be a branch number" in p for p in _problems(files))


def test_known_issue_needs_a_known_effect_and_target_archs() -> None:
    files = _files()
    files["matrix/tensorflow.toml"] = files["matrix/tensorflow.toml"].replace(
        'effect = "no_ptx_jit"', 'effect = "slow"'
    )
    files["matrix/tensorflow.toml"] = files["matrix/tensorflow.toml"].replace(
        'archs = ["sm_120"]\neffect', 'archs = ["compute_120"]\neffect'
    )
    problems = _problems(files)
    assert any("effect 'slow' must be one of no_ptx_jit" in p for p in problems)
    assert any("archs must list target architectures" in p for p in problems)


def test_a_cudnn_range_needs_its_floor() -> None:
    files = _files()
    files["matrix/tensorflow.toml"] = files["matrix/tensorflow.toml"].replace(
        'cudnn_range = ">=9.3.0.75,<10"', 'cudnn_range = "nine"', 1
    )
    assert any("cudnn_range 'nine' must be a version range" in p for p in _problems(files))


def test_fields_added_later_leave_old_fingerprints_alone() -> None:
    m = mx.parse_matrix(_files())
    turing = next(a for a in m.archs if a.sm == "sm_75")
    assert turing.last_driver_branch is None
    data = dataclasses.asdict(turing)
    for later in ("last_driver_branch", "memory_gib", "memory_source"):  # memory: never locked
        del data[later]
    old = hashlib.sha256(
        json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()
    ).hexdigest()
    assert mx.fingerprint_of(turing) == old
    bigger = dataclasses.replace(turing, memory_gib=(("T4", 32.0),), memory_source="https://x")
    assert mx.fingerprint_of(bigger) == old


def test_lock_refuses_a_pinned_cudnn_that_drops_the_target() -> None:
    m = mx.parse_matrix(_files())
    stack = dataclasses.replace(
        fixtures.gpu_lock().stack, cudnn="9.28.0.42", target_archs=("sm_70",)
    )
    with pytest.raises(LockError) as err:
        lock_use_case.check_pinned_cudnn(stack, m)
    assert "cuDNN 9.28.0.42" in err.value.message and "sm_70 is 7.0" in err.value.message
    lock_use_case.check_pinned_cudnn(dataclasses.replace(stack, cudnn="9.10.2.21"), m)


def test_lock_names_the_pypi_build_when_the_variant_index_is_unreachable() -> None:
    # The hint is the resolver's answer with PyPI builds only: for H100 + L4 on 570.124.06
    # that is 2.10.0 cu128 (PyPI's 2.11+ builds are CUDA 13, which needs driver >= 580).
    from envbuild.app.lock_reach import pypi_fit
    from envbuild.request.parse import request_from_flags

    m = mx.load_matrix()
    hopper = request_from_flags(gpus=("H100", "L4"), driver="570.124.06")
    assert pypi_fit(hopper, m) == (
        '[indexes] framework_index = "pypi" locks torch 2.10.0 cu128 from PyPI, the newest '
        "build there that fits"
    )
    cpu = request_from_flags(cpu=True)
    assert pypi_fit(cpu, m) is None  # PyPI's x86_64 torch wheels are CUDA ones


def test_aarch64_dockerfiles_name_their_platform() -> None:
    lock = dataclasses.replace(fixtures.gpu_lock(), platform="aarch64")
    text = render_dockerfile(lock, options=RenderOptions(), lock_text="lock text\n")
    froms = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert froms and all(line.startswith("FROM --platform=linux/arm64 ") for line in froms)
    x86 = render_dockerfile(fixtures.gpu_lock(), options=RenderOptions(), lock_text="x\n")
    assert not any("--platform" in line for line in x86.splitlines() if line.startswith("FROM"))


def test_every_torch_release_has_one_aarch64_pypi_default() -> None:
    m = mx.parse_matrix(_files())
    for release in m.releases_of("torch"):
        defaults = [
            b
            for b in m.builds_for("torch", release.version)
            if b.pypi_default and "aarch64" in b.platforms
        ]
        assert len(defaults) == 1, release.version
        cuda_from_211 = Version(release.version) >= Version("2.11")
        assert (defaults[0].cuda is not None) == cuda_from_211, release.version
