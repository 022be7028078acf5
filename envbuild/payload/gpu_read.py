"""Reading the GPUs from inside an image: NVML through pynvml when importable, else NVML through
ctypes on libnvidia-ml.so.1, else `nvidia-smi --query-gpu`. Standard library only.

The NVIDIA container toolkit mounts libnvidia-ml.so.1 and nvidia-smi into GPU containers, but
images rarely carry pynvml, so the ctypes path is what usually runs. Every call is guarded: a
missing symbol or an NVML error leaves that one reading out (None) and records why, never a crash.

The signatures, structs and constants below follow the NVML API reference
(https://docs.nvidia.com/deploy/nvml-api/), "Device Queries" and "System Queries".
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
from collections.abc import Callable
from functools import partial
from typing import Any

LIB_ENV = "ENVBUILD_NVML_LIB"
"""A path to libnvidia-ml (or a stand-in): when set, the ctypes path is tried first."""
LIB_NAME = "libnvidia-ml.so.1"

# Buffer sizes and enum values from the NVML API reference (nvml.h).
NVML_SUCCESS = 0
NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80
NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96
NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96
NVML_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t
NVML_CLOCK_SM = 1  # nvmlClockType_t: GRAPHICS=0, SM=1, MEM=2, VIDEO=3

SAMPLE_FIELDS = (
    "util_pct",
    "mem_used_mib",
    "power_w",
    "power_limit_w",
    "temp_c",
    "sm_clock_mhz",
    "throttle",
)
"""What one GPU's sample holds (each may be None when the driver does not report it)."""


class NvmlError(Exception):
    """One NVML call failed or is missing; the message says which and why."""


class _Memory(ctypes.Structure):
    # nvmlMemory_t: total, free, used (bytes).
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class _Utilization(ctypes.Structure):
    # nvmlUtilization_t: percent of the last sample period a kernel / memory access ran.
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class CtypesNvml:
    """The NVML calls the payload needs, straight from the shared library."""

    via = "ctypes"

    def __init__(self, path: str | None = None) -> None:
        path = path or os.environ.get(LIB_ENV) or LIB_NAME
        try:
            self._lib = ctypes.CDLL(path)
        except OSError as exc:
            raise NvmlError(f"cannot load {path}: {exc}") from exc
        self._call("nvmlInit_v2", old="nvmlInit")

    def _fn(self, *names: str) -> Any:
        for name in names:
            fn = getattr(self._lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_int
                return fn
        raise NvmlError(f"{names[0]} is missing from the NVML library")

    def _call(self, name: str, *args: Any, old: str | None = None) -> None:
        """Call `name` (or `old`, its pre-_v2 / pre-rename spelling, on older drivers)."""
        rc = self._fn(name, *([old] if old else []))(*args)
        if rc != NVML_SUCCESS:
            raise NvmlError(f"{name}: {self._error_string(rc)}")

    def _error_string(self, rc: int) -> str:
        fn = getattr(self._lib, "nvmlErrorString", None)
        if fn is None:
            return f"NVML error {rc}"
        fn.restype = ctypes.c_char_p
        text = fn(ctypes.c_int(rc))
        return f"{text.decode(errors='replace') if text else 'NVML error'} ({rc})"

    def _string(self, name: str, size: int, *before: Any) -> str:
        buf = ctypes.create_string_buffer(size)
        self._call(name, *before, buf, ctypes.c_uint(size))
        return buf.value.decode(errors="replace")

    def _uint(self, name: str, *before: Any) -> int:
        value = ctypes.c_uint()
        self._call(name, *before, ctypes.byref(value))
        return int(value.value)

    def close(self) -> None:
        with contextlib.suppress(NvmlError):
            self._call("nvmlShutdown")

    def driver_version(self) -> str:
        return self._string("nvmlSystemGetDriverVersion", NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE)

    def cuda_driver_version(self) -> int:
        value = ctypes.c_int()
        self._call(
            "nvmlSystemGetCudaDriverVersion_v2",
            ctypes.byref(value),
            old="nvmlSystemGetCudaDriverVersion",
        )
        return int(value.value)

    def count(self) -> int:
        value = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(value), old="nvmlDeviceGetCount")
        return int(value.value)

    def handle(self, index: int) -> Any:
        h = ctypes.c_void_p()  # nvmlDevice_t is an opaque pointer
        self._call(
            "nvmlDeviceGetHandleByIndex_v2",
            ctypes.c_uint(index),
            ctypes.byref(h),
            old="nvmlDeviceGetHandleByIndex",
        )
        return h

    def name(self, h: Any) -> str:
        return self._string("nvmlDeviceGetName", NVML_DEVICE_NAME_V2_BUFFER_SIZE, h)

    def uuid(self, h: Any) -> str:
        return self._string("nvmlDeviceGetUUID", NVML_DEVICE_UUID_V2_BUFFER_SIZE, h)

    def cc(self, h: Any) -> tuple[int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._call(
            "nvmlDeviceGetCudaComputeCapability", h, ctypes.byref(major), ctypes.byref(minor)
        )
        return int(major.value), int(minor.value)

    def memory(self, h: Any) -> tuple[int, int]:
        """(total, used) in bytes."""
        mem = _Memory()
        self._call("nvmlDeviceGetMemoryInfo", h, ctypes.byref(mem))
        return int(mem.total), int(mem.used)

    def util_pct(self, h: Any) -> int:
        util = _Utilization()
        self._call("nvmlDeviceGetUtilizationRates", h, ctypes.byref(util))
        return int(util.gpu)

    def power_mw(self, h: Any) -> int:
        return self._uint("nvmlDeviceGetPowerUsage", h)

    def power_limit_mw(self, h: Any) -> int:
        return self._uint("nvmlDeviceGetEnforcedPowerLimit", h)

    def temp_c(self, h: Any) -> int:
        return self._uint("nvmlDeviceGetTemperature", h, ctypes.c_int(NVML_TEMPERATURE_GPU))

    def sm_clock_mhz(self, h: Any) -> int:
        return self._uint("nvmlDeviceGetClockInfo", h, ctypes.c_int(NVML_CLOCK_SM))

    def throttle_mask(self, h: Any) -> int:
        value = ctypes.c_ulonglong()
        # Renamed "clocks event reasons" in newer drivers; the old name stays as an alias.
        self._call(
            "nvmlDeviceGetCurrentClocksEventReasons",
            h,
            ctypes.byref(value),
            old="nvmlDeviceGetCurrentClocksThrottleReasons",
        )
        return int(value.value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class PynvmlNvml:
    """The same calls through pynvml (nvidia-ml-py), when an image has it."""

    via = "pynvml"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise NvmlError(f"{type(exc).__name__}: {exc}") from exc
        self._nv: Any = pynvml
        self._wrap(pynvml.nvmlInit)

    def _wrap(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # pynvml.NVMLError and AttributeError for old bindings
            raise NvmlError(f"{getattr(fn, '__name__', fn)}: {exc}") from exc

    def _get(self, *names: str) -> Callable[..., Any]:
        for name in names:
            fn = getattr(self._nv, name, None)
            if fn is not None:
                return fn
        raise NvmlError(f"{names[0]} is missing from pynvml")

    def close(self) -> None:
        with contextlib.suppress(NvmlError):
            self._wrap(self._nv.nvmlShutdown)

    def driver_version(self) -> str:
        return _text(self._wrap(self._nv.nvmlSystemGetDriverVersion))

    def cuda_driver_version(self) -> int:
        get = self._get("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion")
        return int(self._wrap(get))

    def count(self) -> int:
        return int(self._wrap(self._nv.nvmlDeviceGetCount))

    def handle(self, index: int) -> Any:
        return self._wrap(self._nv.nvmlDeviceGetHandleByIndex, index)

    def name(self, h: Any) -> str:
        return _text(self._wrap(self._nv.nvmlDeviceGetName, h))

    def uuid(self, h: Any) -> str:
        return _text(self._wrap(self._nv.nvmlDeviceGetUUID, h))

    def cc(self, h: Any) -> tuple[int, int]:
        major, minor = self._wrap(self._nv.nvmlDeviceGetCudaComputeCapability, h)
        return int(major), int(minor)

    def memory(self, h: Any) -> tuple[int, int]:
        mem = self._wrap(self._nv.nvmlDeviceGetMemoryInfo, h)
        return int(mem.total), int(mem.used)

    def util_pct(self, h: Any) -> int:
        return int(self._wrap(self._nv.nvmlDeviceGetUtilizationRates, h).gpu)

    def power_mw(self, h: Any) -> int:
        return int(self._wrap(self._nv.nvmlDeviceGetPowerUsage, h))

    def power_limit_mw(self, h: Any) -> int:
        return int(self._wrap(self._nv.nvmlDeviceGetEnforcedPowerLimit, h))

    def temp_c(self, h: Any) -> int:
        return int(self._wrap(self._nv.nvmlDeviceGetTemperature, h, NVML_TEMPERATURE_GPU))

    def sm_clock_mhz(self, h: Any) -> int:
        return int(self._wrap(self._nv.nvmlDeviceGetClockInfo, h, NVML_CLOCK_SM))

    def throttle_mask(self, h: Any) -> int:
        get = self._get(
            "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        return int(self._wrap(get, h))


class Reader:
    """Facts and samples of every GPU over one NVML binding; `skipped` says what was left out."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.source = "nvml"
        self.via: str = nvml.via
        self.skipped: dict[str, str] = {}
        try:
            self.handles = [nvml.handle(i) for i in range(nvml.count())]
        except NvmlError:
            nvml.close()
            raise

    def _try(self, field: str, read: Callable[[], Any]) -> Any:
        try:
            return read()
        except NvmlError as exc:
            self.skipped.setdefault(field, str(exc))
            return None

    def facts(self) -> dict[str, Any]:
        """{"source", "via", "driver", "cuda_driver", "gpus": [{"index", "name", "cc",
        "memory_mib", "uuid"}]} as smoke_host.nvml_facts reports them."""
        nv = self.nvml
        cuda_int = self._try("cuda_driver", nv.cuda_driver_version)
        gpus = []
        for i, h in enumerate(self.handles):
            cc = self._try("cc", partial(nv.cc, h))
            mem = self._try("memory_mib", partial(nv.memory, h))
            gpus.append(
                {
                    "index": i,
                    "name": self._try("name", partial(nv.name, h)),
                    "cc": f"{cc[0]}.{cc[1]}" if cc else None,
                    "memory_mib": int(mem[0] // 2**20) if mem else 0,
                    "uuid": self._try("uuid", partial(nv.uuid, h)),
                }
            )
        return {
            "source": self.source,
            "via": self.via,
            "driver": self._try("driver", nv.driver_version),
            # nvmlSystemGetCudaDriverVersion: 1000 * major + 10 * minor (NVML API reference).
            "cuda_driver": (
                f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}" if cuda_int is not None else None
            ),
            "gpus": gpus,
        }

    def sample(self) -> list[dict[str, Any]]:
        """One reading of every GPU: {SAMPLE_FIELDS...}, None where the driver says nothing."""
        nv, out = self.nvml, []
        for h in self.handles:
            mem = self._try("mem_used_mib", partial(nv.memory, h))
            power = self._try("power_w", partial(nv.power_mw, h))
            limit = self._try("power_limit_w", partial(nv.power_limit_mw, h))
            out.append(
                {
                    "util_pct": self._try("util_pct", partial(nv.util_pct, h)),
                    "mem_used_mib": int(mem[1] // 2**20) if mem else None,
                    "power_w": round(power / 1000.0, 1) if power is not None else None,
                    "power_limit_w": round(limit / 1000.0, 1) if limit is not None else None,
                    "temp_c": self._try("temp_c", partial(nv.temp_c, h)),
                    "sm_clock_mhz": self._try("sm_clock_mhz", partial(nv.sm_clock_mhz, h)),
                    "throttle": self._try("throttle", partial(nv.throttle_mask, h)),
                }
            )
        return out

    def close(self) -> None:
        self.nvml.close()


# --- nvidia-smi ----------------------------------------------------------------------------------

SMI_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "uuid",
    "compute_cap",
    "memory.total",
    "memory.used",
    "utilization.gpu",
    "power.draw",
    "enforced.power.limit",
    "temperature.gpu",
    "clocks.sm",
    "clocks_throttle_reasons.active",
    "driver_version",
)
"""`nvidia-smi --help-query-gpu` names; older drivers lack compute_cap and the reasons field,
so a query that nvidia-smi refuses is retried with SMI_MINIMAL."""
SMI_MINIMAL = tuple(
    f for f in SMI_FIELDS if f not in ("compute_cap", "clocks_throttle_reasons.active")
)


def _cell(text: str) -> str | None:
    text = text.strip()
    return None if not text or text.startswith("[") or text in ("N/A", "") else text


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def parse_smi_csv(text: str, fields: tuple[str, ...] = SMI_FIELDS) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` -> one dict per GPU with
    the Reader's keys; "[N/A]" / "[Not Supported]" cells become None."""
    rows = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            continue
        raw = {f: _cell(c) for f, c in zip(fields, cells, strict=True)}
        reasons = raw.get("clocks_throttle_reasons.active")
        nums = {f: _num(raw.get(f)) for f in fields}
        rows.append(
            {
                "index": int(nums["index"] or 0),
                "name": raw.get("name"),
                "uuid": raw.get("uuid"),
                "cc": raw.get("compute_cap"),
                "memory_mib": int(nums.get("memory.total") or 0),
                "driver": raw.get("driver_version"),
                "util_pct": _int_or_none(nums.get("utilization.gpu")),
                "mem_used_mib": _int_or_none(nums.get("memory.used")),
                "power_w": nums.get("power.draw"),
                "power_limit_w": nums.get("enforced.power.limit"),
                "temp_c": _int_or_none(nums.get("temperature.gpu")),
                "sm_clock_mhz": _int_or_none(nums.get("clocks.sm")),
                "throttle": int(reasons, 16) if reasons and reasons.startswith("0x") else None,
            }
        )
    return rows


def _int_or_none(value: float | None) -> int | None:
    return int(value) if value is not None else None


class SmiReader:
    """The Reader's interface over `nvidia-smi --query-gpu` (one process per sample: slow, so the
    sampler's interval grows to keep its cost under budget)."""

    source = "nvidia-smi"
    via = "nvidia-smi"

    def __init__(self, exe: str | None = None) -> None:
        exe = exe or shutil.which("nvidia-smi")
        if not exe:
            raise NvmlError("nvidia-smi is not on PATH")
        self.exe = exe
        self.skipped: dict[str, str] = {}
        self.fields = SMI_FIELDS
        try:
            self._rows = self._query()
        except NvmlError:
            self.fields = SMI_MINIMAL
            self.skipped["throttle"] = "this nvidia-smi has no clocks_throttle_reasons field"
            self._rows = self._query()

    def _query(self) -> list[dict[str, Any]]:
        try:
            out = subprocess.run(
                [self.exe, f"--query-gpu={','.join(self.fields)}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise NvmlError(f"nvidia-smi --query-gpu: {exc}") from exc
        return parse_smi_csv(out, self.fields)

    def facts(self) -> dict[str, Any]:
        rows = self._rows
        keys = ("index", "name", "cc", "memory_mib", "uuid")
        return {
            "source": self.source,
            "via": self.via,
            "driver": rows[-1]["driver"] if rows else None,
            "cuda_driver": None,
            "gpus": [{k: r[k] for k in keys} for r in rows],
        }

    def sample(self) -> list[dict[str, Any]]:
        try:
            self._rows = self._query()
        except NvmlError as exc:
            self.skipped.setdefault("sample", str(exc))
            return []
        return [{k: r[k] for k in SAMPLE_FIELDS} for r in self._rows]

    def close(self) -> None:
        pass


def open_reader() -> tuple[Any, str | None]:
    """(a reader, None) from the first binding that works, or (None, every reason joined).

    Order: pynvml, ctypes, nvidia-smi; with ENVBUILD_NVML_LIB set, ctypes first (someone pointed
    the payload at a library on purpose)."""
    makers: list[Callable[[], Any]] = [
        lambda: Reader(PynvmlNvml()),
        lambda: Reader(CtypesNvml()),
        SmiReader,
    ]
    if os.environ.get(LIB_ENV):
        makers.insert(0, makers.pop(1))
    reasons = []
    for make in makers:
        try:
            return make(), None
        except NvmlError as exc:
            reasons.append(str(exc))
    return None, "; ".join(reasons)
