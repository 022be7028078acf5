"""Memory fit: a smoke report's peak device memory held against every target GPU's (pure).

The peak is torch's allocator when the report has it (`metrics.torch_memory`: the larger of
memory_reserved and max_memory_allocated, in MiB), else NVML's peak memory used
(`metrics.nvml.mem_used_mib`). The headroom rule, in docs/smoke.md "Memory fit":

- need = peak x (1 + HEADROOM), plus CONTEXT_GIB for the CUDA context when the peak is torch's
  (the allocator does not count the context; NVML's figure already holds it);
- a GPU fits when need <= its memory (GiB from the matrix's `memory_gib`, or the MiB a host's
  NVML reported).

The smoke run is a short training step: a longer run with the same shapes holds about the same
peak, a larger batch or model does not. Data-driven tests: tests/cases/smoke/fit/*.json.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envbuild.core.values import gpu_name_words
from envbuild.matrix import Matrix

HEADROOM = 0.10
"""Fragmentation and the step-to-step jitter of the allocator's peak."""
CONTEXT_GIB = 0.5
"""The CUDA context and cuBLAS/cuDNN workspaces outside torch's allocator (about 0.3-0.6 GiB)."""
SHRINK_HINT = "try bf16 autocast, gradient accumulation, activation checkpointing"


@dataclass(frozen=True)
class Peak:
    mib: float
    source: str
    """"torch" (allocator) or "nvml" (memory used)."""

    @property
    def gib(self) -> float:
        return self.mib / 1024

    @property
    def need_gib(self) -> float:
        context = CONTEXT_GIB if self.source == "torch" else 0.0
        return self.gib * (1 + HEADROOM) + context


@dataclass(frozen=True)
class GpuFit:
    gpu: str
    memory_gib: float
    fits: bool

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "memory_gib": self.memory_gib, "fits": self.fits}


@dataclass(frozen=True)
class MemoryFit:
    peak: Peak
    gpus: tuple[GpuFit, ...]

    @property
    def too_small(self) -> tuple[GpuFit, ...]:
        return tuple(g for g in self.gpus if not g.fits)

    def summary(self) -> str:
        """ "peak 38.2 GiB: fits H100 (80 GiB), does not fit L4 (24 GiB): try ..."."""
        fits = [g for g in self.gpus if g.fits]
        clauses = []
        if fits:
            clauses.append("fits " + ", ".join(_named(g) for g in fits))
        if self.too_small:
            clauses.append("does not fit " + ", ".join(_named(g) for g in self.too_small))
        text = f"peak {self.peak.gib:.1f} GiB ({self.peak.source})"
        if clauses:
            text += ": " + ", ".join(clauses)
        return text + (f": {SHRINK_HINT}" if self.too_small else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "peak_mib": round(self.peak.mib, 1),
            "peak_source": self.peak.source,
            "need_gib": round(self.peak.need_gib, 2),
            "headroom": HEADROOM,
            "context_gib": CONTEXT_GIB if self.peak.source == "torch" else 0.0,
            "gpus": [g.to_json() for g in self.gpus],
            "too_small": [g.gpu for g in self.too_small],
            "summary": self.summary(),
            "hint": SHRINK_HINT if self.too_small else "",
        }


def _named(g: GpuFit) -> str:
    return f"{g.gpu} ({g.memory_gib:g} GiB)"


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def peak_of(
    report: Mapping[str, Any] | None, command: Mapping[str, Any] | None = None
) -> Peak | None:
    """The larger need of the payload's peak (`_report_peak`) and the project's own smoke
    step's (NVML's memory used while it ran, `smoke_command.watch.peaks`); None when neither
    has one."""
    found = [p for p in (_report_peak(report), _command_peak(command)) if p is not None]
    return max(found, key=lambda p: p.need_gib) if found else None


def _command_peak(command: Mapping[str, Any] | None) -> Peak | None:
    watch = (command or {}).get("watch") or {}
    peaks = watch.get("peaks") if isinstance(watch, Mapping) else None
    used = _number(peaks.get("mem_used_mib")) if isinstance(peaks, Mapping) else None
    return Peak(used, "nvml, the project's smoke step") if used is not None else None


def _report_peak(report: Mapping[str, Any] | None) -> Peak | None:
    """The report's peak device memory, torch's allocator first; None when it has neither."""
    metrics = (report or {}).get("metrics") or {}
    if not isinstance(metrics, Mapping):
        return None
    torch = metrics.get("torch_memory") or {}
    if isinstance(torch, Mapping):
        got = [_number(torch.get(k)) for k in ("reserved_mib", "max_allocated_mib")]
        values = [v for v in got if v is not None]
        if values:
            return Peak(max(values), "torch")
    nvml = metrics.get("nvml") or {}
    used = _number(nvml.get("mem_used_mib")) if isinstance(nvml, Mapping) else None
    return Peak(used, "nvml") if used is not None else None


def fit(peak: Peak, gpus: Iterable[tuple[str, float]]) -> MemoryFit:
    """Each (GPU, GiB) against the peak, smallest memory first (ties by name)."""
    rows = sorted({(round(gib, 2), name) for name, gib in gpus})
    need = peak.need_gib
    return MemoryFit(peak, tuple(GpuFit(name, gib, need <= gib) for gib, name in rows))


def memory_fit(
    report: Mapping[str, Any] | None,
    gpus: Iterable[tuple[str, float]],
    command: Mapping[str, Any] | None = None,
) -> MemoryFit | None:
    """`fit` of the run's peak (`peak_of`); None when it has none (a CPU run, no NVML)."""
    peak = peak_of(report, command)
    return fit(peak, gpus) if peak is not None else None


def for_targets(
    table: Sequence[tuple[str, float]], targets: Sequence[str]
) -> tuple[tuple[str, float], ...]:
    """The entries of `table` that are the target GPUs (a target "A100" is each of its memory
    variants, "A100 40GB" and "A100 80GB"); the whole table when there are no targets or none
    of them has an entry."""
    wanted = {_norm(t) for t in targets}
    picked = tuple(
        (name, gib)
        for name, gib in table
        if _norm(name) in wanted
        or (
            (m := re.fullmatch(r"(.+)\s+\d+GB", name.strip(), flags=re.IGNORECASE)) is not None
            and _norm(m[1]) in wanted
        )
    )
    return picked or tuple(table)


def matrix_memory(matrix: Matrix) -> tuple[tuple[str, float], ...]:
    """Every (GPU name, GiB) the matrix's [[arch]] rows carry, in file order."""
    return tuple(entry for arch in matrix.archs for entry in arch.memory_gib)


def _norm(name: str) -> str:
    """The shared normal form (envbuild.core.values.gpu_name_words), joined: prefixes of an
    NVML name then compare as text ("a100sxm480gb" starts with "a100")."""
    return "".join(gpu_name_words(name))


def memory_of_name(name: str, table: Sequence[tuple[str, float]]) -> float | None:
    """A GPU name as NVML writes it ("NVIDIA A100-SXM4-80GB") -> GiB from `table`: the entry
    with the longest name that the GPU's name starts with, or whose memory variant it names
    ("A100 80GB" for "A100-SXM4-80GB"); None when no entry matches."""
    norm = _norm(name)
    best: tuple[int, float] | None = None
    for entry, gib in table:
        key = _norm(entry)
        variant = re.fullmatch(r"(.+)\s+(\d+GB)", entry.strip(), flags=re.IGNORECASE)
        hit = norm.startswith(key) or (
            variant is not None
            and norm.startswith(_norm(variant[1]))
            and variant[2].lower() in norm
        )
        if hit and (best is None or len(key) > best[0]):
            best = (len(key), gib)
    return best[1] if best else None
