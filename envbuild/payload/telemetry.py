"""A time series of every GPU (and of the process's CPU use) while work runs. Standard library only.

`Sampler` is a thread: it reads every GPU through gpu_read's reader at an interval chosen so that
one sample costs under BUDGET of the interval (measured, not assumed), keeps at most max_samples
(when full, every other sample is dropped and the spacing doubles) and the peaks over all
samples as check_telemetry reads them. `stop()` returns {"peaks", "telemetry"}.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

try:
    from . import gpu_read
    from . import smoke_checks as ck
except ImportError:  # run as a folder (python /opt/envbuild/payload): siblings are top-level
    import gpu_read  # type: ignore[no-redef,import-not-found]
    import smoke_checks as ck  # type: ignore[no-redef,import-not-found]

BUDGET = 0.01
"""The most of the wall time sampling may take (sample_cost / interval)."""
MIN_INTERVAL_S = 0.25
MAX_INTERVAL_S = 10.0
MAX_SAMPLES = 600
SERIES_FIELDS = ("util_pct", "mem_used_mib", "power_w", "temp_c", "sm_clock_mhz", "throttle")


def pick_interval(
    cost_s: float,
    *,
    budget: float = BUDGET,
    lo: float = MIN_INTERVAL_S,
    hi: float = MAX_INTERVAL_S,
) -> float:
    """The shortest interval in [lo, hi] at which one sample costs at most `budget` of it."""
    return round(min(hi, max(lo, cost_s / budget)), 3)


def self_cpu_seconds() -> float:
    """User + system CPU seconds of this process, every thread (os.times)."""
    t = os.times()
    return t.user + t.system


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of `pid` and its reaped children, from /proc/<pid>/stat (fields
    14-17, in clock ticks: proc(5)); None once the process is gone or without /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the command name may hold spaces and ")"
    try:
        ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    except (ValueError, IndexError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


class Series:
    """The bounded columns: t, cpu_pct and per GPU one list per SERIES_FIELDS."""

    def __init__(self, max_samples: int = MAX_SAMPLES) -> None:
        self.max_samples = max(2, max_samples)
        self.stride = 1  # keep one sample in `stride`: doubles each time the columns fill
        self.taken = 0
        self.t: list[float] = []
        self.cpu_pct: list[float | None] = []
        self.gpus: list[dict[str, Any]] = []

    def add(self, t: float, cpu_pct: float | None, gpus: list[dict[str, Any]]) -> None:
        self.taken += 1
        if (self.taken - 1) % self.stride:
            return
        if len(self.t) >= self.max_samples:
            self._halve()
        while len(self.gpus) < len(gpus):
            self.gpus.append(
                {"index": len(self.gpus), "power_limit_w": None}
                | {f: [None] * len(self.t) for f in SERIES_FIELDS}
            )
        self.t.append(round(t, 3))
        self.cpu_pct.append(None if cpu_pct is None else round(cpu_pct, 1))
        for col, sample in zip(self.gpus, gpus + [{}] * (len(self.gpus) - len(gpus)), strict=True):
            for f in SERIES_FIELDS:
                col[f].append(sample.get(f))
            limit = sample.get("power_limit_w")
            if limit is not None:
                col["power_limit_w"] = limit

    def _halve(self) -> None:
        self.stride *= 2
        self.t = self.t[::2]
        self.cpu_pct = self.cpu_pct[::2]
        for col in self.gpus:
            for f in SERIES_FIELDS:
                col[f] = col[f][::2]

    def as_dict(self) -> dict[str, Any]:
        return {
            "t": list(self.t),
            "cpu_pct": list(self.cpu_pct),
            "gpus": [dict(col) for col in self.gpus],
            "stride": self.stride,
        }


def _new_peaks() -> dict[str, Any]:
    return {
        "samples": 0,
        "util_pct": 0,
        "mem_used_mib": 0,
        "power_w": 0.0,
        "temp_c": 0,
        "throttle_mask": 0,
    }


class Sampler(threading.Thread):
    """Samples every GPU while the work runs; `stop()` -> {"peaks", "telemetry"}."""

    def __init__(
        self,
        *,
        open_reader: Callable[[], tuple[Any, str | None]] = gpu_read.open_reader,
        cpu_seconds: Callable[[], float | None] = self_cpu_seconds,
        interval: float | None = None,
        max_samples: int = MAX_SAMPLES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name="envbuild-gpu-sampler", daemon=True)
        self._open_reader = open_reader
        self._cpu_seconds = cpu_seconds
        self._fixed_interval = interval
        self.interval = interval or MIN_INTERVAL_S
        self._clock = clock
        self._stop_event = threading.Event()
        self._started_reading = threading.Event()
        self.series = Series(max_samples)
        self.peaks = _new_peaks()
        self.error: str | None = None
        self.source: str | None = None
        self.via: str | None = None
        self.skipped: dict[str, str] = {}
        self._cost_total = 0.0
        self._cost_max = 0.0
        self._last: tuple[float, float | None] | None = None
        self._t0 = 0.0

    def run(self) -> None:
        try:
            reader, why = self._open_reader()
        except Exception as exc:  # a reader must never take the run down
            reader, why = None, f"{type(exc).__name__}: {exc}"
        if reader is None:
            self.error = why or "no GPU reader"
            self._started_reading.set()
            return
        self.source, self.via = reader.source, reader.via
        self._t0 = self._clock()
        self._last = (self._t0, self._cpu_seconds())
        try:
            with contextlib.suppress(Exception):
                reader.sample()  # warm-up: the first call pays for lazy set-up inside NVML
            self._started_reading.set()
            while True:
                self._sample_once(reader)
                if self._stop_event.wait(self.interval):
                    break
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._started_reading.set()
            self.skipped = dict(getattr(reader, "skipped", {}))
            with contextlib.suppress(Exception):
                reader.close()

    def _sample_once(self, reader: Any) -> None:
        start = self._clock()
        gpus = reader.sample()
        cpu = self._cpu_seconds()
        now = self._clock()
        cost = now - start
        self._cost_total += cost
        self._cost_max = max(self._cost_max, cost)
        cpu_pct = None
        if self._last is not None and self._last[1] is not None and cpu is not None:
            wall = now - self._last[0]
            cpu_pct = 100.0 * (cpu - self._last[1]) / wall if wall > 0 else None
        self._last = (now, cpu)
        self.series.add(now - self._t0, cpu_pct, gpus)
        self._update_peaks(gpus)
        if self._fixed_interval is None:
            self.interval = pick_interval(self._cost_total / self.peaks["samples"])

    def _update_peaks(self, gpus: list[dict[str, Any]]) -> None:
        p = self.peaks
        p["samples"] += 1
        for g in gpus:
            for key in ("util_pct", "mem_used_mib", "power_w", "temp_c"):
                if g.get(key) is not None:
                    p[key] = max(p[key], g[key])
            if g.get("throttle") is not None:
                p["throttle_mask"] |= int(g["throttle"])

    def wait_started(self, timeout: float = 5.0) -> None:
        """Until the reader is open and warmed up (or failed): tests and short children."""
        self._started_reading.wait(timeout)

    def stop(self) -> dict[str, Any]:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=max(5.0, 2 * self.interval))
        return {"peaks": self._peaks_out(), "telemetry": self._telemetry_out()}

    def _peaks_out(self) -> dict[str, Any]:
        out = dict(self.peaks)
        out["throttle"] = [
            f for f in ck.throttle_flags(out.pop("throttle_mask")) if f != "gpu_idle"
        ]
        out["power_w"] = round(float(out["power_w"]), 1)
        if self.error:
            out["error"] = self.error
        return out

    def _telemetry_out(self) -> dict[str, Any]:
        n = self.peaks["samples"]
        cost = self._cost_total / n if n else None
        return {
            "source": self.source,
            "via": self.via,
            "error": self.error,
            "skipped": dict(self.skipped),
            "interval_s": self.interval,
            "sample_cost_s": round(cost, 6) if cost is not None else None,
            "sample_cost_max_s": round(self._cost_max, 6) if n else None,
            "cost_pct": round(100.0 * cost / self.interval, 3) if cost is not None else None,
            "samples_taken": n,
            "max_samples": self.series.max_samples,
            "series": self.series.as_dict(),
        }
