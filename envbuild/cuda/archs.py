"""Does this GPU run this build? The one rule, shared by the resolver and `envbuild validate`.

Pure: no I/O, no matrix loading; callers pass what the matrix knows (which capabilities are
Tegra, which archs were renamed) as an `ArchRules`. The in-image smoke payload keeps its own
stdlib copy (envbuild/payload/smoke_checks.py `arch_covers`), by design: it must run without
envbuild installed; tests/unit/cuda/test_archs.py checks that both agree on desktop GPUs.

Rules (CUDA C++ Programming Guide, "Binary Compatibility" and "PTX Compatibility",
https://docs.nvidia.com/cuda/cuda-c-programming-guide/#binary-compatibility; arch-specific and
family targets: CUDA 12.9 release notes and `ptxas --help` of the PyPI nvidia-cuda-nvcc wheels):

- a cubin ``sm_XY`` runs on a GPU of the same major X and minor >= Y (sm_80 runs on 8.6 and
  8.9; sm_86 does not run on 8.0; sm_90 does not run on 10.0 or 12.0);
- an arch-specific cubin or PTX ``sm_XYa``/``compute_XYa`` runs only on exactly X.Y;
- a family target ``sm_XYf``/``compute_XYf`` runs on the same major with minor >= Y;
- PTX ``compute_XY`` is JIT-compiled by the driver for any GPU of capability >= X.Y;
- Tegra (Jetson) GPUs: "Binary compatibility is supported only for the desktop. It is not
  supported for Tegra. Also, the binary compatibility between desktop and Tegra is not
  supported." (same guide): a cubin runs on a Tegra GPU only when built for exactly its
  capability, and a Tegra cubin runs on nothing else;
- a renamed architecture (Jetson Thor: sm_101 in CUDA 12.8/12.9, sm_110 from CUDA 13.0,
  nvCOMPDx/cuRANDDx release notes) is reached by builds for either name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Protocol

__all__ = [
    "ArchRules",
    "Coverage",
    "cc_tuple",
    "coverage",
    "covers",
    "parse_arch",
    "sort_archs",
]

Coverage = Literal["cubin", "ptx"]

_ARCH_RE = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


@lru_cache(maxsize=512)
def parse_arch(arch: str) -> tuple[str, int, int, str]:
    """ "sm_90a" -> ("sm", 9, 0, "a"); "compute_120" -> ("compute", 12, 0, "").

    The last digit is the minor (sm_100 = 10.0, sm_121 = 12.1). ValueError when malformed."""
    m = _ARCH_RE.match(arch.strip())
    if not m or len(m.group(2)) < 2:
        raise ValueError(f"not an architecture: {arch!r}")
    digits = m.group(2)
    return (m.group(1), int(digits[:-1]), int(digits[-1]), m.group(3))


@lru_cache(maxsize=512)
def cc_tuple(cc: str) -> tuple[int, int]:
    """ "8.6" -> (8, 6); "12" -> (12, 0)."""
    major, _, minor = cc.strip().partition(".")
    return (int(major), int(minor or 0))


def sort_archs(archs: Iterable[str]) -> tuple[str, ...]:
    """Numeric order: sm_50 ... sm_120, cubins before PTX of the same capability."""

    def key(a: str) -> tuple[int, int, int, str]:
        kind, major, minor, suffix = parse_arch(a)
        return (major, minor, 0 if kind == "sm" else 1, suffix)

    return tuple(sorted(set(archs), key=key))


class _ArchRow(Protocol):
    """What ArchRules needs of a matrix `Arch` row (kept structural: no matrix import)."""

    @property
    def cc(self) -> str: ...
    @property
    def sm(self) -> str: ...
    @property
    def family(self) -> str: ...
    @property
    def gpus(self) -> tuple[str, ...]: ...
    @property
    def renamed_to(self) -> str | None: ...


@dataclass(frozen=True)
class ArchRules:
    """The matrix facts the coverage rule needs; the default knows no Tegra GPU, no rename."""

    tegra: frozenset[tuple[int, int]] = frozenset()
    """Capabilities of Tegra (Jetson) GPUs: no cubin compatibility across minors or with
    desktop cubins."""
    renamed: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = ()
    """(old capability, new capability): the same GPU under a later CUDA's numbering."""

    @classmethod
    def from_archs(cls, archs: Iterable[_ArchRow]) -> ArchRules:
        """From the matrix's arch rows: Tegra when the family says so ("Ampere (Tegra)") or
        every named GPU of the arch is a Jetson; renames from `renamed_to`."""
        rows = list(archs)
        by_sm = {a.sm: a for a in rows}
        tegra = frozenset(
            cc_tuple(a.cc)
            for a in rows
            if "tegra" in a.family.lower()
            or (a.gpus and all(g.startswith("Jetson") for g in a.gpus))
        )
        renamed = tuple(
            sorted(
                (cc_tuple(a.cc), cc_tuple(by_sm[a.renamed_to].cc))
                for a in rows
                if a.renamed_to and a.renamed_to in by_sm
            )
        )
        return cls(tegra=tegra, renamed=renamed)

    def renamed_cc(self, cc: tuple[int, int]) -> tuple[int, int] | None:
        return next((new for old, new in self.renamed if old == cc), None)


@lru_cache(maxsize=8192)
def covers(
    arch: str, cc: tuple[int, int], tegra: frozenset[tuple[int, int]] = frozenset()
) -> Coverage | None:
    """How one build arch reaches a GPU of compute capability `cc`: "cubin", "ptx" or None
    (module docstring for the rules and their source)."""
    kind, major, minor, suffix = parse_arch(arch)
    if suffix == "a" or (kind == "sm" and ((major, minor) in tegra or cc in tegra)):
        # Arch-specific code, or a Tegra cubin / a cubin on a Tegra GPU: exactly X.Y.
        ok = (major, minor) == cc
    elif kind == "sm" or suffix == "f":
        ok = major == cc[0] and minor <= cc[1]
    else:
        ok = (major, minor) <= cc
    if not ok:
        return None
    return "cubin" if kind == "sm" else "ptx"


@lru_cache(maxsize=8192)
def _coverage_one(
    archs: tuple[str, ...], cc: tuple[int, int], tegra: frozenset[tuple[int, int]]
) -> tuple[Coverage | None, str | None]:
    ptx: str | None = None
    # Highest first: the driver loads the closest cubin, and JITs the newest PTX that fits
    # only when no cubin does (Programming Guide, "Binary Compatibility"; the payload's
    # arch_covers names the same one).
    for a in reversed(sort_archs(archs)):
        how = covers(a, cc, tegra)
        if how == "cubin":
            return ("cubin", a)
        if how == "ptx" and ptx is None:
            ptx = a
    return ("ptx", ptx) if ptx else (None, None)


_NO_RULES = ArchRules()


def coverage(
    archs: Sequence[str], cc: str | tuple[int, int], rules: ArchRules = _NO_RULES
) -> tuple[Coverage | None, str | None]:
    """("cubin", arch) when a cubin runs on `cc`; ("ptx", arch) when only PTX can be JIT
    compiled for it (the driver then needs the build's toolkit floor); (None, None).

    Deterministic whatever order the build lists its archs in: the highest fitting cubin (or
    PTX) is named, the one the driver uses."""
    dev = cc_tuple(cc) if isinstance(cc, str) else cc
    build = tuple(archs)
    how = _coverage_one(build, dev, rules.tegra)
    if how[0] is None:
        new = rules.renamed_cc(dev)
        if new is not None:
            return _coverage_one(build, new, rules.tegra)
    return how


def arch_coverage(
    archs: Sequence[str], cc: str, rules: ArchRules | None = None
) -> tuple[Literal["cubin", "ptx", "none"], str]:
    """How a build's archs cover a device: a cubin, else PTX to JIT, else nothing (`coverage`,
    the rule the resolver uses). Names that are not architectures (a hand-edited lock) are
    ignored."""
    valid = [a for a in archs if _is_arch(a)]
    how, arch = coverage(valid, cc, rules or ArchRules())
    return (how or "none", arch or "")


def _is_arch(text: str) -> bool:
    try:
        parse_arch(text)
    except ValueError:
        return False
    return True
