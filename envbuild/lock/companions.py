"""The framework's index companions pinned beside it (pure): a torchvision, torchaudio or
triton build is made for one torch build, so when torch is a framework index's build (a local
label: `2.13.0+cpu`, `2.9.1+cu128`, from that index or a wheel folder holding its files), a
companion taken from PyPI is a build for another torch. It installs, and fails when imported
(torchvision: `RuntimeError: operator torchvision::nms does not exist`, seen with torch
2.13.0+cpu from a wheel folder and PyPI's torchvision 0.28.0, 2026-12-02). `lock` refuses it
before anything is built.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuild.core.errors import UnsatisfiableError
from envbuild.core.models import LockedPackage

INDEX_COMPANIONS = frozenset({"torchvision", "torchaudio", "torchtext", "torchdata", "triton"})
"""Packages the PyTorch index publishes with the framework's build labels ("+cu128"), built
for the same CUDA as torch (https://download.pytorch.org/whl/cu128 lists them)."""


def companion_constraints(framework: str, version: str) -> tuple[str, ...]:
    """The companions' release series for a torch 2.x release, as uv constraints (a package
    nothing asks for is not pulled in by them). torchaudio's versions match torch's
    (https://docs.pytorch.org/audio/main/installation.html, "Compatibility Matrix");
    torchvision 0.N pairs with torch 2.(N-15) (https://github.com/pytorch/vision#installation:
    2.0 -> 0.15 ... 2.9 -> 0.24). A wheel that declares no torch requirement (torchaudio 2.11.0)
    was otherwise taken beside torch 2.10.0: fairseq's lock, 2026-12-04."""
    try:
        release = Version(version).release
    except InvalidVersion:
        return ()
    if framework != "torch" or len(release) < 2 or release[0] != 2:
        return ()
    minor = release[1]
    return (f"torchaudio==2.{minor}.*", f"torchvision==0.{minor + 15}.*")


def companion_conflict(
    err: UnsatisfiableError, framework: str, version: str
) -> UnsatisfiableError | None:
    """uv's "no solution" when what failed is a companion's series (`companion_constraints`:
    no torchvision 0.30 for torch 2.15 on PyPI yet), said as envbuild's rule, not as a
    requirement the user never wrote; None for any other conflict."""
    text = f"{err.message}\n{err.hint}\n{err.fields}"
    named = [c for c in companion_constraints(framework, version) if _unavailable(c, text)]
    if not named:
        return None
    name, _, series = named[0].partition("==")
    release = Version(version).release
    return UnsatisfiableError(
        f"{name} pairs with one {framework} series, and no {name} {series} (the one for "
        f"{framework} {version}) is on the index: {err.message}",
        hint=f"allow an older {framework} series in [framework] requirement (torchvision 0.N "
        f"pairs with torch 2.(N-15), torchaudio 2.N with torch 2.N): envbuild then locks the "
        f"newest one whose {name} is on the index; or lock again once {name} {series} is",
        fields={
            **err.fields,
            "companion": named[0],
            "step_down": {
                "series": f"{release[0]}.{release[1]}",
                "why": f"its {name} ({series}) is not on the index yet",
            },
        },
    )


def _unavailable(constraint: str, text: str) -> bool:
    """Whether uv says no release of `constraint`'s series is on the index ("only torchvision
    <=0.29.2 is available and you require torchvision==0.30.*", "there is no version of
    torchvision==0.30.*"), not that the user's own range excludes it ("you require
    torchvision<0.25 and torchvision==0.25.*"): only then is a missing series the cause."""
    name = re.escape(constraint.partition("==")[0])
    series = re.escape(constraint)
    return bool(
        re.search(rf"only {name}\S* (?:is|are) available and you require {series}", text)
        or re.search(rf"(?:there is|there are) no versions? of {series}", text)
    )


def without_series(requirement: str, series: Sequence[str]) -> str:
    """The [framework] requirement with each release series in `series` ("2.15") left out:
    `torch` -> `torch!=2.15.*`, for resolving again when a series' companions are missing."""
    if not series:
        return requirement
    req = Requirement(requirement)
    for each in series:
        req.specifier &= SpecifierSet(f"!={each}.*")
    return str(req)


def _local(version: str) -> str | None:
    try:
        return Version(version).local
    except InvalidVersion:
        return None


def check_companions(framework: str, packages: Sequence[LockedPackage]) -> None:
    """UnsatisfiableError (exit 1) when the framework is pinned as a labelled build and a
    companion is not the build of the same label."""
    by_name = {p.name: p for p in packages}
    locked = by_name.get(framework)
    label = _local(locked.version) if locked is not None else None
    if locked is None or label is None:
        return
    wrong = [
        by_name[name]
        for name in sorted(by_name)
        if name in INDEX_COMPANIONS and _local(by_name[name].version) != label
    ]
    if not wrong:
        return
    shown = ", ".join(f"{p.name} {p.version} (from {p.source})" for p in wrong)
    raise UnsatisfiableError(
        f"{framework} is locked as the {label} build {locked.version} (from {locked.source}), "
        f"but {shown} is not the {label} build: it is made for another {framework} build and "
        "fails when imported",
        hint=f"put the +{label} wheels of {', '.join(p.name for p in wrong)} beside "
        f"{framework}'s in {locked.source} (download.pytorch.org/whl/{label}/ has them), or "
        f"let {framework} come from the index that has both",
        fields={
            "framework": f"{framework}=={locked.version}",
            "companions": [p.name for p in wrong],
        },
    )
