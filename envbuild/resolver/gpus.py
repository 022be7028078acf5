"""GPU names as users and hosts write them -> the matrix's architectures."""

from __future__ import annotations

import re
from functools import lru_cache

from envbuild.core.errors import UserError
from envbuild.core.values import gpu_name_words
from envbuild.matrix import (
    Arch,
    HostPlatform,
    Matrix,
    OtherVendorGpu,
)

_SM_RE = re.compile(r"^(?:sm|compute)_(\d+)[af]?$", re.IGNORECASE)
_CC_RE = re.compile(r"^\d{1,2}\.\d$")
_LIST_URL = "https://developer.nvidia.com/cuda-gpus"


@lru_cache(maxsize=4096)
def _tokens(name: str) -> tuple[str, ...]:
    """The words of a name, kept: each target is matched against every known name (about 330,
    `_known_names`), so without the cache a 1,000-GPU request split 330,000 names into words
    (benchmarks/scale.py, section 8 of RESULTS.md)."""
    return gpu_name_words(name)


def _known_names(matrix: Matrix) -> list[tuple[tuple[str, ...], str, str]]:
    """(words, compute capability, name as written) of every GPU name: the [[arch]] rows' own,
    then NVIDIA's list (matrix/gpu_list.toml); `matrix check` keeps the two in agreement."""
    out = [(_tokens(g), a.cc, g) for a in matrix.archs for g in a.gpus]
    out += [(_tokens(row.name), row.cc, row.name) for row in matrix.listed_gpus]
    return [entry for entry in out if entry[0]]


def _by_name(matrix: Matrix, want: tuple[str, ...]) -> tuple[set[str], str]:
    """The compute capabilities a name means (empty: none) and the listed name that matched.
    An exact name wins; else the longest known name whose words start the wanted ones: NVML
    names carry form factor, memory and "Laptop GPU" ("H100 80GB HBM3", "A100-SXM4-80GB")."""
    names = _known_names(matrix)
    joined = "".join(want)
    exact = {cc: name for words, cc, name in names if "".join(words) == joined}
    if exact:
        return set(exact), next(iter(exact.values()))
    best_len = 0
    best: dict[str, str] = {}
    for words, cc, name in names:
        if want[: len(words)] == words:
            if len(words) > best_len:
                best_len, best = len(words), {cc: name}
            elif len(words) == best_len:
                best.setdefault(cc, name)
    return set(best), next(iter(best.values()), "")


def _unbuildable(matrix: Matrix, text: str, cc: str, name: str) -> UserError:
    """A GPU NVIDIA lists whose compute capability no CUDA release the matrix knows targets."""
    oldest = min(matrix.archs, key=lambda a: tuple(int(p) for p in a.cc.split(".")), default=None)
    since = f" (its oldest is {oldest.cc}, {oldest.family})" if oldest else ""
    return UserError(
        f"{text!r} ({name}) is compute capability {cc} on NVIDIA's list ({_LIST_URL}, "
        f"matrix/gpu_list.toml), and the matrix has no architecture {cc}{since}: no framework "
        "build envbuild knows runs on it",
        hint="leave this GPU out of the targets (matrix/gpus.toml lists the architectures "
        "envbuild builds for)",
        fields={"cc": cc},
    )


def parse_gpu(matrix: Matrix, text: str) -> Arch:
    """A GPU as users write it: a name ("H100", "RTX 5090", "NVIDIA H100 80GB HBM3"),
    "sm_90" or a compute capability "9.0". Unknown -> UserError (exit 2)."""
    raw = text.strip()
    by_cc = {a.cc: a for a in matrix.archs}
    m = _SM_RE.match(raw)
    if m:
        digits = m.group(1)
        cc = f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 2 else ""
        if cc in by_cc:
            return by_cc[cc]
        raise UserError(
            f"unknown GPU architecture {text!r}: the matrix has no compute capability {cc or '?'}",
            hint="use an sm_XX the matrix knows (" + ", ".join(a.sm for a in matrix.archs) + ")",
        )
    if _CC_RE.match(raw):
        if raw in by_cc:
            return by_cc[raw]
        raise UserError(
            f"unknown compute capability {text!r}",
            hint="known: " + ", ".join(a.cc for a in matrix.archs),
        )
    want = _tokens(raw)
    if want:
        ccs, name = _by_name(matrix, want)
        if not ccs and want[0] == "quadro":
            # NVIDIA's list names some Quadro parts without the brand ("T1000", "P620", the
            # mobile "RTX 3000"), which NVML spells "Quadro T1000"; the full name wins above.
            ccs, name = _by_name(matrix, want[1:])
        if len(ccs) > 1:
            ordered = sorted(ccs)
            raise UserError(
                f"GPU name {text!r} is ambiguous (compute capability {' or '.join(ordered)})",
                hint="give the compute capability instead, for example --gpu " + ordered[0],
            )
        if ccs:
            cc = next(iter(ccs))
            if cc in by_cc:
                return by_cc[cc]
            raise _unbuildable(matrix, text, cc, name)
    other = other_vendor(matrix, raw)
    if other is not None:
        raise UserError(
            f"{text!r} is not an NVIDIA GPU ({other.vendor})",
            hint="envbuild builds CUDA images, which run on NVIDIA GPUs only; name the NVIDIA "
            "GPUs of your hosts (matrix/gpus.toml)",
            fields={"vendor": other.vendor},
        )
    close = _gpu_suggestions(matrix, raw)
    raise UserError(
        f"unknown GPU {text!r}",
        hint=(
            "did you mean " + " or ".join(repr(c) for c in close) + "? Otherwise g"
            if close
            else "G"
        )
        + "ive a name from matrix/gpus.toml, its compute capability (for example 8.9) or "
        "sm_XX (sm_89)",
        fields={"suggestions": close} if close else {},
    )


def _gpu_suggestions(matrix: Matrix, raw: str) -> list[str]:
    """Names to offer for an unknown GPU (never picked for the user: "4090" or "A6000" may be
    what they meant, or not). A missing underscore ("sm90") gets its sm_XX."""
    key = "".join(_tokens(raw))
    if not key:
        return []
    m = re.fullmatch(r"(?:sm|compute)(\d+)[af]?", key)
    for a in matrix.archs:
        if m and a.sm == f"sm_{m.group(1)}":
            return [a.sm]
    buildable = {a.cc for a in matrix.archs}
    by_key: dict[str, str] = {}
    for words, cc, name in _known_names(matrix):
        if cc in buildable:
            by_key.setdefault("".join(words), name)
    inside = sorted(name for k, name in by_key.items() if key in k)
    if inside:
        return inside[:5]
    import difflib  # only for a GPU name nobody knows

    return [by_key[k] for k in difflib.get_close_matches(key, sorted(by_key), n=3, cutoff=0.6)]


def _names_match(name: str, want: tuple[str, ...]) -> bool:
    """The name's words equal the wanted words, or start them ("GH200 480GB")."""
    t = _tokens(name)
    return bool(t) and want[: len(t)] == t


def other_vendor(matrix: Matrix, text: str) -> OtherVendorGpu | None:
    """The non-NVIDIA vendor whose accelerator this name is ("AMD Instinct MI300X")."""
    want = tuple(w for w in _tokens(text) if w not in ("amd", "intel", "habana"))
    for row in matrix.other_vendors:
        for name in row.gpus:
            t = _tokens(name)
            if t and any(want[i : i + len(t)] == t for i in range(len(want))):
                return row
    return None


def host_platform_of(matrix: Matrix, text: str) -> HostPlatform | None:
    """The host platform row naming this GPU (GH200 -> aarch64), or None."""
    want = _tokens(text)
    for row in matrix.host_platforms:
        if any(_names_match(name, want) for name in row.gpus):
            return row
    return None
