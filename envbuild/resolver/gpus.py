"""GPU names as users and hosts write them -> the matrix's architectures."""

from __future__ import annotations

import re

from envbuild.core.errors import UserError
from envbuild.matrix import (
    Arch,
    HostPlatform,
    Matrix,
    OtherVendorGpu,
)

_VENDOR_WORDS = {"nvidia", "geforce", "tesla"}
_SM_RE = re.compile(r"^(?:sm|compute)_(\d+)[af]?$", re.IGNORECASE)
_CC_RE = re.compile(r"^\d{1,2}\.\d$")


def _tokens(name: str) -> tuple[str, ...]:
    words = [w for w in re.split(r"[\s\-_/]+", name.lower()) if w]
    while words and words[0] in _VENDOR_WORDS:
        words.pop(0)
    return tuple(words)


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
        joined = "".join(want)
        exact = sorted(
            {a.cc for a in matrix.archs for g in a.gpus if "".join(_tokens(g)) == joined}
        )
        if len(exact) == 1:
            return by_cc[exact[0]]
        # NVML names carry form factor and memory ("H100 80GB HBM3", "A100-SXM4-80GB"): the
        # longest matrix name that is a leading run of the words wins.
        best_len = 0
        best: set[str] = set()
        for a in matrix.archs:
            for g in a.gpus:
                t = _tokens(g)
                if t and want[: len(t)] == t:
                    if len(t) > best_len:
                        best_len, best = len(t), {a.cc}
                    elif len(t) == best_len:
                        best.add(a.cc)
        if len(exact) > 1 or len(best) > 1:
            ccs = exact if len(exact) > 1 else sorted(best)
            raise UserError(
                f"GPU name {text!r} is ambiguous (compute capability {' or '.join(ccs)})",
                hint="give the compute capability instead, for example --gpu " + ccs[0],
            )
        if len(best) == 1:
            return by_cc[next(iter(best))]
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
    by_key: dict[str, str] = {}
    for a in matrix.archs:
        if m and a.sm == f"sm_{m.group(1)}":
            return [a.sm]
        for g in a.gpus:
            by_key.setdefault("".join(_tokens(g)), g)
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
