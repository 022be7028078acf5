"""Host facts for the smoke payload: NVML (pynvml) when importable, else nvidia-smi; /dev/shm;
an NVML sampling thread. Standard library only (pynvml is optional inside images).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from typing import Any

try:
    from . import smoke_checks as ck
except ImportError:  # run as a folder (python /opt/envbuild/payload): siblings are top-level
    import smoke_checks as ck  # type: ignore[no-redef,import-not-found]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_facts() -> dict[str, Any]:
    """GPUs, driver and the driver's CUDA version: {"source", "driver", "cuda_driver", "gpus"}.

    `gpus` lists every GPU NVML sees (CUDA_VISIBLE_DEVICES does not filter NVML).
    """
    facts = _from_pynvml()
    if facts is None:
        facts = _from_nvidia_smi()
    if facts is None:
        facts = {"source": None, "driver": None, "cuda_driver": None, "gpus": []}
    return facts


def _from_pynvml() -> dict[str, Any] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda_int = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append(
                {
                    "index": i,
                    "name": _text(pynvml.nvmlDeviceGetName(h)),
                    "cc": f"{major}.{minor}",
                    "memory_mib": int(mem.total // 2**20),
                    "uuid": _text(pynvml.nvmlDeviceGetUUID(h)),
                }
            )
        # nvmlSystemGetCudaDriverVersion: 1000*major + 10*minor (nvml.h).
        cuda_driver = f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}"
        return {"source": "nvml", "driver": driver, "cuda_driver": cuda_driver, "gpus": gpus}
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _from_nvidia_smi() -> dict[str, Any] | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    query = "index,name,compute_cap,memory.total,uuid,driver_version"
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    gpus, driver = [], None
    for row in out.strip().splitlines():
        cells = [c.strip() for c in row.split(",")]
        if len(cells) < 6:
            continue
        gpus.append(
            {
                "index": int(cells[0]),
                "name": cells[1],
                "cc": cells[2],
                "memory_mib": int(float(cells[3])) if cells[3].replace(".", "").isdigit() else 0,
                "uuid": cells[4],
            }
        )
        driver = cells[5]
    return {"source": "nvidia-smi", "driver": driver, "cuda_driver": None, "gpus": gpus}


def shm_mib(path: str = "/dev/shm") -> float | None:
    """Size of /dev/shm in MiB, None when it does not exist."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize / 2**20


class NvmlSampler(threading.Thread):
    """Samples every GPU each `interval` s while the tier-2 work runs; `peaks()` after `stop()`."""

    def __init__(self, interval: float = 0.1) -> None:
        super().__init__(name="envbuild-nvml-sampler", daemon=True)
        self.interval = interval
        self._stop_event = threading.Event()
        self._peaks: dict[str, Any] = {
            "samples": 0,
            "util_pct": 0,
            "mem_used_mib": 0,
            "power_w": 0.0,
            "temp_c": 0,
            "throttle_mask": 0,
        }
        self._nvml: Any = None
        self.error: str | None = None

    def run(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
        except Exception as exc:  # no NVML: telemetry is skipped, not failed
            self.error = f"{type(exc).__name__}: {exc}"
            return
        try:
            handles = [
                pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
            ]
            while not self._stop_event.is_set():
                for h in handles:
                    self._sample(h)
                self._peaks["samples"] += 1
                self._stop_event.wait(self.interval)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            with contextlib.suppress(Exception):
                pynvml.nvmlShutdown()

    def _sample(self, h: Any) -> None:
        nv, p = self._nvml, self._peaks
        for key, read in (
            ("util_pct", lambda: int(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
            ("mem_used_mib", lambda: int(nv.nvmlDeviceGetMemoryInfo(h).used // 2**20)),
            ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("temp_c", lambda: int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
        ):
            with contextlib.suppress(Exception):
                p[key] = max(p[key], read())
        try:
            get = (
                getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                or nv.nvmlDeviceGetCurrentClocksThrottleReasons
            )
            p["throttle_mask"] |= int(get(h))
        except Exception:
            pass

    def stop(self) -> dict[str, Any]:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)
        out = dict(self._peaks)
        out["throttle"] = [
            f for f in ck.throttle_flags(out.pop("throttle_mask")) if f != "gpu_idle"
        ]
        out["power_w"] = round(float(out["power_w"]), 1)
        if self.error:
            out["error"] = self.error
        return out


def now() -> float:
    return time.perf_counter()
