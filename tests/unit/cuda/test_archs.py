"""envbuild/cuda/archs.py: the one "does this GPU run this build" rule, shared by the resolver and
validate, and its agreement with the payload's stdlib copy."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envbuild.cuda.archs import ArchRules, coverage, covers, parse_arch, sort_archs
from envbuild.matrix import Arch, load_matrix
from envbuild.payload import smoke_checks
from envbuild.preflight import validate

ORIN = ArchRules(tegra=frozenset({(8, 7)}))


@pytest.mark.parametrize(
    ("arch", "cc", "expected"),
    [
        # CUDA C++ Programming Guide, Binary Compatibility: same major, device minor >= cubin's.
        ("sm_80", (8, 6), "cubin"),
        ("sm_80", (8, 9), "cubin"),
        ("sm_86", (8, 0), None),  # an sm_86 cubin does not run on an A100
        ("sm_90", (10, 0), None),  # never across majors
        ("sm_120", (12, 1), "cubin"),  # GB10 runs sm_120 cubins
        # PTX Compatibility: JIT for any capability >= the PTX's.
        ("compute_90", (12, 0), "ptx"),
        ("compute_90", (8, 9), None),
        # Arch-specific ("a"): exactly X.Y; family ("f"): same major, minor >= Y.
        ("sm_90a", (9, 0), "cubin"),
        ("compute_90a", (10, 0), None),
        ("sm_100a", (10, 3), None),
        ("sm_100f", (10, 3), "cubin"),
        ("compute_100f", (12, 0), None),
    ],
)
def test_covers_desktop(arch: str, cc: tuple[int, int], expected: str | None) -> None:
    assert covers(arch, cc) == expected


@pytest.mark.parametrize(
    ("arch", "cc", "expected"),
    [
        # "Binary compatibility is supported only for the desktop. It is not supported for
        # Tegra. Also, the binary compatibility between desktop and Tegra is not supported."
        ("sm_80", (8, 7), None),
        ("sm_86", (8, 7), None),
        ("sm_87", (8, 7), "cubin"),
        ("sm_87", (8, 9), None),  # a Tegra cubin does not run on a desktop GPU either
        ("compute_80", (8, 7), "ptx"),  # PTX is still JIT-compiled on Tegra
    ],
)
def test_covers_tegra(arch: str, cc: tuple[int, int], expected: str | None) -> None:
    assert covers(arch, cc, ORIN.tegra) == expected


def test_coverage_names_the_cubin_the_driver_loads_whatever_the_order() -> None:
    for archs in (("sm_80", "sm_86", "sm_90"), ("sm_90", "sm_86", "sm_80")):
        assert coverage(archs, "8.9") == ("cubin", "sm_86")
    assert coverage(("sm_80", "compute_80", "compute_90"), "12.0") == ("ptx", "compute_90")
    assert coverage(("sm_80", "compute_80"), "8.6") == ("cubin", "sm_80")  # cubin before PTX
    assert coverage((), "9.0") == (None, None)


def test_rules_from_the_shipped_matrix() -> None:
    rules = ArchRules.from_archs(load_matrix().archs)
    # Jetson Nano, TX2, Xavier, Orin, Thor (both numberings) are Tegra; desktop GPUs are not.
    assert {(5, 3), (6, 2), (7, 2), (8, 7), (10, 1), (11, 0)} <= rules.tegra
    assert not {(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0), (12, 1)} & rules.tegra
    assert rules.renamed_cc((10, 1)) == (11, 0)
    # Thor under CUDA 12.x numbering: a desktop sm_100 cubin does not run; its own sm_101
    # cubin does, and so does an sm_110 cubin (the same GPU after the CUDA 13 rename).
    assert coverage(("sm_90", "sm_100", "sm_120"), "10.1", rules) == (None, None)
    assert coverage(("sm_100", "sm_101"), "10.1", rules) == ("cubin", "sm_101")
    assert coverage(("sm_100", "sm_110"), "10.1", rules) == ("cubin", "sm_110")


def test_from_archs_reads_family_and_jetson_names() -> None:
    def row(cc: str, family: str, gpus: tuple[str, ...]) -> Arch:
        sm = "sm_" + cc.replace(".", "")
        return Arch(cc, sm, family, gpus, first_cuda=None, last_cuda=None, source="test row")

    rows = [
        row("8.7", "Ampere (Tegra)", ()),
        row("7.2", "Volta", ("Jetson AGX Xavier",)),
        row("8.6", "Ampere", ("A10", "Jetson-like")),
    ]
    assert ArchRules.from_archs(rows).tegra == frozenset({(8, 7), (7, 2)})


def test_validate_uses_the_same_rule() -> None:
    rules = ArchRules.from_archs(load_matrix().archs)
    assert validate.arch_coverage(("sm_80", "sm_86"), "8.7", rules) == ("none", "")
    assert validate.arch_coverage(("sm_80", "sm_86"), "8.7") == ("cubin", "sm_86")  # desktop
    assert validate.arch_coverage(("sm_80", "bogus", "sm_86"), "8.6") == ("cubin", "sm_86")


def test_parse_and_sort() -> None:
    assert parse_arch("sm_121a") == ("sm", 12, 1, "a")
    assert parse_arch("compute_90") == ("compute", 9, 0, "")
    for bad in ("sm_9", "sm90", "gfx90a", "sm_90x"):
        with pytest.raises(ValueError):
            parse_arch(bad)
    # Numeric order whatever the input order (test_resolver.py has the cubin/PTX order).
    assert sort_archs(["sm_120", "sm_75", "sm_100"]) == ("sm_75", "sm_100", "sm_120")


# The in-image payload keeps a stdlib copy (it runs without envbuild installed): on desktop
# GPUs both must give the same verdict and name the same arch, for every build in the matrix.


def _desktop_ccs() -> list[str]:
    m = load_matrix()
    rules = ArchRules.from_archs(m.archs)
    return [a.cc for a in m.archs if parse_arch(a.sm)[1:3] not in rules.tegra]


def test_payload_copy_agrees_on_every_matrix_build() -> None:
    m = load_matrix()
    builds = {tuple(b.archs) for b in m.builds if b.archs}
    assert builds
    for archs in sorted(builds):
        for cc in _desktop_ccs():
            how, arch = coverage(archs, cc)
            covered, said = smoke_checks.arch_covers(cc, archs)
            assert covered == (how is not None), (archs, cc, said)
            if how == "cubin":
                assert said == f"cubin {arch}", (archs, cc)
            elif how == "ptx":
                assert said.startswith(f"PTX {arch} "), (archs, cc)


ARCH_NAMES = st.builds(
    lambda kind, major, minor, suffix: f"{kind}_{major}{minor}{suffix}",
    st.sampled_from(["sm", "compute"]),
    st.integers(min_value=3, max_value=13),
    st.integers(min_value=0, max_value=9),
    st.sampled_from(["", "", "a", "f"]),
)


@given(
    archs=st.lists(ARCH_NAMES, max_size=6),
    major=st.integers(min_value=3, max_value=13),
    minor=st.integers(min_value=0, max_value=9),
)
def test_payload_copy_agrees_on_any_desktop_build(archs: list[str], major: int, minor: int) -> None:
    cc = f"{major}.{minor}"
    how, _ = coverage(archs, cc)
    covered, _said = smoke_checks.arch_covers(cc, archs)
    assert covered == (how is not None)


def test_payload_copy_agrees_on_tegra_gpus() -> None:
    """On Jetson (integrated) GPUs the payload takes only an exact cubin, as archs.py does;
    renamed capabilities (Thor) are left out: the payload sees the number its driver reports."""
    m = load_matrix()
    rules = ArchRules.from_archs(m.archs)
    renamed = {cc for pair in rules.renamed for cc in pair}
    tegra = sorted(f"{a}.{b}" for a, b in rules.tegra if (a, b) not in renamed)
    assert tegra  # the matrix knows Jetson GPUs (Xavier 7.2, Orin 8.7, ...)
    builds = {tuple(b.archs) for b in m.builds if b.archs}
    for archs in sorted(builds):
        for cc in tegra:
            how, arch = coverage(archs, cc, rules)
            covered, said = smoke_checks.arch_covers(cc, archs, tegra=True)
            assert covered == (how is not None), (archs, cc, said)
            if how == "cubin":
                assert said == f"cubin {arch}", (archs, cc)


def test_payload_tegra_rule_refuses_a_desktop_cubin_of_the_same_major() -> None:
    # sm_80 runs on a desktop 8.6 but not on Orin (8.7, Tegra): "Binary compatibility is
    # supported only for the desktop" (CUDA C++ Programming Guide).
    assert smoke_checks.arch_covers("8.6", ["sm_80"]) == (True, "cubin sm_80")
    assert smoke_checks.arch_covers("8.7", ["sm_80"], tegra=True) == (
        False,
        "no cubin or PTX for it",
    )
    assert smoke_checks.arch_covers("8.7", ["sm_80", "sm_87"], tegra=True) == (True, "cubin sm_87")
    check = smoke_checks.check_archs(["8.7"], ["sm_80"], framework="torch", tegra_ccs=["8.7"])
    assert check["status"] == "fail"
