"""Host probing: NVML, /proc, the container engine, CDI specs and /dev/shm -> host facts [I/O].

The only module that uses pynvml. At module level it imports nothing beyond the standard
library and envbuild's pure modules, so it also runs where only `nvidia-ml-py` is installed
(the recorded H200 probe ran it that way); pynvml itself is imported inside `probe_facts`.

Host facts are a JSON-able dict: the exact object `envbuild doctor --json` writes (under
"facts") and `envbuild validate --hosts` reads. `FACTS_SCHEMA` versions its shape: readers
reject a newer schema rather than guess. What the container engine says of itself is read by
`envbuild.engine.facts` (the engine layer, above this one) and handed to `probe_facts`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import glob
import os
import platform
import re
import shutil
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from envbuild.core.errors import NoGpuError, UserError
from envbuild.core.models import Host, HostGpu
from envbuild.host.gpu_attach import parse_cdi_devices

FACTS_SCHEMA = 1
"""Version of the host-facts object; bump on incompatible changes."""

PROC_VERSION = Path("/proc/driver/nvidia/version")
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
"""Where CDI specs live (nvidia-ctk writes /etc/cdi/nvidia.yaml; since toolkit 1.18 the
nvidia-cdi-refresh service writes /var/run/cdi/nvidia.yaml; source: NVIDIA Container Toolkit
docs, cdi-support.html)."""
SHM_PATH = "/dev/shm"

NO_DRIVER_HINT = (
    "install the NVIDIA driver for this GPU (or load its kernel module), then check that "
    "`nvidia-smi` lists the GPUs; run `envbuild doctor` again"
)

# NVML brand enum -> the lowercase token NVIDIA_REQUIRE_* `brand=` constraints compare with.
# Source: nvidia-container-toolkit internal/modifier (brandTypeToRequirementString) and the
# nvmlBrandType_t enum in nvml.h / pynvml.
BRAND_TOKENS: dict[int, str] = {
    1: "quadro",
    2: "tesla",
    3: "nvs",
    4: "grid",
    5: "geforce",
    6: "titan",
    7: "nvidiavapps",
    8: "nvidiavpc",
    9: "nvidiavcs",
    10: "nvidiavws",
    11: "nvidiacloudgaming",
    12: "quadrortx",
    13: "nvidiartx",
    14: "nvidia",
    15: "geforcertx",
    16: "titanrtx",
}


# --- pure parsers (unit-tested without a GPU) --------------------------------------------------


def parse_proc_version(text: str) -> str | None:
    """The kernel module version from /proc/driver/nvidia/version.

    First line looks like "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Thu ..."
    or, for the open modules, "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05
    Release Build ...".
    """
    for raw in text.splitlines():
        if raw.startswith("NVRM version:"):
            m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", raw)
            if m:
                return m.group(1)
            m = re.search(r"\s(\d{3,}\.\d+(?:\.\d+)?)\s", raw + " ")
            return m.group(1) if m else None
    return None


def parse_nvml_library_from_maps(maps_text: str) -> tuple[str | None, str | None]:
    """(path, version) of the libnvidia-ml this process mapped, from /proc/self/maps.

    On a "Driver/library version mismatch" NVML cannot tell its own version, but the loaded
    file's name can: libnvidia-ml.so.<driver version>.
    """
    for raw in maps_text.splitlines():
        parts = raw.split()
        if not parts or "libnvidia-ml.so" not in parts[-1]:
            continue
        path = parts[-1]
        real = os.path.realpath(path) if os.path.exists(path) else path
        m = re.search(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$", real)
        return real, (m.group(1) if m else None)
    return None, None


def nvml_version_to_driver(nvml_version: str) -> str:
    """NVML reports "13.580.95.05" (CUDA major + driver); the driver part is "580.95.05"."""
    parts = nvml_version.split(".")
    return ".".join(parts[1:]) if len(parts) >= 3 else nvml_version


def cuda_version_from_int(value: int) -> str:
    """nvmlSystemGetCudaDriverVersion_v2: 13000 -> "13.0", 12080 -> "12.8"."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def parse_cdi_spec(text: str) -> dict[str, Any]:
    """What matters in a CDI spec without a YAML parser: its kind and the driver it names.

    nvidia-ctk writes `kind: nvidia.com/gpu` and mounts versioned driver libraries
    (libcuda.so.580.95.05, libnvidia-ml.so.580.95.05): that version is the driver the spec
    was generated for. Works for the YAML and JSON forms.
    """
    kind = None
    m = re.search(r"""["']?kind["']?\s*:\s*["']?([A-Za-z0-9.\-_/]+)""", text)
    if m:
        kind = m.group(1)
    versions = sorted(
        set(re.findall(r"lib(?:cuda|nvidia-ml)\.so\.(\d+\.\d+(?:\.\d+)?)", text)),
        key=_version_key,
    )
    return {"kind": kind, "driver_versions": versions}


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", v))


# --- edges ---------------------------------------------------------------------------------------


def _read_text(path: Path | str) -> str | None:
    """A host file (a CDI spec, /etc/os-release, /proc/...) through the input reader: a FIFO
    or device planted in /etc/cdi is skipped, never read (it would hang `doctor`, `image`
    and `validate`), and so is one past the input cap. None: not there, not readable."""
    from envbuild.core.fsio import read_input

    try:
        return read_input(path, what="the host file").decode("utf-8", errors="replace")
    except (OSError, UserError):
        return None


DAEMON_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""Where a daemon started by systemd looks for programs (dockerd finds the toolkit's hook there)."""


def probe_toolkit() -> dict[str, Any]:
    """Which NVIDIA Container Toolkit programs are on PATH (or the daemon's usual PATH)."""
    names = (
        "nvidia-container-runtime",
        "nvidia-ctk",
        "nvidia-container-cli",
        "nvidia-container-runtime-hook",
    )
    path = os.pathsep.join(p for p in (os.environ.get("PATH", ""), DAEMON_PATH) if p)
    return {name.replace("-", "_"): shutil.which(name, path=path) for name in names}


def probe_cdi(dirs: Iterable[str] = CDI_DIRS) -> list[dict[str, Any]]:
    """Every CDI spec file: its kind, the driver version it names, its mtime."""
    specs: list[dict[str, Any]] = []
    for d in dirs:
        for path in sorted(
            glob.glob(os.path.join(d, "*.yaml")) + glob.glob(os.path.join(d, "*.json"))
        ):
            text = _read_text(path)
            if text is None:
                continue
            entry = parse_cdi_spec(text)
            entry["devices"] = list(parse_cdi_devices(text)[1])
            entry["path"] = path
            with contextlib.suppress(OSError):
                entry["mtime"] = int(os.stat(path).st_mtime)
            specs.append(entry)
    return specs


def probe_shm(path: str = SHM_PATH) -> dict[str, Any]:
    try:
        st = os.statvfs(path)
    except OSError:
        return {"path": path, "size_mib": None}
    return {"path": path, "size_mib": (st.f_blocks * st.f_frsize) // (1024 * 1024)}


def _os_release() -> str | None:
    text = _read_text("/etc/os-release")
    if not text:
        return None
    for raw in text.splitlines():
        if raw.startswith("PRETTY_NAME="):
            return raw.split("=", 1)[1].strip().strip('"')
    return None


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpu_facts(nvml: Any, index: int) -> dict[str, Any]:
    """One GPU's facts; every optional query that NVML does not support becomes null."""

    def opt(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except nvml.NVMLError:
            return None

    h = nvml.nvmlDeviceGetHandleByIndex(index)
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
    mem = opt(lambda: nvml.nvmlDeviceGetMemoryInfo(h))
    brand = opt(lambda: nvml.nvmlDeviceGetBrand(h))
    power_mw = opt(lambda: nvml.nvmlDeviceGetPowerManagementLimit(h))
    persistence = opt(lambda: nvml.nvmlDeviceGetPersistenceMode(h))
    mig = opt(lambda: nvml.nvmlDeviceGetMigMode(h))
    ecc_mode = opt(lambda: nvml.nvmlDeviceGetEccMode(h))

    def ecc(err_type: int, counter: int) -> int | None:
        v = opt(lambda: nvml.nvmlDeviceGetTotalEccErrors(h, err_type, counter))
        return None if v is None else int(v)

    unc, cor = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    vol, agg = nvml.NVML_VOLATILE_ECC, nvml.NVML_AGGREGATE_ECC

    # Pre-Ampere boards retire pages; Ampere and later remap rows instead (the other query
    # answers NotSupported). Source: NVML API reference, nvmlDeviceGetRemappedRows.
    retired = None
    sbe = opt(
        lambda: nvml.nvmlDeviceGetRetiredPages(
            h, nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        )
    )
    dbe = opt(
        lambda: nvml.nvmlDeviceGetRetiredPages(
            h, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        )
    )
    if sbe is not None or dbe is not None:
        pending = opt(lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(h))
        retired = {
            "single_bit": None if sbe is None else len(sbe),
            "double_bit": None if dbe is None else len(dbe),
            "pending": None if pending is None else bool(pending),
        }
    remapped = None
    rows = opt(lambda: nvml.nvmlDeviceGetRemappedRows(h))
    if rows is not None:
        corr, uncorr, pending_r, failure = rows
        remapped = {
            "correctable": int(corr),
            "uncorrectable": int(uncorr),
            "pending": bool(pending_r),
            "failure": bool(failure),
        }
    return {
        "index": index,
        "name": _decode(nvml.nvmlDeviceGetName(h)),
        "uuid": _decode(opt(lambda: nvml.nvmlDeviceGetUUID(h)) or ""),
        "cc": f"{major}.{minor}",
        "brand": BRAND_TOKENS.get(int(brand)) if brand is not None else None,
        "memory_mib": int(mem.total) // (1024 * 1024) if mem is not None else None,
        # Free at probe time: `envbuild validate --hosts` compares it with what the smoke needs.
        "memory_free_mib": (
            int(mem.free) // (1024 * 1024) if getattr(mem, "free", None) is not None else None
        ),
        "temperature_c": opt(lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
        "power_limit_w": None if power_mw is None else round(power_mw / 1000),
        "persistence_mode": None if persistence is None else bool(persistence),
        "mig_mode": None if mig is None else bool(mig[0]),
        "ecc": {
            "enabled": None if ecc_mode is None else bool(ecc_mode[0]),
            "volatile_uncorrected": ecc(unc, vol),
            "aggregate_uncorrected": ecc(unc, agg),
            "volatile_corrected": ecc(cor, vol),
            "aggregate_corrected": ecc(cor, agg),
        },
        "retired_pages": retired,
        "remapped_rows": remapped,
    }


def _nvml_error_name(nvml: Any, err: Exception) -> str:
    value = getattr(err, "value", None)
    names = {
        getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12): "LibraryNotFound",
        getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9): "DriverNotLoaded",
        getattr(nvml, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18): "LibRmVersionMismatch",
        getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4): "NoPermission",
        getattr(nvml, "NVML_ERROR_GPU_IS_LOST", 15): "GpuIsLost",
    }
    return names.get(value, type(err).__name__) if isinstance(value, int) else type(err).__name__


def probe_driver(
    nvml: Any, proc_version: Path = PROC_VERSION
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Driver facts and per-GPU facts. Raises NoGpuError when no NVIDIA driver is present.

    A "Driver/library version mismatch" (user-space libraries upgraded, old kernel module still
    loaded) is recorded, not raised: the verdict is "reboot or reload the module", and doctor
    needs both versions to say so.
    """
    proc_text = _read_text(proc_version)
    kernel = parse_proc_version(proc_text) if proc_text else None
    driver: dict[str, Any] = {
        "version": None,
        "cuda": None,
        "nvml_version": None,
        "library_version": None,
        "library_path": None,
        "kernel_module_version": kernel,
        "nvml_error": None,
        "nvml_error_text": None,
    }
    gpus: list[dict[str, Any]] = []
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        name = _nvml_error_name(nvml, err)
        if name in ("LibraryNotFound", "DriverNotLoaded") or (
            proc_text is None and name != "LibRmVersionMismatch"
        ):
            raise NoGpuError(
                f"no NVIDIA driver here: NVML says {name} ({err})",
                hint=NO_DRIVER_HINT,
                fields={"nvml_error": name, "kernel_module_version": kernel},
            ) from None
        driver["nvml_error"] = name
        driver["nvml_error_text"] = str(err)
        maps = _read_text("/proc/self/maps") or ""
        driver["library_path"], driver["library_version"] = parse_nvml_library_from_maps(maps)
        return driver, gpus
    try:
        driver["version"] = _decode(nvml.nvmlSystemGetDriverVersion())
        with contextlib.suppress(nvml.NVMLError):
            driver["nvml_version"] = _decode(nvml.nvmlSystemGetNVMLVersion())
        try:
            cuda_int = nvml.nvmlSystemGetCudaDriverVersion_v2()
        except nvml.NVMLError:
            cuda_int = nvml.nvmlSystemGetCudaDriverVersion()
        driver["cuda"] = cuda_version_from_int(int(cuda_int))
        maps = _read_text("/proc/self/maps") or ""
        driver["library_path"], lib_version = parse_nvml_library_from_maps(maps)
        driver["library_version"] = lib_version or (
            nvml_version_to_driver(driver["nvml_version"]) if driver["nvml_version"] else None
        )
        for i in range(int(nvml.nvmlDeviceGetCount())):
            try:
                gpus.append(_gpu_facts(nvml, i))
            except nvml.NVMLError as err:
                # One GPU gone wrong (GpuIsLost: "fallen off the bus", Xid 79) must not hide
                # the others: record it for doctor to report.
                gpus.append(
                    {"index": i, "error": _nvml_error_name(nvml, err), "error_text": str(err)}
                )
    except nvml.NVMLError as err:
        driver["nvml_error"] = _nvml_error_name(nvml, err)
        driver["nvml_error_text"] = str(err)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return driver, gpus


def _library_mtime(path: str | None) -> int | None:
    if not path:
        return None
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return None


NO_DRIVER_ERRORS = ("LibraryNotFound", "DriverNotLoaded", "PynvmlMissing")
"""`driver.nvml_error` values that mean: no NVIDIA GPU can be used here (no driver, or no
NVML bindings to ask it)."""


def _no_driver(err: NoGpuError) -> dict[str, Any]:
    """The driver facts of a host where NVML cannot be asked at all."""
    fields = err.fields or {}
    return {
        "version": None,
        "cuda": None,
        "nvml_version": None,
        "library_version": None,
        "library_path": None,
        "kernel_module_version": fields.get("kernel_module_version"),
        "nvml_error": fields.get("nvml_error") or "PynvmlMissing",
        "nvml_error_text": err.message,
    }


def _probe_gpus(nvml: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Driver and GPU facts; a host without a driver (or without pynvml) gets facts that say
    so instead of an error, so that doctor and validate still report the rest."""
    try:
        if nvml is None:
            try:
                import pynvml
            except ImportError:  # the runtime dependency nvidia-ml-py is missing
                raise NoGpuError(
                    "cannot probe GPUs: the Python package nvidia-ml-py (pynvml) is not installed",
                    hint="pip install nvidia-ml-py, then run `envbuild doctor` again",
                    fields={"nvml_error": "PynvmlMissing"},
                ) from None
            nvml = pynvml
        return probe_driver(nvml)
    except NoGpuError as err:
        return _no_driver(err), []


def no_gpu_error(facts: dict[str, Any]) -> NoGpuError | None:
    """The NoGpuError (exit 2: cannot probe) that facts without a usable driver stand for."""
    driver = facts.get("driver")
    err = driver.get("nvml_error") if isinstance(driver, dict) else None
    if err not in NO_DRIVER_ERRORS:
        return None
    assert isinstance(driver, dict)
    if err == "PynvmlMissing":
        hint = "pip install nvidia-ml-py, then run `envbuild doctor` again"
    else:
        hint = NO_DRIVER_HINT
    return NoGpuError(
        str(driver.get("nvml_error_text") or f"no NVIDIA driver here: NVML says {err}"),
        hint=hint,
        fields={"nvml_error": err, "kernel_module_version": driver.get("kernel_module_version")},
    )


ENGINE_NOT_ASKED: dict[str, Any] = {
    "kind": None,
    "socket": None,
    "reachable": False,
    "via": None,
    "error": "the engine was not asked (no engine facts were passed to the probe)",
    "server_version": None,
    "runtimes": [],
    "default_runtime": None,
    "cdi_spec_dirs": None,
    "discovered_devices": None,
    "local": True,
}
"""The engine facts of a probe that was given none (the fields `engine.facts.probe_engine`
writes)."""


def probe_facts(*, nvml: Any = None, engine: dict[str, Any] | None = None) -> dict[str, Any]:
    """All doctor facts of this host, JSON-able (the `doctor --json` "facts" object).

    `nvml` replaces the pynvml module (tests of the error mapping); None imports pynvml.
    `engine` is what the container engine says of itself (`engine.facts.probe_engine`, asked
    by the caller: the engine layer sits above this one); None records ENGINE_NOT_ASKED.
    Without an NVIDIA driver the facts say so (`driver.nvml_error` in NO_DRIVER_ERRORS, no
    GPUs) and still carry the engine, the toolkit, the CDI specs and /dev/shm.
    """
    driver, gpus = _probe_gpus(nvml)
    driver["library_mtime"] = _library_mtime(driver.get("library_path"))
    engine = dict(engine) if engine is not None else dict(ENGINE_NOT_ASKED)
    # The spec folders the engine reads, beside the usual ones (daemon.json cdi-spec-dirs).
    cdi_dirs = dict.fromkeys([*CDI_DIRS, *(engine.get("cdi_spec_dirs") or [])])
    return {
        "schema": FACTS_SCHEMA,
        "hostname": socket.gethostname(),
        "probed_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "platform": {
            "machine": platform.machine(),
            "kernel": platform.release(),
            "os": _os_release(),
        },
        "driver": driver,
        "gpus": gpus,
        "engine": engine,
        "toolkit": probe_toolkit(),
        "cdi": probe_cdi(cdi_dirs),
        "shm": probe_shm(),
    }


def probe_host() -> Host:
    """This host as a `Host` (driver, CUDA the driver supports, GPUs). NoGpuError without one."""
    facts = probe_facts()
    err = no_gpu_error(facts)
    if err is not None:
        raise err
    return host_from_facts(facts)


# --- reading facts back ---------------------------------------------------------------------------


def _facts_error(what: str, where: str) -> UserError:
    return UserError(
        f"host facts{where}: {what}",
        hint='write host facts with `envbuild doctor --json` on the host (its "facts" object), '
        'or by hand as {"driver": "570.124.06", "gpus": [{"name": "H100", "cc": "9.0"}]}',
    )


def unwrap_facts(obj: Any, *, where: str = "") -> dict[str, Any]:
    """Accept a facts object or a whole `doctor --json` report (which holds one under "facts")."""
    if isinstance(obj, dict) and isinstance(obj.get("facts"), dict):
        obj = obj["facts"]
    if not isinstance(obj, dict):
        raise _facts_error("expected a JSON object", where)
    schema = obj.get("schema", FACTS_SCHEMA)
    if not isinstance(schema, int) or schema > FACTS_SCHEMA:
        raise UserError(
            f"host facts{where}: schema {schema!r} is newer than this envbuild reads ({FACTS_SCHEMA})",
            hint="upgrade envbuild, or record the facts again with this version's `envbuild doctor --json`",
        )
    for key, kinds in _FACT_TYPES.items():
        value = obj.get(key)
        if value is not None and not isinstance(value, kinds):
            raise _facts_error(f"{key!r} is a {type(value).__name__}", where)
    if not all(isinstance(g, dict) for g in obj.get("gpus") or []):
        raise _facts_error("'gpus' holds an entry that is not an object", where)
    return obj


# The shape of the facts doctor and validate read (what `probe_facts` writes): a file of the
# wrong shape is exit 2 naming the key, not a crash in a check.
_FACT_TYPES: dict[str, tuple[type, ...]] = {
    "hostname": (str,),
    "driver": (str, dict),
    "gpus": (list,),
    "engine": (dict,),
    "shm": (dict,),
    "platform": (dict,),
    "toolkit": (dict,),
    "cdi": (list,),
}


def driver_version_of(facts: dict[str, Any]) -> str | None:
    """The driver the host runs: NVML's answer, else the loaded kernel module's."""
    d = facts.get("driver")
    if isinstance(d, str):
        return d or None
    if isinstance(d, dict):
        v = d.get("version") or d.get("kernel_module_version")
        return str(v) if v else None
    return None


def host_from_facts(facts: dict[str, Any], *, gpu_cc: Callable[[str], str] | None = None) -> Host:
    """A `Host` from host facts (doctor's, or hand-written). Bad shapes -> UserError exit 2.

    `gpu_cc` maps a GPU name to its compute capability (`envbuild.preflight.validate.gpu_cc_of(matrix)`):
    with it, hand-written facts may leave out `cc` for a GPU the matrix knows by name."""
    facts = unwrap_facts(facts)
    name = facts.get("hostname") or facts.get("name") or ""
    where = f" of {name}" if name else ""
    d = facts.get("driver")
    if d is not None and not isinstance(d, (str, dict)):
        raise _facts_error("'driver' must be a version string or an object", where)
    cuda = facts.get("cuda_driver") or facts.get("cuda")
    if cuda is None and isinstance(d, dict):
        cuda = d.get("cuda")
    raw_gpus = facts.get("gpus", [])
    if not isinstance(raw_gpus, list):
        raise _facts_error("'gpus' must be a list", where)
    gpus: list[HostGpu] = []
    for i, g in enumerate(raw_gpus):
        if isinstance(g, dict) and g.get("error"):
            continue  # NVML could not read this GPU: it runs nothing (doctor reports it)
        if not isinstance(g, dict) or not isinstance(g.get("name"), str):
            raise _facts_error(f"gpus[{i}] needs a 'name'", where)
        cc = g.get("cc")
        if cc is None and gpu_cc is not None:
            try:
                cc = gpu_cc(g["name"])
            except UserError as err:
                raise _facts_error(f"gpus[{i}] has no 'cc', and {err.message}", where) from None
        if not isinstance(cc, str) or not re.fullmatch(r"\d+\.\d+", cc):
            raise _facts_error(f"gpus[{i}] needs 'cc' as \"major.minor\" (got {cc!r})", where)
        mem, index = g.get("memory_mib") or 0, g.get("index", i)
        for key, value in (("memory_mib", mem), ("index", index)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise _facts_error(
                    f"gpus[{i}] needs '{key}' as a whole number (got {value!r})", where
                )
        gpus.append(
            HostGpu(
                name=g["name"],
                cc=cc,
                memory_mib=mem,
                index=index,
                uuid=str(g.get("uuid") or ""),
                brand=str(g.get("brand") or ""),
            )
        )
    return Host(
        driver=driver_version_of(facts),
        cuda_driver=str(cuda) if cuda else None,
        gpus=tuple(gpus),
        name=str(name),
    )


def load_facts_file(path: Path) -> list[dict[str, Any]]:
    """Host facts from a file: a JSON list, one JSON object, or one JSON object per line.

    The file is read through `fsio.read_input` (no FIFO, device or oversized file), parsed
    with a nesting limit, and every string in it made printable: host names, GPU names and
    versions end up in tables on a terminal (docs/reliability.md)."""
    from envbuild.core.documents import DocumentError, TooDeep, json_loads, printable_data
    from envbuild.core.fsio import read_input

    try:
        text = read_input(path, what="the host facts file").decode("utf-8")
    except (FileNotFoundError, UnicodeDecodeError) as exc:
        raise UserError(
            f"cannot read host facts {path}: {exc}",
            hint="give a file written by `envbuild doctor --json` (one host per line, or a JSON list)",
            fields={"file": str(path)},
        ) from None
    stripped = text.strip()
    if not stripped:
        raise _facts_error("the file is empty", f" in {path}")
    items: list[Any]
    try:
        data = json_loads(stripped)
        items = data if isinstance(data, list) else [data]
    except TooDeep as exc:
        raise _facts_error(str(exc), f" in {path}") from None
    except DocumentError:
        items = []
        for n, raw in enumerate(stripped.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                items.append(json_loads(raw))
            except DocumentError as exc:
                raise _facts_error(f"line {n} is not JSON ({exc})", f" in {path}") from None
    if not items:
        raise _facts_error("the file lists no hosts", f" in {path}")
    items = printable_data(items)
    facts = [unwrap_facts(x, where=f" in {path} (entry {i + 1})") for i, x in enumerate(items)]
    for i, entry in enumerate(facts):
        # `{}` is valid JSON and no host: reading it as one would resolve for nothing.
        if not any(entry.get(key) for key in ("hostname", "name", "driver", "gpus")):
            raise _facts_error("it has no hostname, driver or GPUs", f" in {path} (entry {i + 1})")
    return facts
