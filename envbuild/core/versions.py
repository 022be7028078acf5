"""Every version and specifier comparison, on `packaging` (never string comparison).

Driver versions ("570.124.06") and CUDA versions ("12.8.1") are PEP 440-compatible release
tuples, so `packaging.version.Version` orders them correctly.
"""

from __future__ import annotations

import re

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuild.core.errors import UserError


def parse_version(text: str, *, what: str = "version") -> Version:
    """Parse a version, raising a `UserError` that names `what` on bad input."""
    try:
        return Version(text.strip())
    # ValueError too: a component past Python's int-string limit (4300 digits, CPython's
    # int_max_str_digits) raises a plain ValueError, not InvalidVersion (tests/reliability).
    except (InvalidVersion, ValueError, TypeError, AttributeError):
        raise UserError(
            f"{what} {text!r} is not a version", hint=_version_hint(text, what)
        ) from None


def try_version(text: object) -> Version | None:
    """A version, or None for an empty or unparseable one: for facts read from hosts, where a
    missing or odd driver string is a finding to report, not an error to raise."""
    if not text:
        return None
    try:
        return Version(str(text))
    except (InvalidVersion, ValueError):  # ValueError: a part past the 4300-digit int limit
        return None


def _version_hint(text: str, what: str) -> str:
    if "driver" not in what:
        return f"write the {what} as dotted numbers, for example 12.8 or 12.8.1"
    query = "`nvidia-smi --query-gpu=driver_version --format=csv,noheader`"
    branch = str(text).strip().lower().removeprefix("r")
    if branch.isdigit():
        # NVIDIA names driver branches "R535"; the oldest driver of that branch is 535.
        return f"write the branch without the r: {branch} (or the full version that {query} prints)"
    return f"write the {what} as dotted numbers, for example 570.124.06 or 535 ({query} prints it)"


def parse_specifier(text: str, *, what: str = "version range") -> SpecifierSet:
    """Parse a specifier; a bare version "12.8" means "12.8.*"."""
    s = text.strip()
    if s and s[0].isdigit():
        s = f"=={s}.*" if s.count(".") < 2 else f"=={s}"
    try:
        spec = SpecifierSet(s)
        # Compare once now: a bound past Python's int-string limit (4300 digits) parses
        # lazily and would raise a plain ValueError mid-resolve (tests/reliability).
        for one in spec:
            one.contains("0", prereleases=True)
        return spec
    except (InvalidSpecifier, ValueError, TypeError):
        raise UserError(
            f"{what} {text!r} is not a version range",
            hint="write it as 12.8, ==12.8.*, >=12.6 or >=12.6,<13",
        ) from None


def major_minor(version: str) -> tuple[int, int]:
    """ "12.8.1" -> (12, 8)."""
    release = Version(version).release
    return (release[0], release[1] if len(release) > 1 else 0)


_DRIVER_SHAPE = re.compile(r"^(\d{1,9})(\.\d{1,3}){0,2}$")


def driver_problem(text: str) -> tuple[str, str] | None:
    """(message, hint) when `text` cannot be an NVIDIA Linux driver version, else None.

    Drivers are NNN, NNN.NN or NNN.NN.NN (535.104.05, 570.26; branches R418..R620 in
    https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html).
    A bare branch ("525") is valid: the resolver reads it as the newest update of the branch
    and says so. What nvidia-smi prints as "CUDA Version" (12.2) is not a driver."""
    value = text.strip()
    example = 'as nvidia-smi prints "Driver Version", for example 570.124.06'
    if not value:
        return "the driver version is empty", f"give the oldest driver on your hosts {example}"
    m = _DRIVER_SHAPE.match(value.lower().removeprefix("r"))
    if m is None:
        return None  # other syntax errors: parse_version's message
    branch = int(m.group(1))
    if branch < 100 and "." in value:
        return (
            f"{value!r} looks like a CUDA version (nvidia-smi's 'CUDA Version'), not a driver",
            f"give the driver itself {example}; the CUDA version nvidia-smi shows is the "
            "newest CUDA that driver supports",
        )
    if not 100 <= branch <= 999:
        return (
            f"{value!r} is not an NVIDIA driver version (expected NNN, NNN.NN or NNN.NN.NN)",
            f"give the oldest driver on your hosts {example}, or its branch (570)",
        )
    return None


def held_satisfies(version: Version, spec: SpecifierSet) -> bool:
    """Does an installed build satisfy a requirement's range? A build is asked for by the
    release it carries: NGC's `2.10.0a0+b4e4ee81d3` (a pre-release with a local label) is
    checked as itself, as its public part and as the release `2.10.0`, pre-releases allowed
    (PEP 440 leaves a build's local label out of ranges:
    https://packaging.python.org/en/latest/specifications/version-specifiers/#local-version-identifiers)."""
    public = Version(version.public)
    candidates = (version, public, Version(public.base_version))
    return any(spec.contains(v, prereleases=True) for v in candidates)
