"""Host facts for the smoke payload: GPUs through gpu_read (pynvml, NVML through ctypes, or
nvidia-smi); topology; /dev/shm; the telemetry sampler tier 2 runs beside its work. Standard
library only (pynvml is optional inside images).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from typing import Any

try:
    from . import gpu_read, telemetry
    from . import readings as rd
    from . import smoke_checks as ck
except ImportError:  # run as a folder (python /opt/envbuild/payload): siblings are top-level
    import gpu_read  # type: ignore[no-redef,import-not-found]
    import readings as rd  # type: ignore[no-redef,import-not-found]
    import smoke_checks as ck  # type: ignore[no-redef,import-not-found]
    import telemetry  # type: ignore[no-redef,import-not-found]


def nvml_facts() -> dict[str, Any]:
    """GPUs, driver and the driver's CUDA version: {"source", "via", "driver", "cuda_driver",
    "gpus"} from the first of pynvml, NVML through ctypes, nvidia-smi that works (gpu_read).

    `gpus` lists every GPU NVML sees (CUDA_VISIBLE_DEVICES does not filter NVML).
    """
    reader, why = gpu_read.open_reader()
    if reader is None:
        return {"source": None, "driver": None, "cuda_driver": None, "gpus": [], "error": why}
    try:
        return dict(reader.facts())
    except Exception as exc:  # a reader must never take the report down
        return {"source": None, "driver": None, "cuda_driver": None, "gpus": [], "error": str(exc)}
    finally:
        with contextlib.suppress(Exception):
            reader.close()


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


def NvmlSampler() -> telemetry.Sampler:
    """The sampler tier 2 runs beside its work: every GPU and this process's CPU."""
    return telemetry.Sampler()


def record_telemetry(
    sampler: telemetry.Sampler,
    out: dict[str, Any],
    checks: list[dict[str, Any]],
    torch_memory: dict[str, Any] | None = None,
) -> None:
    """Stop `sampler`; peaks under metrics.nvml (check_telemetry's input, as before), the series
    and what it cost under metrics.telemetry, and the readings of the series as checks."""
    got = sampler.stop()
    out["metrics"]["nvml"] = got["peaks"]
    out["metrics"]["telemetry"] = got["telemetry"]
    if torch_memory is not None:
        out["metrics"]["torch_memory"] = torch_memory
    checks.append(ck.check_telemetry(got["peaks"], reason=got["telemetry"].get("error")))
    if got["peaks"].get("samples"):
        checks.extend(rd.readings(got["telemetry"]["series"], torch_memory))


def now() -> float:
    return time.perf_counter()
