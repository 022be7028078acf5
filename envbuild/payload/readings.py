"""Readings of a telemetry series (pure, standard library only): what the figures most likely
mean for training, each with a next step.

`readings(series, torch_memory=None)` -> check records (smoke_checks.check) named `reading-*`,
status "warn" or "pass"; a reading without the data it needs is left out. The wording is a
likelihood: a series shows symptoms, not their cause. Data-driven tests:
tests/cases/smoke/readings/*.json.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

try:
    from . import smoke_checks as ck
except ImportError:  # run as a folder (python /opt/envbuild/payload): siblings are top-level
    import smoke_checks as ck  # type: ignore[no-redef,import-not-found]

MIN_SAMPLES = 5
MIN_WINDOW = 20
"""Samples while the GPU works (5 s at the 0.25 s interval) before the input pipeline is
read: a short run of many phases (the payload's own tier 2) is mostly setup between them."""
"""Fewer samples than this say nothing about a run's shape."""
ACTIVE_UTIL_PCT = 5
"""A GPU whose utilisation never reaches this was not used by the run (NVML sees every GPU)."""
UNDERUSED_UTIL_PCT = 50
BUSY_CPU_PCT = 80
"""Percent of one core: the process's main thread is close to saturated."""
IDLE_UTIL_PCT = 5
MIN_GAPS = 3
MIN_IDLE_SHARE = 0.2
POWER_CAP_SHARE = 0.1
"""sw_power_cap in fewer samples than this is a busy GPU touching its limit, not a slowdown."""
RESERVED_RATIO = 1.5
RESERVED_MIN_MIB = 1024
TIER = 2


def _values(column: Sequence[Any] | None) -> list[float]:
    return [float(v) for v in (column or []) if v is not None]


def _active_gpus(series: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        g
        for g in series.get("gpus") or []
        if max(_values(g.get("util_pct")), default=0) >= ACTIVE_UTIL_PCT
    ]


def readings(
    series: Mapping[str, Any] | None, torch_memory: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Every reading the data allows, in a fixed order."""
    series = series or {}
    out = [
        _input_pipeline(series),
        _step_gaps(series),
        _throttle(series),
        _allocator(torch_memory),
    ]
    return [r for r in out if r is not None]


def _busy_window(active: Sequence[Mapping[str, Any]]) -> slice:
    """The samples from the first to the last in which a used GPU was busy: the start-up
    before it (imports, loading, building the model) says nothing about the input pipeline."""
    # Positions in the series' columns, Nones kept: a sample the reader missed (None) must not
    # shift the window against the cpu_pct column.
    busy = [
        i
        for g in active
        for i, v in enumerate(g.get("util_pct") or [])
        if isinstance(v, (int, float)) and v >= ACTIVE_UTIL_PCT
    ]
    return slice(min(busy), max(busy) + 1) if busy else slice(0, 0)


def _input_pipeline(series: Mapping[str, Any]) -> dict[str, Any] | None:
    active = _active_gpus(series)
    window = _busy_window(active)
    cpu = _values((series.get("cpu_pct") or [])[window])
    if not active or len(cpu) < MIN_SAMPLES:
        return None
    if len(cpu) < MIN_WINDOW:
        figure = f"{len(cpu)} samples while the GPU worked: too short a run to read"
        return ck.check("reading-input-pipeline", TIER, "pass", figure)
    util = max(median(_values((g.get("util_pct") or [])[window]) or [0.0]) for g in active)
    cpu_med = median(cpu)
    figure = f"median GPU util {util:.0f}%, process CPU {cpu_med:.0f}% of one core"
    if util < UNDERUSED_UTIL_PCT and cpu_med > BUSY_CPU_PCT:
        return ck.check(
            "reading-input-pipeline",
            TIER,
            "warn",
            figure,
            "the GPU waited while one CPU core was saturated: most likely the input pipeline "
            "(decoding, augmentation, collation) bounds the step. Try DataLoader(num_workers>0, "
            "pin_memory=True, prefetch_factor=2..4, persistent_workers=True) and move "
            "per-sample work out of the training loop",
        )
    return ck.check("reading-input-pipeline", TIER, "pass", figure)


def _gaps(util: list[float]) -> tuple[int, int, int]:
    """(idle samples, idle runs, samples) between the first and last busy sample."""
    busy = [i for i, u in enumerate(util) if u >= IDLE_UTIL_PCT]
    if not busy:
        return 0, 0, 0
    inner = util[busy[0] : busy[-1] + 1]
    idle = [u < IDLE_UTIL_PCT for u in inner]
    runs = sum(1 for i, v in enumerate(idle) if v and (i == 0 or not idle[i - 1]))
    return sum(idle), runs, len(inner)


def _step_gaps(series: Mapping[str, Any]) -> dict[str, Any] | None:
    active = [g for g in _active_gpus(series) if len(_values(g.get("util_pct"))) >= MIN_SAMPLES]
    if not active:
        return None
    worst = max(
        ((g, *_gaps(_values(g.get("util_pct")))) for g in active),
        key=lambda r: (r[2], r[1]),
    )
    gpu, idle, runs, total = worst
    share = idle / total if total else 0.0
    figure = (
        f"GPU {gpu.get('index', 0)} idle (<{IDLE_UTIL_PCT}% util) in {idle} of {total} samples "
        f"between busy ones, {runs} gaps"
    )
    if runs >= MIN_GAPS and share >= MIN_IDLE_SHARE:
        return ck.check(
            "reading-step-gaps",
            TIER,
            "warn",
            figure,
            "the GPU went idle between bursts of work: probably host-side work between steps "
            "(data loading, logging, .item()/.cpu() syncs, checkpointing, evaluation). Profile "
            "one step (torch.profiler) to see what the host does while the GPU waits",
        )
    return ck.check("reading-step-gaps", TIER, "pass", figure)


def _reason_shares(series: Mapping[str, Any]) -> tuple[dict[str, float], int]:
    """flag -> the largest share of samples any GPU had it in, and the samples seen."""
    shares: dict[str, float] = {}
    seen = 0
    for g in series.get("gpus") or []:
        masks = [int(m) for m in g.get("throttle") or [] if m is not None]
        seen = max(seen, len(masks))
        for flag in {f for m in masks for f in ck.throttle_flags(m)}:
            bits = [b for b, name in ck.THROTTLE_BITS.items() if name == flag]
            share = sum(1 for m in masks if m & bits[0]) / len(masks)
            shares[flag] = max(shares.get(flag, 0.0), share)
    return shares, seen


def _throttle(series: Mapping[str, Any]) -> dict[str, Any] | None:
    shares, seen = _reason_shares(series)
    if not seen:
        return None
    bad = {f: s for f, s in shares.items() if f in ck.BAD_THROTTLE}
    capped = shares.get("sw_power_cap", 0.0)
    if capped >= POWER_CAP_SHARE:
        bad["sw_power_cap"] = capped
    if not bad:
        return ck.check("reading-throttle", TIER, "pass", f"no slowdown reason in {seen} samples")
    figure = ", ".join(f"{f} in {100 * s:.0f}% of samples" for f, s in sorted(bad.items()))
    thermal = [f for f in bad if "thermal" in f or f == "hw_slowdown"]
    if thermal:
        hint = (
            "the GPU likely lowered its clocks to protect itself ("
            + ", ".join(sorted(thermal))
            + "): check the cooling, the inlet temperature and the power supply, "
            "`nvidia-smi -q -d PERFORMANCE,TEMPERATURE`; steps were probably slower than this "
            "GPU can run"
        )
    else:
        hint = (
            "the GPU likely held its clocks down to stay within its enforced power limit for a "
            "good part of the run: expected under full load, but if steps are slower than the "
            "GPU's baseline, check the power limit "
            "(`nvidia-smi -q -d POWER`) against the card's default"
        )
    return ck.check("reading-throttle", TIER, "warn", figure, hint)


def _allocator(torch_memory: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """torch_memory: {"reserved_mib": torch.cuda.memory_reserved, "max_allocated_mib":
    torch.cuda.max_memory_allocated} at the end of the run (MiB)."""
    if not torch_memory:
        return None
    reserved = torch_memory.get("reserved_mib")
    allocated = torch_memory.get("max_allocated_mib")
    if reserved is None or allocated is None:
        return None
    figure = f"reserved {float(reserved):.0f} MiB vs peak allocated {float(allocated):.0f} MiB"
    if float(reserved) > RESERVED_RATIO * float(allocated) and float(reserved) > RESERVED_MIN_MIB:
        return ck.check(
            "reading-allocator",
            TIER,
            "warn",
            figure,
            "the gap is most likely torch's caching allocator keeping freed blocks for reuse "
            "(fragmentation from varying shapes), not a leak: nvidia-smi counts reserved memory. "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True usually narrows it; "
            "torch.cuda.empty_cache() hands the cache back; torch.cuda.memory_summary() shows it",
        )
    return ck.check("reading-allocator", TIER, "pass", figure)
