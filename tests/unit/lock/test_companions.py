"""The framework's index companions must be the same build as the framework (lock/companions.py)."""

from __future__ import annotations

import pytest

from envbuild.core.errors import UnsatisfiableError
from envbuild.core.models import LockedPackage
from envbuild.lock.companions import check_companions, companion_conflict, companion_constraints

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


# --- the companions' release series --------------------------------------------------------


def test_the_series_follow_the_published_compatibility_tables() -> None:
    # torchvision's README table: torch 2.9 -> 0.24; torchaudio's matrix: versions match.
    assert companion_constraints("torch", "2.9.1") == ("torchaudio==2.9.*", "torchvision==0.24.*")
    assert companion_constraints("torch", "2.10.0+cu128") == (
        "torchaudio==2.10.*",
        "torchvision==0.25.*",
    )
    assert companion_constraints("torch", "1.13.1") == ()  # other rules before 2.0: none said
    assert companion_constraints("jax", "0.7.0") == ()


def test_a_missing_series_is_said_as_envbuilds_rule() -> None:
    """diffusers' examples/text_to_image on torch 2.15: PyPI had torchvision up to 0.29.2."""
    err = UnsatisfiableError(
        "the Python packages cannot be pinned together",
        hint="widen the project's requirements",
        fields={
            "cause": "only torchvision<=0.29.2 is available and you require torchvision==0.30.*"
        },
    )
    said = companion_conflict(err, "torch", "2.15.0")
    assert said is not None
    assert said.message.startswith(
        "torchvision pairs with one torch series, and no torchvision 0.30.* (the one for torch "
        "2.15.0) is on the index: "
    )
    assert said.hint.startswith("allow an older torch series in [framework] requirement")
    assert said.fields["step_down"]["series"] == "2.15"
    other = UnsatisfiableError("numpy<1 conflicts", hint="x", fields={})
    assert companion_conflict(other, "torch", "2.15.0") is None


def test_the_users_own_range_on_a_companion_is_not_called_missing() -> None:
    """torchvision<0.25 asked by the project beside torch 2.10: the series is on the index,
    the user's range excludes it; that is the project's conflict, not a missing release."""
    err = UnsatisfiableError(
        "the Python packages cannot be pinned together",
        fields={
            "cause": "Because you require torchvision<0.25 and torchvision==0.25.*, we can "
            "conclude that your requirements are unsatisfiable."
        },
    )
    assert companion_conflict(err, "torch", "2.10.0") is None
    missing = UnsatisfiableError(
        "Because there is no version of torchvision==0.25.* and you require torchvision==0.25.*"
    )
    assert companion_conflict(missing, "torch", "2.10.0") is not None
