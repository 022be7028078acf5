"""Pure check logic of the smoke payload: numbers in, one check record out.

Standard library only and no I/O, so every rule here is unit-tested without a GPU or a
framework (tests/unit/payload/test_payload_checks.py), and `envbuild.smoke.plan` reuses the same rules to
re-check a report against its plan. A check record is a dict:
{"name", "tier", "status": "pass"|"fail"|"warn"|"skip", "figure", "hint"}.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

REPORT_MARKER = "ENVBUILD-SMOKE-REPORT"
"""The payload's last stdout line starts with this and a space, then the report's JSON."""
REPORT_SCHEMA = 1
PLAN_SCHEMA = 1
VERDICT_MARKER = "ENVBUILD-SMOKE-VERDICT"
"""With `--verdict -`, a stdout line of this marker, a space and the node's verdict JSON."""
VERDICT_SCHEMA = 1
VERDICT_MAX_BYTES = 4096
"""A verdict fits a Kubernetes termination message: the kubelet keeps at most 4096 bytes of a
container's terminationMessagePath (kubernetes.io/docs/tasks/debug/debug-application/
determine-reason-pod-failure/, "Customizing the termination message")."""
STATUSES = ("pass", "fail", "warn", "skip")
PRECISIONS = ("auto", "bf16", "fp16", "fp32")
"""The plan's "precision": auto = bf16 where the GPU has it (fp16 + GradScaler before Ampere,
fp32 on the CPU); torch honours bf16/fp16, TensorFlow bf16/fp32, JAX picks for itself."""
DEFAULT_PRECISION = "auto"


class Baseline(TypedDict):
    """One GPU's healthy figures (a row of matrix/baselines.toml)."""

    gpu: str
    bf16_tflops: float | None
    mem_bw_tbs: float | None
    nvlink_busbw_gbs: float | None
    confidence: str
    source: str


class SmokePlan(TypedDict):
    """What the payload must check: `/opt/envbuild/plan.json` in an image (envbuild.smoke.plan.plan
    writes it; the payload reads it, tolerating missing keys from older plans)."""

    schema: int
    name: str
    input_hash: str | None
    framework: str
    """A framework name, or "auto" (the first one importable)."""
    tier: int
    allow_cpu: bool
    steps: int
    timeout_s: int
    min_shm_mib: int
    min_free_mib: int
    driver_floor: str | None
    expect: dict[str, str]
    """label ("framework", "cuda", "cudnn", "nccl") -> the version the lock pins."""
    locked_archs: list[str]
    baselines: list[Baseline]
    floor_ratio: float
    multi_gpu: bool
    collective_timeout_s: int
    precision: str
    """One of PRECISIONS."""
    extensions: list[dict[str, str]]
    """{"name", "version"} of each package the image compiled from source (may be absent)."""
    target_ccs: list[str]
    """Compute capabilities of the lock's target GPUs ("9.0"): extensions must cover them."""
    tegra_ccs: list[str]
    """Those of them that are Tegra (Jetson) GPUs: an exact cubin only."""


class CheckRecord(TypedDict):
    """One check of a report (`check()` makes them)."""

    name: str
    tier: int
    status: str
    """One of STATUSES."""
    figure: str
    hint: str


class SmokeReport(TypedDict):
    """What the payload prints after REPORT_MARKER (schema REPORT_SCHEMA)."""

    schema: int
    ok: bool
    framework: str | None
    device: str
    """ "cuda" or "cpu"."""
    tier: int
    allow_cpu: bool
    host: dict[str, Any]
    """{"source", "driver", "cuda_driver", "gpus": [...]} as NVML or the framework saw them."""
    versions: dict[str, dict[str, str | None]]
    """label -> {"expected", "seen"}."""
    checks: list[CheckRecord]
    timings: dict[str, float]
    metrics: dict[str, Any]
    errors: list[str]


# DCGM's policy: a SKU's performance floor is 0.75 x a healthy measurement
# (NVIDIA/DCGM nvvs/diag-skus.yaml.in, "measures ~50000, x.75"; reference §A1).
FLOOR_RATIO = 0.75

# NVML clocks-event ("throttle") reason bits, from nvml.h (nvmlClocksEventReason*).
THROTTLE_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the GPU is unhealthy or badly cooled, not just busy (nvml.h comments:
# HW slowdown = "temperature being too high" or "external power brake"; thermal = too hot).
BAD_THROTTLE = (
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)


def check(name: str, tier: int, status: str, figure: str = "", hint: str = "") -> dict[str, Any]:
    """One check record; `hint` is the next step when the status is not pass."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    return {"name": name, "tier": tier, "status": status, "figure": figure, "hint": hint}


# --- versions ---------------------------------------------------------------------------------


def version_numbers(text: str | None) -> tuple[int, ...]:
    """The leading dotted numbers of a version: "2.7.1+cu128" -> (2, 7, 1); "12.8" -> (12, 8)."""
    if not text:
        return ()
    public = str(text).split("+", 1)[0].strip()
    out: list[int] = []
    for part in public.split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m.group()))
        if m.group() != part:
            break  # "1rc1": keep 1, stop
    return tuple(out)


def version_matches(expected: str | None, seen: str | None) -> bool | None:
    """Whether `seen` is the `expected` version, on the components both name.

    Sources print versions at different depths (a lock's CUDA "12.8.0", torch.version.cuda
    "12.8"; cuDNN "9.10.2.21" from the wheel, "9.10.2" from the library), so compare on the
    common prefix. None = the plan expects nothing (not checkable).
    """
    if not expected:
        return None
    e, s = version_numbers(expected), version_numbers(seen)
    if not e or not s:
        return False
    n = min(len(e), len(s))
    return e[:n] == s[:n]


def cudnn_version_text(n: int | None) -> str | None:
    """torch.backends.cudnn.version() -> dotted text.

    cuDNN 9 encodes major*10000 + minor*100 + patch (91900 = 9.19.0); cuDNN 8 and older
    major*1000 + minor*100 + patch (8902 = 8.9.2) (cudnn.h CUDNN_VERSION in each major).
    """
    if not n:
        return None
    if n >= 90000:
        return f"{n // 10000}.{(n % 10000) // 100}.{n % 100}"
    return f"{n // 1000}.{(n % 1000) // 100}.{n % 100}"


def check_version(label: str, expected: str | None, seen: str | None) -> dict[str, Any]:
    """`version:<label>`: the framework/CUDA/cuDNN/NCCL seen against the plan."""
    name = f"version:{label}"
    verdict = version_matches(expected, seen)
    if verdict is None:
        return check(name, 1, "skip", f"seen {seen or 'none'} (plan expects none)")
    if verdict:
        return check(name, 1, "pass", f"{seen} (plan {expected})")
    return check(
        name,
        1,
        "fail",
        f"seen {seen or 'none'}, plan expects {expected}",
        f"the image does not hold the locked {label}: rebuild it from its lock "
        f"(`envbuild image <dir>`), or re-lock if the change is wanted",
    )


# --- GPU visibility, build, architectures ---------------------------------------------------------


def expected_visible(nvml_count: int | None, cuda_visible_devices: str | None) -> int | None:
    """How many GPUs the framework should see, given NVML's count and CUDA_VISIBLE_DEVICES.

    CUDA reads the variable left to right and stops at the first entry that is not a valid
    index or UUID ("CUDA_VISIBLE_DEVICES", CUDA C Programming Guide, env variables); "" hides all.
    """
    if nvml_count is None:
        return None
    if cuda_visible_devices is None:
        return nvml_count
    count = 0
    seen: set[str] = set()
    for raw in cuda_visible_devices.split(","):
        item = raw.strip()
        if item.isdigit():
            if int(item) >= nvml_count or item in seen:
                break
        elif not item.upper().startswith(("GPU-", "MIG-")):
            break
        seen.add(item)
        count += 1
    return count


def check_gpu_visible(
    *,
    nvml_count: int | None,
    framework_count: int,
    cuda_visible_devices: str | None,
    allow_cpu: bool,
    framework: str,
) -> dict[str, Any]:
    """`gpu-visible`: the framework sees GPUs, as many as NVML (after CUDA_VISIBLE_DEVICES)."""
    want = expected_visible(nvml_count, cuda_visible_devices)
    cvd = "" if cuda_visible_devices is None else f", CUDA_VISIBLE_DEVICES={cuda_visible_devices!r}"
    figure = f"{framework} sees {framework_count}, NVML {('n/a' if nvml_count is None else nvml_count)}{cvd}"
    if framework_count == 0:
        if allow_cpu:
            return check("gpu-visible", 1, "warn", figure + "; running on the CPU (--allow-cpu)")
        hint = (
            "no GPU is visible to the framework: run the container with `--gpus all` "
            "(NVIDIA Container Toolkit) and unset an empty CUDA_VISIBLE_DEVICES; "
            "pass --allow-cpu only to test a CPU image"
        )
        if nvml_count == 0 or nvml_count is None:
            hint = (
                "no NVIDIA GPU or driver is visible here: run on a GPU host with the container "
                "started with `--gpus all`; pass --allow-cpu only to test a CPU image"
            )
        return check("gpu-visible", 1, "fail", figure, hint)
    if want is not None and want != framework_count:
        return check(
            "gpu-visible",
            1,
            "fail",
            figure,
            f"NVML and {framework} disagree on the GPU count: check CUDA_VISIBLE_DEVICES and "
            "that the container got every GPU (`--gpus all`)",
        )
    return check("gpu-visible", 1, "pass", figure)


def arch_covers(cc: str, archs: Iterable[str], *, tegra: bool = False) -> tuple[bool, str]:
    """Whether a build's archs can run on compute capability `cc` ("9.0").

    A cubin sm_XY runs on the same major with a minor >= Y; an arch-specific cubin (sm_90a)
    only on exactly X.Y, a family one (sm_100f) on the same major; PTX compute_XY is JIT
    compiled by the driver for any cc >= X.Y (CUDA C Programming Guide, "Binary
    Compatibility" and "PTX Compatibility"; family/arch-specific: CUDA 12.9 release notes).
    A Tegra (Jetson, integrated) GPU runs only cubins built for exactly its capability: "Binary
    compatibility is supported only for the desktop. It is not supported for Tegra" (same
    guide); envbuild/cuda/archs.py holds the same rule for the host side.
    Returns (covered, how).
    """
    dev = version_numbers(cc)
    if len(dev) < 2:
        return False, f"unknown compute capability {cc!r}"
    cubins: list[tuple[int, int, str]] = []
    ptx: list[tuple[int, int, str]] = []
    for arch in archs:
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([af]?)", arch.strip())
        if not m:
            continue
        kind, major, minor, suffix = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if suffix == "a" or (tegra and kind == "sm"):
            ok = (major, minor) == dev[:2]
        elif suffix == "f" or kind == "sm":
            ok = major == dev[0] and minor <= dev[1]
        else:
            ok = (major, minor) <= dev[:2]
        if ok:
            (cubins if kind == "sm" else ptx).append((major, minor, arch.strip()))
    # The driver loads the closest cubin; PTX is JIT compiled only when no cubin fits.
    if cubins:
        return True, f"cubin {max(cubins)[2]}"
    if ptx:
        return True, f"PTX {max(ptx)[2]} (JIT at first use)"
    return False, "no cubin or PTX for it"


def check_archs(
    ccs: Sequence[str],
    archs: Sequence[str],
    *,
    framework: str,
    tegra_ccs: Iterable[str] = (),
) -> dict[str, Any]:
    """`arch-covered`: every visible GPU's cc has a cubin or PTX in the framework build.
    `tegra_ccs`: capabilities of integrated (Jetson) GPUs, which need an exact cubin."""
    tegra = set(tegra_ccs)
    if not ccs:
        return check("arch-covered", 1, "skip", "no GPU visible")
    if not archs:
        return check("arch-covered", 1, "skip", f"{framework} does not list its archs")
    parts, bad = [], []
    for cc in sorted(set(ccs)):
        ok, how = arch_covers(cc, archs, tegra=cc in tegra)
        parts.append(f"cc {cc}: {how}")
        if not ok:
            bad.append(cc)
    figure = "; ".join(parts)
    if bad:
        return check(
            "arch-covered",
            1,
            "fail",
            f"{figure}; build has {' '.join(sorted(archs))}",
            f"this {framework} build has no kernels for compute capability {', '.join(bad)} "
            '("no kernel image is available"): lock with these GPUs in the request\'s targets '
            "so the resolver picks a build that covers them",
        )
    return check("arch-covered", 1, "pass", figure)


def check_extension_archs(
    name: str,
    libraries: Mapping[str, Sequence[str]],
    *,
    target_ccs: Sequence[str],
    visible_ccs: Sequence[str] = (),
    tegra_ccs: Iterable[str] = (),
) -> dict[str, Any]:
    """`ext-archs:<name>`: every library of a package compiled from source carries code for
    every target GPU of the lock and every visible GPU (the rule of `arch_covers`).
    `libraries`: path -> the archs of its device code ([] for a CPU-only library)."""
    check_name = f"ext-archs:{name}"
    tegra = set(tegra_ccs)
    with_code = {path: archs for path, archs in sorted(libraries.items()) if archs}
    if not libraries:
        return check(check_name, 1, "skip", f"{name} installs no compiled library")
    if not with_code:
        return check(
            check_name,
            1,
            "warn",
            f"{name}: {len(libraries)} compiled librar(ies), none with GPU code",
            f"{name} was built without CUDA code: its setup.py may have looked for a GPU or "
            "nvcc and fallen back to a CPU build; read the builder stage's log",
        )
    ccs = sorted(set(target_ccs) | set(visible_ccs))
    if not ccs:
        return check(check_name, 1, "skip", f"{name}: no target or visible GPU to check")
    bad: list[str] = []
    parts: list[str] = []
    for path, archs in with_code.items():
        short = path.rsplit("/", 1)[-1]
        missing = [cc for cc in ccs if not arch_covers(cc, archs, tegra=cc in tegra)[0]]
        parts.append(f"{short}: {' '.join(archs)}")
        bad += [f"{short} has no code for {', '.join(missing)}"] if missing else []
    figure = "; ".join(parts) + f" (GPUs {', '.join(ccs)})"
    if bad:
        return check(
            check_name,
            1,
            "fail",
            "; ".join(bad) + f"; {figure}",
            f'{name} would fail with "no kernel image is available" there: rebuild the image '
            "from its lock (the builder compiles for the lock's [targets] gpus); a GPU not in "
            "the targets needs to be added to them and re-locked",
        )
    return check(check_name, 1, "pass", figure)


def check_extension_call(name: str, figure: str | None, error: str | None) -> dict[str, Any]:
    """`ext-smoke:<name>`: the package's own `envbuild.smoke.plan` entry point, run on the GPU."""
    if error is not None:
        return check(
            f"ext-smoke:{name}",
            2,
            "fail",
            error[:300],
            f"{name}'s own GPU test failed: a kernel that does not run or computes wrongly on "
            "this GPU (read the error; rebuild for the right archs, or report it to the package)",
        )
    return check(f"ext-smoke:{name}", 2, "pass", (figure or "returned")[:300])


def check_cuda_build(*, framework: str, cuda_seen: str | None, allow_cpu: bool) -> dict[str, Any]:
    """`cuda-build`: the framework was built with CUDA (not a CPU wheel)."""
    if cuda_seen:
        return check("cuda-build", 1, "pass", f"{framework} built with CUDA {cuda_seen}")
    if allow_cpu:
        return check("cuda-build", 1, "warn", f"{framework} is a CPU build (--allow-cpu)")
    return check(
        "cuda-build",
        1,
        "fail",
        f"{framework} is a CPU-only build",
        "pip installed the CPU wheel: lock the CUDA variant (its index URL) and rebuild",
    )


# --- host -----------------------------------------------------------------------------------------


def check_driver_floor(driver: str | None, floor: str | None) -> dict[str, Any]:
    """`driver-floor`: the host driver is at least the lock's effective floor."""
    if not floor:
        return check("driver-floor", 1, "skip", f"driver {driver or 'n/a'} (plan has no floor)")
    if not driver:
        return check(
            "driver-floor",
            1,
            "warn",
            f"driver unknown, floor {floor}",
            "install pynvml or nvidia-smi to read the driver",
        )
    if version_numbers(driver) >= version_numbers(floor):
        return check("driver-floor", 1, "pass", f"driver {driver} >= {floor}")
    return check(
        "driver-floor",
        1,
        "fail",
        f"driver {driver} < {floor}",
        f"upgrade the host's NVIDIA driver to {floor} or newer, or lock for this host "
        f"(`envbuild lock --driver {driver}`)",
    )


def check_shm(shm_mib: float | None, min_mib: int) -> dict[str, Any]:
    """`shm`: /dev/shm is big enough for DataLoader workers and NCCL (else "Bus error")."""
    if shm_mib is None:
        return check(
            "shm",
            1,
            "warn",
            "/dev/shm missing",
            "mount a tmpfs at /dev/shm (docker: --shm-size=1g or --ipc=host)",
        )
    figure = f"/dev/shm {shm_mib:.0f} MiB (need {min_mib})"
    if shm_mib >= min_mib:
        return check("shm", 1, "pass", figure)
    return check(
        "shm",
        1,
        "fail",
        figure,
        f"/dev/shm is too small for DataLoader workers and NCCL: run the container with "
        f"--shm-size={max(1, (min_mib + 1023) // 1024)}g or --ipc=host",
    )


def check_free_memory(free_mib: Sequence[float], need_mib: int) -> dict[str, Any]:
    """`free-memory`: every GPU has room for the test before it starts."""
    if not free_mib:
        return check("free-memory", 1, "skip", "no GPU visible")
    least = min(free_mib)
    figure = f"least free {least:.0f} MiB of {len(free_mib)} GPU(s) (need {need_mib})"
    if least >= need_mib:
        return check("free-memory", 1, "pass", figure)
    return check(
        "free-memory",
        1,
        "fail",
        figure,
        "other processes hold the GPU memory: stop them (nvidia-smi lists them) or run tier 1 only",
    )


# --- training ---------------------------------------------------------------------------------


def check_loss_falling(
    losses: Sequence[float], *, ratio: float = 0.8, tier: int = 2
) -> dict[str, Any]:
    """`loss-falling`: the mean of the last 3 losses <= ratio x the mean of the first 3, all finite."""
    if len(losses) < 6:
        return check(
            "loss-falling",
            tier,
            "fail",
            f"only {len(losses)} steps ran",
            "raise the smoke steps to at least 6",
        )
    if any(x != x or x in (float("inf"), float("-inf")) for x in losses):
        return check(
            "loss-falling",
            tier,
            "fail",
            "loss became NaN/inf",
            "mixed precision overflowed or the GPU computes wrong results: run `envbuild doctor` and a DCGM diag",
        )
    first = sum(losses[:3]) / 3
    last = sum(losses[-3:]) / 3
    figure = f"{first:.3f} -> {last:.3f} over {len(losses)} steps"
    if last <= ratio * first:
        return check("loss-falling", tier, "pass", figure)
    return check(
        "loss-falling",
        tier,
        "fail",
        figure + f" (needs <= {ratio:.2f}x)",
        "the optimizer does not learn: check the framework's kernels on this GPU (cuBLAS/cuDNN) "
        "with a DCGM diag, or report the image",
    )


def check_grads(
    *, n_params: int, nonfinite: Sequence[str], zero: Sequence[str], tier: int = 2
) -> dict[str, Any]:
    """`grads`: every parameter has a finite, non-zero gradient."""
    if n_params == 0:
        return check(
            "grads",
            tier,
            "fail",
            "no parameters with gradients",
            "the model has no trainable parameters",
        )
    if nonfinite:
        return check(
            "grads",
            tier,
            "fail",
            f"{len(nonfinite)}/{n_params} non-finite, e.g. {nonfinite[0]}",
            "NaN/inf gradients: mixed precision overflowed or the GPU computes wrong results",
        )
    if zero:
        return check(
            "grads",
            tier,
            "fail",
            f"{len(zero)}/{n_params} all-zero, e.g. {zero[0]}",
            "parameters got no gradient: the backward pass is broken in this build",
        )
    return check("grads", tier, "pass", f"{n_params} params finite and non-zero")


def check_placement(*, device: str, off_device: Sequence[str], tier: int = 2) -> dict[str, Any]:
    """`on-device`: every parameter and batch lived on the device under test."""
    if off_device:
        return check(
            "on-device",
            tier,
            "fail",
            f"{len(off_device)} tensors off {device}, e.g. {off_device[0]}",
            "tensors stayed on the CPU: the framework silently fell back",
        )
    return check("on-device", tier, "pass", f"all params and batches on {device}")


def check_bitwise(mismatches: int, repeats: int, *, tier: int = 2) -> dict[str, Any]:
    """`matmul-repeat`: an identical matmul repeated gives bit-identical results (gpu-burn idea)."""
    figure = f"{mismatches} differing elements over {repeats} repeats"
    if mismatches == 0:
        return check("matmul-repeat", tier, "pass", figure)
    return check(
        "matmul-repeat",
        tier,
        "fail",
        figure,
        "the GPU gives different answers to the same product: faulty GPU; drain the host and run "
        "`dcgmi diag -r 3`",
    )


def pick_baseline(
    gpu_name: str, baselines: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The baseline whose `gpu` is the longest case-insensitive substring of the NVML name."""
    name = gpu_name.lower()
    hits = [b for b in baselines if str(b.get("gpu", "")).lower() in name and b.get("gpu")]
    if not hits:
        return None
    return max(hits, key=lambda b: (len(str(b["gpu"])), str(b["gpu"])))


def check_throughput(
    name: str,
    *,
    value: float | None,
    unit: str,
    gpu_name: str,
    baseline: Mapping[str, Any] | None,
    key: str,
    floor_ratio: float = FLOOR_RATIO,
    tier: int = 2,
) -> dict[str, Any]:
    """`<name>`: a measured rate against floor_ratio x the GPU's healthy baseline.

    A miss fails only against a high-confidence baseline (one measured on a healthy GPU of the
    same SKU); against an estimate it warns.
    """
    if value is None:
        return check(name, tier, "skip", "not measured")
    figure = f"{value:.1f} {unit}"
    if baseline is None or not baseline.get(key):
        return check(
            name,
            tier,
            "warn",
            figure + f" (no baseline for {gpu_name!r})",
            "add a measured row for this GPU to matrix/baselines.toml",
        )
    healthy = float(baseline[key])
    floor = floor_ratio * healthy
    figure += f" vs floor {floor:.1f} ({floor_ratio:g} x {healthy:g})"
    if value >= floor:
        return check(name, tier, "pass", figure)
    strict = str(baseline.get("confidence", "high")) == "high"
    return check(
        name,
        tier,
        "fail" if strict else "warn",
        figure,
        "the GPU is slower than a healthy one: look for other load (nvidia-smi), clocks and "
        "throttle reasons, and run `dcgmi diag -r 2`",
    )


def throttle_flags(mask: int) -> list[str]:
    """NVML clocks-event reason bitmask -> sorted flag names."""
    return sorted(name for bit, name in THROTTLE_BITS.items() if mask & bit)


def check_telemetry(
    peaks: Mapping[str, Any] | None, *, tier: int = 2, reason: str | None = None
) -> dict[str, Any]:
    """`telemetry`: NVML samples during the run: the GPU was busy, and not thermally throttled.
    `reason`: why there are no samples (the sampler's error), shown in the skip."""
    if not peaks or not peaks.get("samples"):
        why = reason or (peaks or {}).get("error")
        return check("telemetry", tier, "skip", "NVML not available" + (f": {why}" if why else ""))
    flags = list(peaks.get("throttle", []))
    figure = (
        f"peak util {peaks.get('util_pct', 0)}%, mem {peaks.get('mem_used_mib', 0)} MiB, "
        f"{peaks.get('power_w', 0):.0f} W, {peaks.get('temp_c', 0)} C, "
        f"{peaks['samples']} samples"
    )
    if flags:
        figure += ", throttle: " + " ".join(flags)
    bad = [f for f in flags if f in BAD_THROTTLE]
    if bad:
        return check(
            "telemetry",
            tier,
            "warn",
            figure,
            "the GPU slowed itself down (thermal/power brake): check cooling and power, "
            "`nvidia-smi -q -d PERFORMANCE`",
        )
    if not peaks.get("util_pct"):
        return check(
            "telemetry",
            tier,
            "warn",
            figure,
            "NVML saw no GPU utilisation during the run: was the work really on this GPU?",
        )
    return check("telemetry", tier, "pass", figure)


def check_allreduce(got: float | None, expected: float, *, world: int) -> dict[str, Any]:
    """`ddp-allreduce`: the sum over ranks is exact."""
    if got is None:
        return check(
            "ddp-allreduce",
            2,
            "fail",
            "no result",
            "a rank died before the all-reduce: see its error",
        )
    figure = f"sum {got:g} (expected {expected:g}, {world} ranks)"
    if got == expected:
        return check("ddp-allreduce", 2, "pass", figure)
    return check(
        "ddp-allreduce",
        2,
        "fail",
        figure,
        "NCCL returned a wrong sum: check the GPU links (`nvidia-smi topo -m`) and run nccl-tests",
    )


def check_weights_equal(checksums: Sequence[str], *, world: int) -> dict[str, Any]:
    """`ddp-weights`: after the DDP steps every rank holds identical weights."""
    if len(checksums) != world:
        return check(
            "ddp-weights",
            2,
            "fail",
            f"{len(checksums)}/{world} ranks reported",
            "a rank died or hung: see the DDP error; NCCL_DEBUG=INFO says more",
        )
    if len(set(checksums)) == 1:
        return check("ddp-weights", 2, "pass", f"identical on {world} ranks")
    return check(
        "ddp-weights",
        2,
        "fail",
        f"{len(set(checksums))} different weight sets on {world} ranks",
        "DDP replicas diverged: gradients were not averaged correctly (NCCL or GPU fault)",
    )


def check_busbw(
    value: float, *, world: int, gpu_name: str, baseline: Mapping[str, Any] | None, nvls: str
) -> dict[str, Any]:
    """`ddp-busbw`: the all-reduce bus bandwidth against the SKU's NVLink figure. Only warns:
    one 256 MiB size does not reach NCCL's peak, and NVLink SHARP (NCCL_NVLS_ENABLE) changes
    what busbw means (https://github.com/NVIDIA/nccl-tests/issues/212)."""
    figure = f"all-reduce 256 MiB: {value:.1f} GB/s bus bandwidth ({world} GPUs, NVLS {nvls})"
    expected = float(baseline.get("nvlink_busbw_gbs") or 0) if baseline else 0.0
    if not expected:
        return check("ddp-busbw", 2, "pass", figure + f" (no NVLink figure for {gpu_name!r})")
    ratio = value / expected
    figure += f" = {ratio:.2f} x the {expected:g} GB/s NVLink figure"
    if ratio >= 0.5:
        return check("ddp-busbw", 2, "pass", figure)
    return check(
        "ddp-busbw",
        2,
        "warn",
        figure,
        "the GPUs talk slower than NVLink allows: compare `nvidia-smi topo -m` with the report's "
        "topology (PCIe instead of NVLink?) and rerun with NCCL_DEBUG=INFO",
    )


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> float:
    """nccl-tests' all-reduce bus bandwidth in GB/s: algbw x 2(n-1)/n (nccl-tests PERFORMANCE.md)."""
    if seconds <= 0 or world < 1:
        return 0.0
    return nbytes / seconds / 1e9 * (2 * (world - 1) / world)


# --- report -----------------------------------------------------------------------------------


def report_ok(checks: Iterable[Mapping[str, Any]]) -> bool:
    """A report passes when no check failed (warnings and skips do not fail it)."""
    return all(c.get("status") != "fail" for c in checks)


def report_line(report: Mapping[str, Any]) -> str:
    """The last stdout line: the marker and the compact JSON report."""
    return (
        REPORT_MARKER + " " + json.dumps(report, sort_keys=True, separators=(",", ":"), default=str)
    )


def _cut(text: Any, n: int) -> str:
    text = str(text or "")
    return text if len(text) <= n else text[: n - 3] + "..."


def verdict_of(report: Mapping[str, Any], node: str) -> dict[str, Any]:
    """The one node's verdict a fleet reads back: pass or fail, the failed checks with their
    hints, the GPUs and driver seen; at most VERDICT_MAX_BYTES of compact JSON (figures and
    hints are cut, then failed checks dropped and counted in "more_failed")."""
    host = report.get("host") or {}
    gpus = [
        {"name": str(g.get("name", "?")), "cc": str(g.get("cc") or "")}
        for g in host.get("gpus") or []
        if isinstance(g, Mapping)
    ]
    failed = [
        {
            "name": _cut(c.get("name"), 60),
            "figure": _cut(c.get("figure"), 240),
            "hint": _cut(c.get("hint"), 240),
        }
        for c in report.get("checks", [])
        if isinstance(c, Mapping) and c.get("status") == "fail"
    ]
    out: dict[str, Any] = {
        "schema": VERDICT_SCHEMA,
        "ok": bool(report.get("ok")),
        "node": _cut(node, 253),
        "framework": report.get("framework"),
        "device": report.get("device"),
        "tier": report.get("tier"),
        "driver": host.get("driver"),
        "gpus": gpus[:16],
        "checks": len(report.get("checks", [])),
        "failed": failed,
        "total_s": (report.get("timings") or {}).get("total_s"),
    }
    while len(verdict_text(out).encode()) > VERDICT_MAX_BYTES and out["failed"]:
        out["failed"] = out["failed"][:-1]
        out["more_failed"] = out.get("more_failed", 0) + 1
    return out


def verdict_text(verdict: Mapping[str, Any]) -> str:
    return json.dumps(verdict, sort_keys=True, separators=(",", ":"), default=str)


def format_table(report: Mapping[str, Any]) -> str:
    """The human table: one row per check, then the verdict."""
    rows = [("TIER", "CHECK", "STATUS", "FIGURE")]
    for c in report.get("checks", []):
        rows.append(
            (
                str(c.get("tier", "")),
                str(c.get("name", "")),
                str(c.get("status", "")).upper(),
                str(c.get("figure", "")),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [
        "  ".join(
            [r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2].ljust(widths[2]), r[3]]
        ).rstrip()
        for r in rows
    ]
    for c in report.get("checks", []):
        if c.get("status") in ("fail", "warn") and c.get("hint"):
            lines.append(f"  {c['name']}: {c['hint']}")
    seen = report.get("metrics", {}).get("framework_gpus")
    if seen is None:
        seen = report.get("host", {}).get("gpus", [])
    gpus = ", ".join(str(g.get("name", "?")) for g in seen) or "no GPU"
    verdict = "PASS" if report.get("ok") else "FAIL"
    total = report.get("timings", {}).get("total_s")
    tail = f" in {total:.1f} s" if isinstance(total, (int, float)) else ""
    lines.append(
        f"smoke {verdict}: {report.get('framework', '?')} on {report.get('device', '?')} ({gpus}){tail}"
    )
    return "\n".join(lines)
