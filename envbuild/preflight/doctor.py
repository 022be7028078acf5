"""Checks over host facts (pure): each finding says what is wrong and the next step.

Input: the facts object of `hostinfo.probe_facts()` (or one recorded with `doctor --json`).
Output: findings {check, status ok|problem|info, detail, next_step}. `problem` means the host
needs fixing before GPU images run reliably (exit 1); `info` is worth knowing but blocks
nothing. The checks follow DCGM's "software" tier (NVML loads, persistence mode, page
retirement / row remapping, ECC; https://github.com/NVIDIA/DCGM nvvs/src/NvidiaValidationSuite.cpp) plus
the container-side failures users hit: library/module mismatch, no NVIDIA runtime or CDI
spec, a stale CDI spec, a 64 MB /dev/shm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from packaging.version import Version

from envbuild.core.models import Lock
from envbuild.core.versions import try_version
from envbuild.cuda.archs import ArchRules
from envbuild.host.gpu_attach import choose, from_host_facts, unavailable_message
from envbuild.host.probe import NO_DRIVER_ERRORS, host_from_facts, no_gpu_error
from envbuild.matrix import Matrix
from envbuild.preflight.validate import Verdict, gpu_cc_of, preflight

FindingStatus = Literal["ok", "problem", "info"]

MIN_SHM_MIB = 1024
"""Below this, DataLoader workers and NCCL fail ("Bus error", ncclShmOpen); the default of
`SmokeSettings.min_shm_mib`. Docker's default /dev/shm is 64 MB."""

# Minor-version-compatibility floors of the CUDA 12 and 13 majors (NVIDIA CUDA Compatibility
# guide, https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html).
# Below the first, no current
# framework build runs: they are all CUDA 12 or 13.
CUDA12_MVC_FLOOR = "525.60.13"
CUDA13_FLOOR = "580"

RELOAD_MODULES = (
    "reboot the host (or stop every GPU process and run `sudo rmmod nvidia_uvm nvidia_drm "
    "nvidia_modeset nvidia && sudo modprobe nvidia`); the image is fine, do not rebuild it"
)
CDI_GENERATE = (
    "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml "
    "(or `sudo systemctl restart nvidia-cdi-refresh` with toolkit >= 1.18)"
)


Finding = Verdict[FindingStatus]


def _driver_findings(driver: Mapping[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    err = driver.get("nvml_error")
    lib = driver.get("library_version")
    mod = driver.get("kernel_module_version")
    if err == "LibRmVersionMismatch" or (lib and mod and try_version(lib) != try_version(mod)):
        out.append(
            Finding(
                "driver-mismatch",
                "problem",
                f"Driver/library version mismatch: NVML library {lib or '?'}, kernel module "
                f"{mod or '?'} (driver packages were upgraded without a reboot)",
                RELOAD_MODULES,
            )
        )
    elif err in NO_DRIVER_ERRORS:
        out.append(
            Finding(
                "gpus",
                "problem",
                "cannot look for NVIDIA GPUs: the Python package nvidia-ml-py is not installed"
                if err == "PynvmlMissing"
                else f"this machine has no NVIDIA GPU (no NVIDIA driver: NVML says {err})",
                "pip install nvidia-ml-py, then run `envbuild doctor` again"
                if err == "PynvmlMissing"
                else "if this machine has an NVIDIA GPU: install its driver (or load the kernel "
                "module) and check that `nvidia-smi` lists it; otherwise run GPU images on a GPU "
                "host (CPU images run here)",
            )
        )
    elif err:
        out.append(
            Finding(
                "nvml",
                "problem",
                f"NVML cannot start: {err} ({driver.get('nvml_error_text') or ''})".rstrip(" ()"),
                "run `nvidia-smi`; as a non-root user check the permissions of /dev/nvidia*",
            )
        )
    version = driver.get("version")
    if version:
        cuda = driver.get("cuda") or "?"
        have = try_version(version)
        if have is not None and have < Version(CUDA12_MVC_FLOOR):
            out.append(
                Finding(
                    "driver",
                    "problem",
                    f"driver {version} (CUDA {cuda}) is older than {CUDA12_MVC_FLOOR}, the floor "
                    "of every CUDA 12 image: only CUDA 11 (or CPU) images run here",
                    f"upgrade the driver (>= {CUDA12_MVC_FLOOR} for CUDA 12 images, >= "
                    f'{CUDA13_FLOOR} for CUDA 13), or lock images for it: targets.driver = "{version}"',
                )
            )
        else:
            out.append(Finding("driver", "ok", f"driver {version}, supports CUDA {cuda}"))
    return out


def _gpu_findings(gpus: Sequence[Mapping[str, Any]]) -> list[Finding]:
    out: list[Finding] = []
    for g in gpus:
        i = g.get("index", 0)
        name = f"gpu{i}"
        if g.get("error"):
            out.append(
                Finding(
                    name,
                    "problem",
                    f"NVML cannot read GPU {i}: {g['error']} ({g.get('error_text') or ''})".rstrip(
                        " ()"
                    ),
                    "check `nvidia-smi` and `dmesg | grep -i xid` (Xid 79: the GPU fell off the "
                    "bus); drain the host and reboot it, and reseat or replace the GPU if it "
                    "happens again",
                )
            )
            continue
        mem = g.get("memory_mib")
        parts = [f"{g.get('name')} cc {g.get('cc')}"]
        if mem:
            parts.append(f"{mem} MiB")
        if g.get("temperature_c") is not None:
            parts.append(f"{g['temperature_c']} C")
        if g.get("power_limit_w") is not None:
            parts.append(f"power limit {g['power_limit_w']} W")
        out.append(Finding(name, "ok", ", ".join(parts)))
        if g.get("persistence_mode") is False:
            # DCGM's software tier checks it: without it the driver unloads between jobs, the
            # first CUDA call is slow and GPU state (clocks, ECC counters) resets.
            out.append(
                Finding(
                    f"{name}-persistence",
                    "info",
                    "persistence mode is off: the first CUDA call of every job pays driver "
                    "start-up",
                    "enable the nvidia-persistenced service (or `sudo nvidia-smi -pm 1`)",
                )
            )
        if g.get("mig_mode"):
            out.append(
                Finding(
                    f"{name}-mig",
                    "info",
                    "MIG is enabled: containers see MIG instances, not the whole GPU",
                    "smoke-test with the MIG devices you schedule, or disable MIG "
                    "(`sudo nvidia-smi -mig 0`)",
                )
            )
        out.extend(_memory_health(name, g))
    return out


def _memory_health(name: str, g: Mapping[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    ecc = g.get("ecc") or {}
    vol = ecc.get("volatile_uncorrected") or 0
    agg = ecc.get("aggregate_uncorrected") or 0
    if vol or agg:
        out.append(
            Finding(
                f"{name}-ecc",
                "problem",
                f"uncorrectable ECC errors: {vol} since the last driver load, {agg} lifetime",
                "drain the GPU and run `dcgmi diag -r 3`; if errors persist, reset it "
                "(`sudo nvidia-smi -r -i <index>`) or ask the vendor for an RMA",
            )
        )
    elif ecc.get("enabled") is False:
        out.append(
            Finding(
                f"{name}-ecc",
                "info",
                "ECC is disabled: memory errors go undetected",
                "enable it if the board supports it (`sudo nvidia-smi -e 1`, then reboot)",
            )
        )
    rows = g.get("remapped_rows")
    if isinstance(rows, Mapping):
        if rows.get("failure"):
            out.append(
                Finding(
                    f"{name}-remap",
                    "problem",
                    "row remapping failed: the GPU ran out of spare rows",
                    "take the GPU out of service and ask the vendor for an RMA",
                )
            )
        elif rows.get("pending"):
            out.append(
                Finding(
                    f"{name}-remap",
                    "problem",
                    "a row remap is pending: it takes effect only after a GPU reset",
                    "drain the GPU, then reset it (`sudo nvidia-smi -r -i <index>`) or reboot",
                )
            )
        elif rows.get("uncorrectable"):
            out.append(
                Finding(
                    f"{name}-remap",
                    "info",
                    f"{rows['uncorrectable']} rows remapped after uncorrectable errors",
                    "watch the count; `dcgmi diag -r 3` when it grows",
                )
            )
    pages = g.get("retired_pages")
    if isinstance(pages, Mapping):
        if pages.get("pending"):
            out.append(
                Finding(
                    f"{name}-retired",
                    "problem",
                    "a page retirement is pending: it takes effect after the driver reloads",
                    "drain the GPU and reboot the host (or reload the driver)",
                )
            )
        elif pages.get("double_bit") or pages.get("single_bit"):
            out.append(
                Finding(
                    f"{name}-retired",
                    "info",
                    f"retired pages: {pages.get('double_bit') or 0} double-bit, "
                    f"{pages.get('single_bit') or 0} single-bit",
                    "watch the count; `dcgmi diag -r 3` when it grows",
                )
            )
    return out


def _engine_findings(facts: Mapping[str, Any]) -> list[Finding]:
    engine = facts.get("engine") or {}
    cdi = [s for s in facts.get("cdi") or [] if str(s.get("kind") or "").startswith("nvidia.com/")]
    out: list[Finding] = []
    if not engine.get("reachable"):
        if engine.get("socket"):
            out.append(
                Finding(
                    "engine",
                    "problem",
                    f"docker socket {engine['socket']} is there but the engine does not answer"
                    + (f" ({engine['error']})" if engine.get("error") else ""),
                    "start the engine (`sudo systemctl start docker`) and check that your user "
                    "may use the socket (the docker group)",
                )
            )
        else:
            out.append(
                Finding(
                    "engine",
                    "info",
                    "no container engine here: images cannot run on this host "
                    "(`envbuild smoke` still checks the host's own Python stack)",
                    "install Docker to build and validate images on this host",
                )
            )
    else:
        runtimes = list(engine.get("runtimes") or [])
        out.append(
            Finding(
                "engine",
                "ok",
                f"docker {engine.get('server_version') or '?'}, runtimes: "
                f"{', '.join(runtimes) or 'none'}",
            )
        )
        out.append(_attach_finding(facts))
    out.extend(_cdi_findings(facts, cdi))
    return out


def _attach_finding(facts: Mapping[str, Any]) -> Finding:
    """The GPU-attach rule `image` and `validate` use (gpu_attach.py), over the same facts."""
    attach = choose(from_host_facts(facts))
    if attach.ok:
        detail = f"GPUs reach containers through {attach.way}: {attach.reason}"
        return Finding("gpu-runtime", "ok", detail)
    message, hint = unavailable_message(attach)
    return Finding("gpu-runtime", "problem", message, hint)


def _cdi_findings(facts: Mapping[str, Any], cdi: Sequence[Mapping[str, Any]]) -> list[Finding]:
    driver = facts.get("driver") or {}
    current_text = str(driver.get("version") or driver.get("kernel_module_version") or "")
    current = try_version(current_text)
    lib_mtime = driver.get("library_mtime")
    out: list[Finding] = []
    for spec in cdi:
        names = [str(v) for v in spec.get("driver_versions") or []]
        stale_reason = ""
        if names and current is not None and all(try_version(v) != current for v in names):
            stale_reason = f"it names driver {', '.join(names)}, the host runs {current_text}"
        elif (
            # No version inside: fall back to file times (a spec written before the driver's
            # libraries was generated for an older driver). Nix-style stores set mtime 1.
            not names
            and isinstance(lib_mtime, int)
            and isinstance(spec.get("mtime"), int)
            and lib_mtime > 1
            and spec["mtime"] < lib_mtime
        ):
            stale_reason = "it is older than the installed driver libraries"
        if stale_reason:
            out.append(
                Finding(
                    "cdi",
                    "problem",
                    f"CDI spec {spec.get('path')} is stale: {stale_reason}; containers started "
                    "through it miss the driver libraries",
                    CDI_GENERATE,
                )
            )
    return out


def _shm_finding(facts: Mapping[str, Any], min_shm_mib: int) -> list[Finding]:
    shm = facts.get("shm") or {}
    size = shm.get("size_mib")
    if size is None:
        return [
            Finding(
                "shm",
                "info",
                f"{shm.get('path') or '/dev/shm'} is missing",
                "mount a tmpfs on /dev/shm",
            )
        ]
    if size < min_shm_mib:
        return [
            Finding(
                "shm",
                "problem",
                f"/dev/shm is {size} MiB (< {min_shm_mib} MiB): DataLoader workers and NCCL "
                'fail with "Bus error" or "No space left on device"',
                "on a host: `sudo mount -o remount,size=16G /dev/shm`; in a container: run it "
                "with --shm-size=2g or --ipc=host (Kubernetes: an emptyDir of medium Memory "
                "on /dev/shm)",
            )
        ]
    return [Finding("shm", "ok", f"/dev/shm is {size} MiB")]


def check_host(
    facts: Mapping[str, Any],
    *,
    locks: Sequence[tuple[str, Lock]] = (),
    min_shm_mib: int = MIN_SHM_MIB,
    rules: ArchRules | None = None,
    matrix: Matrix | None = None,
) -> list[Finding]:
    """All findings for one host, in a fixed order: driver, GPUs, engine, shm, locks.
    `rules`: the matrix's Tegra capabilities and arch renames (None = desktop rules only);
    `matrix`: lets the lock verdicts derive the CUDA version of the driver (see
    `envbuild.preflight.validate.preflight`)."""
    driver = facts.get("driver") or {}
    findings = _driver_findings(driver if isinstance(driver, Mapping) else {})
    gpus = facts.get("gpus") or []
    if not gpus and not driver.get("nvml_error"):
        findings.append(
            Finding(
                "gpus",
                "problem",
                "the driver is loaded but NVML sees no GPU",
                "check `nvidia-smi` and `dmesg | grep -i nvrm` (a GPU fallen off the bus "
                "shows Xid 79)",
            )
        )
    findings.extend(_gpu_findings(gpus))
    findings.extend(_engine_findings(facts))
    findings.extend(_shm_finding(facts, min_shm_mib))
    findings.extend(lock_findings(facts, locks, rules, matrix))
    return findings


def lock_findings(
    facts: Mapping[str, Any],
    locks: Sequence[tuple[str, Lock]],
    rules: ArchRules | None = None,
    matrix: Matrix | None = None,
) -> list[Finding]:
    """Which locks in reach would run here. Informational: a lock that does not fit this host
    is not a fault of the host; `envbuild validate` turns it into a verdict."""
    if not locks:
        return []
    host = host_from_facts(dict(facts), gpu_cc=gpu_cc_of(matrix) if matrix else None)
    out: list[Finding] = []
    for label, lock in locks:
        pf = preflight(lock, host, facts=facts, lock_label=label, rules=rules, matrix=matrix)
        if pf.ok:
            mvc = pf.verdict is not None and pf.verdict.outcome == "runs_minor_compat"
            detail = "would run here" + (" relying on minor-version compatibility" if mvc else "")
            out.append(Finding(f"lock {label}", "ok", detail))
        else:
            first = pf.failed[0]
            more = f" (+{len(pf.failed) - 1} more)" if len(pf.failed) > 1 else ""
            fix = pf.verdict.fix if pf.verdict and pf.verdict.fix else first.next_step
            if first.name == "gpus":
                fix = ""  # the host's own "gpus" finding already says what to do
            out.append(
                Finding(f"lock {label}", "info", f"would not run: {first.detail}{more}", fix)
            )
    return out


def healthy(findings: Sequence[Finding]) -> bool:
    return not any(f.status == "problem" for f in findings)


def report(facts: Mapping[str, Any], findings: Sequence[Finding]) -> dict[str, Any]:
    """The `doctor --json` object: the facts themselves plus the verdict and findings, so the
    same file feeds `envbuild validate --hosts`."""
    out = dict(facts)
    out["ok"] = healthy(findings)
    out["findings"] = [f.to_json() for f in findings]
    return out


@dataclass(frozen=True)
class DoctorReport:
    """What `envbuild doctor` found: the host facts and the findings over them."""

    facts: Mapping[str, Any]
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return healthy(self.findings)

    @property
    def exit_code(self) -> int:
        """0 healthy; 1 problems found; 2 cannot probe (no NVIDIA driver, or no pynvml)."""
        if no_gpu_error(dict(self.facts)) is not None:
            return 2
        return 0 if self.ok else 1

    def to_json(self) -> dict[str, Any]:
        return report(self.facts, self.findings)
