"""The framework's index companions must be the same build as the framework (lock/companions.py)."""

from __future__ import annotations

import pytest

from envbuild.core.errors import UnsatisfiableError
from envbuild.core.models import LockedPackage
from envbuild.lock.companions import check_companions

WHEELS = "/opt/wheels"
PYPI = "https://pypi.org/simple"


def pkg(name: str, version: str, source: str) -> LockedPackage:
    return LockedPackage(name=name, version=version, hashes=("sha256:" + "0" * 64,), source=source)


def test_a_pypi_companion_of_a_labelled_framework_build_is_refused() -> None:
    # Seen: torch 2.13.0+cpu from a wheel folder, PyPI's torchvision 0.28.0 (its CUDA build):
    # "RuntimeError: operator torchvision::nms does not exist" when imported in the image.
    packages = [pkg("torch", "2.13.0+cpu", WHEELS), pkg("torchvision", "0.28.0", PYPI)]
    with pytest.raises(UnsatisfiableError) as info:
        check_companions("torch", packages)
    assert info.value.message.startswith(
        "torch is locked as the cpu build 2.13.0+cpu (from /opt/wheels), but torchvision "
        "0.28.0 (from https://pypi.org/simple) is not the cpu build"
    )
    assert "put the +cpu wheels of torchvision beside torch's in /opt/wheels" in info.value.hint
    assert info.value.exit_code == 1


@pytest.mark.parametrize(
    "packages",
    [
        [pkg("torch", "2.10.0", PYPI), pkg("torchvision", "0.25.0", PYPI)],  # both PyPI's
        [pkg("torch", "2.13.0+cpu", WHEELS), pkg("torchvision", "0.28.0+cpu", WHEELS)],
        [pkg("torch", "2.13.0+cpu", WHEELS), pkg("numpy", "2.2.6", PYPI)],  # no companion
        [pkg("numpy", "2.2.6", PYPI)],  # no framework pinned
    ],
)
def test_matching_builds_pass(packages: list[LockedPackage]) -> None:
    check_companions("torch", packages)
