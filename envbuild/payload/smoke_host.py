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


# NVML's nvmlGpuTopologyLevel_t values (nvml.h) -> the words `nvidia-smi topo -m` prints.
TOPOLOGY_LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS in nvml.h (Hopper has 18)


def topology(count: int) -> dict[str, Any]:
    """How the GPUs are connected, as NVML reports it: {"source", "gpus": [{"index",
    "nvlinks"}], "matrix": [[cell, ...], ...]} with cells like nvidia-smi topo -m ("X", "NV18",
    "PIX", "SYS"); falls back to parsing `nvidia-smi topo -m`; source None when neither runs."""
    found = _topology_nvml(count)
    if found is None:
        found = _topology_smi()
    return found or {"source": None, "gpus": [], "matrix": []}


def _topology_nvml(count: int) -> dict[str, Any] | None:
    try:
        import pynvml as nv
    except ImportError:
        return None
    try:
        nv.nvmlInit()
    except Exception:
        return None
    try:
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = [{"index": i, "nvlinks": _active_links(nv, h)} for i, h in enumerate(handles)]
        matrix = [[_pair(nv, a, b) if a is not b else "X" for b in handles] for a in handles]
        for i, row in enumerate(matrix):
            for j, cell in enumerate(row):
                if cell == "NV" and gpus[i]["nvlinks"]:
                    row[j] = f"NV{gpus[i]['nvlinks']}"
        return {"source": "nvml", "gpus": gpus, "matrix": matrix}
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()


def _active_links(nv: Any, handle: Any) -> int:
    active = 0
    for link in range(NVLINK_MAX_LINKS):
        try:
            active += int(nv.nvmlDeviceGetNvLinkState(handle, link) == 1)
        except Exception:
            break  # NVML_ERROR_INVALID_ARGUMENT past the last link, NOT_SUPPORTED without NVLink
    return active


def _pair(nv: Any, a: Any, b: Any) -> str:
    """ "NV" when NVML says peer-to-peer runs over NVLink (count filled in by the caller, as
    nvidia-smi does), else the PCIe/CPU level of the pair's common ancestor."""
    with contextlib.suppress(Exception):
        status = nv.nvmlDeviceGetP2PStatus(a, b, nv.NVML_P2P_CAPS_INDEX_NVLINK)
        if status == nv.NVML_P2P_STATUS_OK:
            return "NV"
    try:
        return TOPOLOGY_LEVELS.get(int(nv.nvmlDeviceGetTopologyCommonAncestor(a, b)), "?")
    except Exception:
        return "?"


def _topology_smi() -> dict[str, Any] | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        text = subprocess.run(
            [exe, "topo", "-m"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_topo_m(text)


def parse_topo_m(text: str) -> dict[str, Any] | None:
    """The GPU x GPU block of `nvidia-smi topo -m` output (tabs or spaces; NIC columns and the
    legend are dropped)."""
    rows = [line.split() for line in text.splitlines() if line.strip()]
    header = next((r for r in rows if r and r[0].startswith("GPU")), None)
    if header is None:
        return None
    gpu_cols = [i for i, name in enumerate(header) if name.startswith("GPU") and name[3:].isdigit()]
    matrix = []
    for r in rows:
        if r and r[0].startswith("GPU") and r[0][3:].isdigit() and r is not header:
            matrix.append([r[1 + i] for i in gpu_cols if 1 + i < len(r)])
    gpus = [
        {
            "index": i,
            "nvlinks": max(
                (int(c[2:]) for c in row if c[2:].isdigit() and c.startswith("NV")), default=0
            ),
        }
        for i, row in enumerate(matrix)
    ]
    return {"source": "nvidia-smi", "gpus": gpus, "matrix": matrix}


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
