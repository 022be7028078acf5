"""Will this lock run on that host? The pure pre-flight and its verdict (`envbuild.preflight.fleet` runs
it over a file of hosts; `envbuild.preflight.reports` writes a Kubernetes Job and JUnit XML).

Nothing here starts a container or reads a file: `envbuild.app.validate` gathers the lock and
the host facts and runs the smoke payload; this module decides, from what the image needs:

- driver floor: the CUDA the lock's wheels were built for needs the minor-version-
  compatibility floor of its major, or the toolkit's own floor when the lock says
  compat = "strict" (`Floors`; the request's targets.driver does not raise it). The NVIDIA
  Container Toolkit does not check this under CDI (https://github.com/NVIDIA/nvidia-container-
  toolkit, internal/modifier/cdi.go has no requirement check), so a too-new image would start
  and fail at CUDA init.
- compute capability: each GPU must be covered by a cubin of the same major and a minor <= the
  device's, or by PTX of a cc <= the device's, which the driver JIT-compiles; JIT of PTX needs
  the toolkit's own driver floor, not the minor-version-compatibility one (CUDA C++
  Programming Guide, "Binary Compatibility" / "PTX Compatibility"; CUDA Compatibility guide,
  "Minor Version Compatibility" limits). cuDNN: each GPU inside the range of the build's
  cuDNN (matrix/cudnn.toml).
- NVIDIA_REQUIRE_CUDA (envbuild/cuda/require.py), with the CUDA version the driver supports
  taken from the facts or derived from the driver (matrix/cuda.toml).
- /dev/shm (a note: containers get their own) and GPU memory against what the smoke test needs.

The verdict (`HostVerdict`): runs; runs relying on minor-version compatibility, with what that
gives up; or does not run, with the one fix that would make it run.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Literal, TypeVar

from packaging.version import Version

from envbuild.core.models import Host, HostGpu, Lock
from envbuild.core.versions import try_version
from envbuild.cuda import require as require_cuda
from envbuild.cuda.archs import ArchRules, cc_tuple
from envbuild.cuda.archs import arch_coverage as arch_coverage
from envbuild.cuda.require import RequireResult as RequireResult
from envbuild.cuda.require import evaluate_require as evaluate_require
from envbuild.cuda.require import require_properties as require_properties
from envbuild.matrix import LibRelease, Matrix
from envbuild.resolver import parse_gpu
from envbuild.smoke.plan import MIN_FREE_MIB

Status = Literal["pass", "fail", "skip"]
S = TypeVar("S", bound=str)


@dataclass(frozen=True)
class Verdict(Generic[S]):
    """One named check with its status, what it saw, and what to do when it is not fine.
    `S` is the status vocabulary: validate's `Check`, doctor's `Finding`."""

    name: str
    status: S
    detail: str
    next_step: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"check": self.name, "status": str(self.status), "detail": self.detail}
        if self.next_step:
            out["next_step"] = self.next_step
        return out


Check = Verdict[Status]
"""One verdict of the pre-flight (or of the smoke run), with what to do when it fails."""


@dataclass(frozen=True)
class Preflight:
    """All pre-flight checks of one lock on one host."""

    lock: str
    host: str
    checks: tuple[Check, ...]
    verdict: HostVerdict | None = None
    """runs / runs_minor_compat / does_not_run, with the one fix or what MVC gives up."""
    require_cuda: str = ""
    """The image's whole NVIDIA_REQUIRE_CUDA (text output shows it briefly)."""

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    def to_json(self) -> dict[str, Any]:
        return {
            "lock": self.lock,
            "host": self.host,
            "ok": self.ok,
            "checks": [c.to_json() for c in self.checks],
            **({"verdict": self.verdict.to_json()} if self.verdict else {}),
            **({"require_cuda": self.require_cuda} if self.require_cuda else {}),
        }


# --- pre-flight ----------------------------------------------------------------------------------


def host_checks(facts: Mapping[str, Any] | None) -> list[Check]:
    """Host states that stop every GPU image, whatever its lock (from doctor facts)."""
    if not facts:
        return []
    driver = facts.get("driver")
    if not isinstance(driver, dict):
        return []
    err = driver.get("nvml_error")
    if err in ("LibraryNotFound", "DriverNotLoaded", "PynvmlMissing"):
        # No driver (or no NVML bindings to ask it): say so plainly, not "NVML cannot start".
        return [
            Check(
                "gpus",
                "fail",
                "cannot look for NVIDIA GPUs: the Python package nvidia-ml-py is not installed"
                if err == "PynvmlMissing"
                else f"{NO_GPU} (no NVIDIA driver: NVML says {err})",
                "run it on a host with an NVIDIA GPU; if this machine has one, install its "
                "driver and check that `nvidia-smi` lists it",
            )
        ]
    if err == "LibRmVersionMismatch":
        return [
            Check(
                "nvml",
                "fail",
                "Driver/library version mismatch: NVML library "
                f"{driver.get('library_version') or '?'} vs kernel module "
                f"{driver.get('kernel_module_version') or '?'}",
                "reboot the host, or reload the nvidia kernel modules; the image is fine, "
                "do not rebuild it",
            )
        ]
    if err:
        return [
            Check(
                "nvml",
                "fail",
                f"NVML cannot start: {err}",
                "run `nvidia-smi` on the host and fix what it reports, then `envbuild doctor`",
            )
        ]
    return [
        Check(
            f"gpu{g.get('index', '?')}",
            "fail",
            f"NVML cannot read GPU {g.get('index', '?')}: {g['error']}",
            "run `envbuild doctor` on the host; a lost GPU (Xid 79) needs a reboot",
        )
        for g in facts.get("gpus") or []
        if isinstance(g, Mapping) and g.get("error")
    ]


# What the host offers, as the checks see it: its driver's CUDA version comes from the facts
# (NVML's answer) or, for hand-written facts, from the matrix's toolkit driver floors.


def driver_cuda(driver: str | None, matrix: Matrix | None) -> str | None:
    """The CUDA version (major.minor) a driver supports: the newest CUDA release whose toolkit
    driver floor it reaches (matrix/cuda.toml; NVML reports the same for a Linux driver)."""
    if driver is None or matrix is None:
        return None
    # Remembered: `validate --hosts` asks for every host, and parsing was most of its time.
    return _driver_cuda(driver, tuple((row.toolkit_driver, row.version) for row in matrix.cuda))


@functools.lru_cache(maxsize=256)
def _driver_cuda(driver: str, floors: tuple[tuple[str, str], ...]) -> str | None:
    have = try_version(driver)
    if have is None:
        return None
    best: tuple[int, ...] | None = None
    for floor_text, release_text in floors:
        floor, release = try_version(floor_text), try_version(release_text)
        if floor is None or release is None or floor > have:
            continue
        mm = (*release.release, 0)[:2]
        best = mm if best is None else max(best, mm)
    return f"{best[0]}.{best[1]}" if best else None


def gpu_cc_of(matrix: Matrix) -> Callable[[str], str]:
    """name -> compute capability through the matrix's GPU names (what `host_from_facts`
    needs for facts without `cc`); an unknown or ambiguous name is a UserError."""
    # Remembered per name: a fleet names a few GPU models many times.
    return functools.lru_cache(maxsize=None)(lambda name: parse_gpu(matrix, name).cc)


def _floor(lock: Lock) -> tuple[str, bool]:
    """The driver a host needs for the lock's CUDA, and whether it is the minor-version-
    compatibility floor (always, unless the lock says compat = "strict" or has none)."""
    floors = lock.stack.floors
    assert floors is not None
    mvc = try_version(floors.minor_compat)
    if lock.compat == "strict" or mvc is None or mvc >= Version(floors.toolkit):
        return floors.toolkit, False
    return str(floors.minor_compat), True


def _driver_check(lock: Lock, host: Host, cuda: str | None) -> Check:
    floors = lock.stack.floors
    assert floors is not None
    floor, mvc = _floor(lock)
    have = try_version(host.driver)
    if have is None:
        return Check(
            "driver-floor",
            "fail",
            f"the host's driver version is not recorded; CUDA {lock.stack.cuda} needs >= {floor}",
            RECORD_FACTS,
        )
    if have >= Version(floors.toolkit):
        return Check(
            "driver-floor",
            "pass",
            f"driver {host.driver} >= {floors.toolkit}, the CUDA {lock.stack.cuda} toolkit's own "
            "floor (full feature set)",
        )
    supports = f" (it supports CUDA {cuda})" if cuda else ""
    if have >= Version(floor):
        return Check(
            "driver-floor",
            "pass",
            f"driver {host.driver} >= {floor}, the minor-version-compatibility floor of CUDA "
            f"{_cuda_major(lock)}.x; below {floors.toolkit}, CUDA {lock.stack.cuda}'s own "
            f"floor{supports}",
        )
    which = "minor-version-compatibility" if mvc else "toolkit"
    strict = ' (the lock says compat = "strict")' if lock.compat == "strict" else ""
    return Check(
        "driver-floor",
        "fail",
        f"driver {host.driver} < {floor}, the {which} floor of CUDA {lock.stack.cuda}"
        f"{strict}{supports}",
        f"upgrade the host driver to >= {floor}",
    )


def _cuda_major(lock: Lock) -> str:
    return (lock.stack.cuda or "?").split(".")[0]


def _arch_checks(lock: Lock, host: Host, rules: ArchRules | None = None) -> list[Check]:
    floors = lock.stack.floors
    out: list[Check] = []
    for gpu in host.gpus:
        name = f"gpu{gpu.index}-arch"
        how, arch = arch_coverage(lock.stack.archs, gpu.cc, rules)
        label = f"GPU {gpu.index} {gpu.name} (cc {gpu.cc})"
        if how == "cubin":
            out.append(Check(name, "pass", f"{label}: cubin {arch}"))
            continue
        if how == "ptx":
            have = try_version(host.driver)
            if floors is not None and have is not None and have < Version(floors.toolkit):
                out.append(
                    Check(
                        name,
                        "fail",
                        f"{label}: no cubin; its PTX {arch} needs JIT, which needs driver >= "
                        f"{floors.toolkit} (host {host.driver})",
                        f"upgrade the driver to >= {floors.toolkit}, or lock a build with "
                        f"sm_{gpu.cc.replace('.', '')} cubins (add this GPU to targets.gpus)",
                    )
                )
            else:
                out.append(
                    Check(name, "pass", f"{label}: PTX {arch}, JIT-compiled at first launch")
                )
            continue
        archs = ", ".join(lock.stack.archs) or "none"
        out.append(
            Check(
                name,
                "fail",
                f"{label}: the build carries no code for it (archs: {archs})",
                f'add "{gpu.name}" to targets.gpus in the image\'s envbuild.toml and run '
                f"`envbuild lock images/{lock.name}`",
            )
        )
    return out


def _cudnn_row(lock: Lock, matrix: Matrix | None) -> LibRelease | None:
    row = matrix.lib("cudnn", lock.stack.cudnn) if matrix and lock.stack.cudnn else None
    return row if row is not None and (row.min_cc or row.max_cc) else None


def _below_cudnn(row: LibRelease | None, gpu: HostGpu) -> bool:
    return bool(row and row.min_cc and cc_tuple(gpu.cc) < cc_tuple(row.min_cc))


def _cudnn_check(lock: Lock, host: Host, matrix: Matrix | None) -> tuple[list[Check], list[str]]:
    """The build's cuDNN against each GPU: below its support range cuDNN refuses the device;
    above the newest capability its support matrix lists is untested, not excluded."""
    row = _cudnn_row(lock, matrix)
    if row is None:
        return [], []
    version = lock.stack.cudnn
    notes = [
        f"cuDNN {version}'s support matrix lists compute capability up to {row.max_cc}; GPU "
        f"{g.index} {g.name} is {g.cc} (not listed, not excluded)"
        for g in host.gpus
        if row.max_cc and cc_tuple(g.cc) > cc_tuple(row.max_cc)
    ]
    low = [g for g in host.gpus if _below_cudnn(row, g)]
    if low:
        g = low[0]
        return [
            Check(
                "cudnn",
                "fail",
                f"cuDNN {version} supports compute capability >= {row.min_cc}; GPU {g.index} "
                f"{g.name} is {g.cc}",
                f'add "{g.name}" to targets.gpus in the image\'s envbuild.toml and run '
                f"`envbuild lock images/{lock.name}`",
            )
        ], notes
    span = f"{row.min_cc or 'any'} to {row.max_cc or 'newest'}"
    return [Check("cudnn", "pass", f"cuDNN {version} supports compute capability {span}")], notes


def _require_check(lock: Lock, host: Host, cuda: str | None) -> tuple[Check, list[str]]:
    """NVIDIA_REQUIRE_CUDA on every GPU. Facts without a brand: the expression is tried with
    every brand its clauses name, and a GeForce board (named by none) is said to be refused."""
    expr = lock.stack.base_image.require_cuda.strip()
    if not expr:
        return Check("require-cuda", "skip", "the image sets no NVIDIA_REQUIRE_CUDA"), []
    short = require_cuda.short_form(expr)
    notes: list[str] = []
    for gpu in host.gpus or (None,):
        res = evaluate_require(expr, require_properties(host, gpu, cuda=cuda))
        if res.ok:
            continue
        if gpu is not None and not gpu.brand:
            brands = sorted(
                (
                    b
                    for b in require_cuda.brands_of(expr)
                    if evaluate_require(expr, require_properties(host, gpu, cuda=cuda, brand=b)).ok
                ),
                key=lambda b: b == "unknown",  # NVML's "unknown" brand last: it reads oddly
            )
            if brands:
                more = f" and {len(brands) - 3} more" if len(brands) > 3 else ""
                notes.append(
                    f"NVIDIA_REQUIRE_CUDA holds on GPU {gpu.index} only through its forward-"
                    f"compat clauses for brand {', '.join(brands[:3])}{more}; the facts record "
                    f"no brand, and a {require_cuda.CONSUMER_BRAND} board would be refused by "
                    "the runtime's legacy hook (`envbuild doctor --json` records the brand)"
                )
                continue
        which = f"GPU {gpu.index} of " if gpu else ""
        why = require_cuda.short_unsatisfied(
            res.unsatisfied, host.driver, gpu.brand if gpu else None
        )
        return Check(
            "require-cuda",
            "fail",
            f"NVIDIA_REQUIRE_CUDA={short} is false on {which}this host: {why}",
            _require_next_step(lock, host, cuda, expr),
        ), notes
    derived = (
        f" (CUDA {cuda} derived from driver {host.driver})" if cuda and not host.cuda_driver else ""
    )
    return Check("require-cuda", "pass", f"NVIDIA_REQUIRE_CUDA={short} holds{derived}"), notes


def _require_next_step(lock: Lock, host: Host, cuda: str | None, expr: str) -> str:
    if cuda is None:
        return RECORD_FACTS
    step = f"upgrade the driver so it supports CUDA {require_cuda.cuda_floor_of(expr) or lock.stack.cuda}"
    if host.driver and lock.targets.driver != host.driver:
        step += f', or re-lock with targets.driver = "{host.driver}"'
    return step


def _shm_check(lock: Lock, facts: Mapping[str, Any] | None) -> tuple[list[Check], list[str]]:
    """The host's /dev/shm. Containers get their own (docker --shm-size, the Job's memory
    emptyDir), so a small one only matters with --ipc=host: a note, not a failure."""
    shm = facts.get("shm") if facts else None
    size = shm.get("size_mib") if isinstance(shm, Mapping) else None
    need = lock.smoke.min_shm_mib
    if not isinstance(size, int):
        return [], []
    if size >= need:
        return [Check("shm", "pass", f"host /dev/shm is {size} MiB (>= {need} MiB)")], []
    return [
        Check(
            "shm",
            "pass",
            f"host /dev/shm is {size} MiB (< {need} MiB): containers need their own",
        )
    ], [
        f"give containers their own /dev/shm of >= {need} MiB (docker run --shm-size={need}m; "
        f"the Kubernetes Job mounts a memory emptyDir), not --ipc=host: the host's is {size} MiB"
    ]


def _memory_checks(lock: Lock, host: Host, facts: Mapping[str, Any] | None) -> list[Check]:
    """GPU memory against what the smoke test asks for before it starts (MIN_FREE_MIB): the
    total size, and the free memory when the facts recorded it."""
    tier = lock.smoke.tier
    need = MIN_FREE_MIB.get(tier, max(MIN_FREE_MIB.values()))
    free = _free_mib(facts)
    out: list[Check] = []
    for g in host.gpus:
        name, label = f"gpu{g.index}-memory", f"GPU {g.index} {g.name}"
        if g.memory_mib and g.memory_mib < need:
            smaller = tier > 1 and g.memory_mib >= MIN_FREE_MIB[1]
            out.append(
                Check(
                    name,
                    "fail",
                    f"{label} has {g.memory_mib} MiB; the smoke test (tier {tier}) needs {need} "
                    "MiB free",
                    f"set tier = 1 under [smoke] in images/{lock.name}/envbuild.toml (it needs "
                    f"{MIN_FREE_MIB[1]} MiB)"
                    if smaller
                    else f"run it on a GPU with >= {need} MiB",
                )
            )
        elif g.index in free and free[g.index] < need:
            out.append(
                Check(
                    name,
                    "fail",
                    f"{label} had {free[g.index]} MiB free when recorded; the smoke test (tier "
                    f"{tier}) needs {need} MiB",
                    f"free GPU {g.index}: stop the processes `nvidia-smi` lists on it",
                )
            )
    known = [g for g in host.gpus if g.memory_mib]
    if not out and known:
        what = "free" if all(g.index in free for g in known) else "(free memory not recorded)"
        out.append(Check("memory", "pass", f"every GPU has >= {need} MiB {what}"))
    return out


def _free_mib(facts: Mapping[str, Any] | None) -> dict[int, int]:
    gpus = facts.get("gpus") if facts else None
    return {
        int(g.get("index", i)): int(g["memory_free_mib"])
        for i, g in enumerate(gpus if isinstance(gpus, list) else [])
        if isinstance(g, Mapping) and isinstance(g.get("memory_free_mib"), int)
    }


# --- the verdict ---------------------------------------------------------------------------------

RECORD_FACTS = (
    "record the host's facts with `envbuild doctor --json` on it (they carry the driver and "
    "the CUDA version it supports)"
)

Outcome = Literal["runs", "runs_minor_compat", "does_not_run"]


@dataclass(frozen=True)
class HostVerdict:
    """What the pre-flight concludes about one lock on one host."""

    outcome: Outcome
    reason: str
    """One line: what decided it."""
    fix: str = ""
    """does_not_run: the one change that makes it run."""
    gives_up: str = ""
    """runs_minor_compat: what minor-version compatibility costs on this host."""
    notes: tuple[str, ...] = ()
    """Worth knowing, deciding nothing (a brand the facts lack, a small host /dev/shm)."""

    @property
    def runs(self) -> bool:
        return self.outcome != "does_not_run"

    @property
    def label(self) -> str:
        return {
            "runs": "runs",
            "runs_minor_compat": "runs relying on minor-version compatibility",
            "does_not_run": "does not run",
        }[self.outcome]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"outcome": self.outcome, "reason": self.reason}
        if self.fix:
            out["fix"] = self.fix
        if self.gives_up:
            out["gives_up"] = self.gives_up
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def _gives_up(lock: Lock, host: Host, cuda: str | None) -> str:
    """What running CUDA X.Y on an older driver costs (CUDA Compatibility guide, "Minor Version
    Compatibility": https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html)."""
    floors = lock.stack.floors
    assert floors is not None
    own = f"CUDA {cuda}" if cuda else "its own CUDA version"
    return (
        f"the driver cannot JIT-compile PTX newer than {own} (GPUs covered only by PTX, "
        "kernels NVRTC generates at run time), and CUDA APIs that need a newer driver fail with "
        f"cudaErrorCallRequiresNewerDriver; driver >= {floors.toolkit} gives the full feature set"
    )


def _relock_gpus(
    lock: Lock, host: Host, matrix: Matrix | None, rules: ArchRules | None
) -> list[HostGpu]:
    """GPUs only a re-lock can serve: no code in the build, or below its cuDNN's range."""
    row = _cudnn_row(lock, matrix)
    return [
        g
        for g in host.gpus
        if arch_coverage(lock.stack.archs, g.cc, rules)[0] == "none" or _below_cudnn(row, g)
    ]


def _ptx_blocked(lock: Lock, host: Host, rules: ArchRules | None) -> bool:
    """Is a GPU covered only by PTX that this driver is too old to JIT-compile?"""
    floors = lock.stack.floors
    have = try_version(host.driver)
    if floors is None or have is None or have >= Version(floors.toolkit):
        return False
    return any(arch_coverage(lock.stack.archs, g.cc, rules)[0] == "ptx" for g in host.gpus)


def _driver_ok(lock: Lock, host: Host, matrix: Matrix | None, rules: ArchRules | None) -> bool:
    """Do the driver-dependent checks pass (floor, PTX JIT, NVIDIA_REQUIRE_CUDA)?"""
    cuda = host.cuda_driver or driver_cuda(host.driver, matrix)
    floor = _driver_check(lock, host, cuda)
    require = _require_check(lock, host, cuda)[0]
    return "fail" not in (floor.status, require.status) and not _ptx_blocked(lock, host, rules)


def _driver_needed(lock: Lock, host: Host, matrix: Matrix | None, rules: ArchRules | None) -> str:
    """The driver to upgrade to: the lock's floor when that passes every driver-dependent
    check (floor, PTX JIT, NVIDIA_REQUIRE_CUDA), else the toolkit's own floor."""
    floors = lock.stack.floors
    assert floors is not None
    floor, _ = _floor(lock)
    if "." not in floor and matrix is not None:
        # A branch ("580": CUDA 13's minor-version floor): its first release in the matrix.
        branch = [r.toolkit_driver for r in matrix.cuda if r.toolkit_driver.split(".")[0] == floor]
        floor = min(branch, key=Version) if branch else floor
    have = try_version(host.driver)
    if have is None or Version(floor) > have:
        trial = replace(host, driver=floor, cuda_driver=driver_cuda(floor, matrix))
        if _driver_ok(lock, trial, matrix, rules):
            return floor
    return floors.toolkit


def _one_fix(
    lock: Lock,
    host: Host,
    failed: Sequence[Check],
    cuda: str | None,
    matrix: Matrix | None,
    rules: ArchRules | None,
) -> str:
    """The single change that makes the lock run here, never one that is already true."""
    names = {c.name for c in failed}
    for c in failed:
        if c.name in ("nvml", "gpus") or re.fullmatch(r"gpu\d+", c.name):
            return c.next_step
    if try_version(host.driver) is None or ("require-cuda" in names and cuda is None):
        return RECORD_FACTS
    where = f"images/{lock.name}"
    floor, mvc = _floor(lock)
    have = Version(str(host.driver))
    ptx = _ptx_blocked(lock, host, rules)
    driver_fails = bool(names & {"driver-floor", "require-cuda"}) or ptx
    missing = _relock_gpus(lock, host, matrix, rules)
    relock_driver = mvc and have >= Version(floor) and lock.targets.driver != host.driver
    if missing:
        parts = []
        add = sorted(
            {
                g.name
                for g in missing
                if f"sm_{g.cc.replace('.', '')}" not in lock.stack.target_archs
            }
        )
        if add:
            parts.append("add " + ", ".join(f'"{n}"' for n in add) + " to targets.gpus")
        if driver_fails and relock_driver:
            parts.append(f'set targets.driver = "{host.driver}"')
        if parts:
            return f"{' and '.join(parts)} in {where}/envbuild.toml, then `envbuild lock {where}`"
        return f"re-lock with `envbuild lock --upgrade {where}`: its targets name these GPUs"
    if driver_fails:
        if "driver-floor" not in names and not ptx and relock_driver:
            return (
                f're-lock for this host: set targets.driver = "{host.driver}" in '
                f"{where}/envbuild.toml, then `envbuild lock {where}` (its NVIDIA_REQUIRE_CUDA then "
                "asks only for what this driver runs under minor-version compatibility)"
            )
        need = _driver_needed(lock, host, matrix, rules)
        supports = driver_cuda(need, matrix)
        return f"upgrade the host driver to >= {need}" + (f" (CUDA {supports})" if supports else "")
    return failed[0].next_step


NO_GPU = "the machine has no NVIDIA GPU"


def _verdict(
    lock: Lock,
    host: Host,
    checks: Sequence[Check],
    notes: Sequence[str],
    cuda: str | None,
    matrix: Matrix | None,
    rules: ArchRules | None,
) -> HostVerdict:
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        fix = _one_fix(lock, host, failed, cuda, matrix, rules)
        return HostVerdict("does_not_run", failed[0].detail, fix=fix, notes=tuple(notes))
    floors = lock.stack.floors
    assert floors is not None
    have = try_version(host.driver)
    if have is not None and have < Version(floors.toolkit):
        floor, _ = _floor(lock)
        return HostVerdict(
            "runs_minor_compat",
            f"driver {host.driver} is below {floors.toolkit}, CUDA {lock.stack.cuda}'s own floor, "
            f"and reaches {floor}, the minor-version-compatibility floor of CUDA "
            f"{_cuda_major(lock)}.x",
            gives_up=_gives_up(lock, host, cuda),
            notes=tuple(notes),
        )
    return HostVerdict(
        "runs",
        f"driver {host.driver} reaches CUDA {lock.stack.cuda}'s own floor {floors.toolkit} and "
        "the build has code for every GPU",
        notes=tuple(notes),
    )


def preflight(
    lock: Lock,
    host: Host,
    *,
    facts: Mapping[str, Any] | None = None,
    lock_label: str | None = None,
    rules: ArchRules | None = None,
    matrix: Matrix | None = None,
) -> Preflight:
    """Everything that can be decided before starting a container: does `lock` run on `host`?

    `matrix` (the loaded matrix) derives the CUDA version a driver supports when the facts do
    not carry it, the cuDNN range and the arch rules; `rules` alone: the matrix's Tegra
    capabilities and arch renames (`ArchRules.from_archs(matrix.archs)`); neither = desktop
    rules, no derivation."""
    label = lock_label or lock.name
    host_name = host.name or "this host"
    expr = lock.stack.base_image.require_cuda
    if lock.stack.floors is None or lock.stack.cuda is None:
        cpu = Check("cpu-image", "pass", "a CPU image: needs no driver or GPU")
        return Preflight(label, host_name, (cpu,), HostVerdict("runs", cpu.detail))
    if rules is None and matrix is not None:
        rules = ArchRules.from_archs(matrix.archs)
    stop = host_checks(facts)
    if not stop and not host.gpus:
        stop = [
            Check(
                "gpus",
                "fail",
                f"{NO_GPU} (NVML lists none)",
                "run it on a host with an NVIDIA GPU (`envbuild doctor` there lists them)",
            )
        ]
    if stop:
        # NVML is down or there is no GPU: nothing GPU-related can start, and every other
        # answer would be noise.
        verdict = HostVerdict("does_not_run", stop[0].detail, fix=stop[0].next_step)
        return Preflight(label, host_name, (*stop, *_shm_check(lock, facts)[0]), verdict, expr)
    cuda = host.cuda_driver or driver_cuda(host.driver, matrix)
    require, require_notes = _require_check(lock, host, cuda)
    cudnn, cudnn_notes = _cudnn_check(lock, host, matrix)
    shm, shm_notes = _shm_check(lock, facts)
    checks = [
        _driver_check(lock, host, cuda),
        *_arch_checks(lock, host, rules),
        *cudnn,
        require,
        *shm,
        *_memory_checks(lock, host, facts),
    ]
    notes = require_notes + cudnn_notes + shm_notes
    verdict = _verdict(lock, host, checks, notes, cuda, matrix, rules)
    return Preflight(label, host_name, tuple(checks), verdict, expr)


# --- results -------------------------------------------------------------------------------------


def smoke_checks(
    report: Mapping[str, Any],
    ok: bool,
    failed: Sequence[Mapping[str, str]] = (),
    summary: str = "",
) -> tuple[Check, ...]:
    """The smoke report's checks as validate checks ("smoke:<name>"), then one overall verdict.

    Reads the payload's report loosely (each check: name, status, figure or detail), and takes
    the fix hints from the evaluated failures, which are the authority on pass/fail.
    """
    hints = {f.get("name", ""): f.get("hint", "") for f in failed}
    out: list[Check] = []
    for raw in report.get("checks") or []:
        if not isinstance(raw, Mapping):
            continue
        name = str(raw.get("name") or "?")
        status = str(raw.get("status") or "")
        mapped: Status = "fail" if name in hints else ("skip" if status == "skip" else "pass")
        if status == "fail":
            mapped = "fail"
        detail = str(raw.get("figure") or raw.get("detail") or status)
        out.append(Check(f"smoke:{name}", mapped, detail, hints.get(name, "")))
    seen = {c.name for c in out}
    for f in failed:
        name = f"smoke:{f.get('name', '?')}"
        if name not in seen:
            out.append(Check(name, "fail", f.get("figure", "") or "failed", f.get("hint", "")))
    verdict = summary or ("the smoke test passed" if ok else "the smoke test failed")
    out.append(Check("smoke", "pass" if ok else "fail", verdict))
    return tuple(out)


@dataclass(frozen=True)
class ValidateResult:
    """One `envbuild validate IMAGE_OR_DIR` verdict."""

    target: str
    kind: Literal["image", "dir"]
    host: str
    preflight: Preflight
    smoke: tuple[Check, ...] = ()
    environment: tuple[Check, ...] = ()
    """What this host offers to run containers (engine, GPU runtime/CDI), as doctor sees it:
    reported, never failing the verdict (the smoke run has its own engine checks)."""
    smoke_report: Mapping[str, Any] | None = None
    """The payload's report when the smoke test ran and printed one (for --report and the
    memory fit); None otherwise."""

    @property
    def checks(self) -> tuple[Check, ...]:
        return self.preflight.checks + self.environment + self.smoke

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 pass; 1 the pre-flight says no; 6 the smoke test ran and said no (SmokeFailed)."""
        if not self.preflight.ok:
            return 1
        return 0 if self.ok else 6

    @property
    def verdict(self) -> HostVerdict:
        """The pre-flight's verdict, unless the smoke test then failed: that decides."""
        pre = self.preflight.verdict or HostVerdict(
            "runs" if self.preflight.ok else "does_not_run", ""
        )
        failed = [c for c in self.smoke if c.status == "fail"]
        if not pre.runs or not failed:
            return pre
        step = next((c.next_step for c in failed if c.next_step), "")
        return HostVerdict("does_not_run", failed[0].detail, fix=step, notes=pre.notes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": self.ok,
            "target": self.target,
            "kind": self.kind,
            "host": self.host,
            "verdict": self.verdict.to_json(),
            "checks": [c.to_json() for c in self.checks],
        }
        if self.preflight.require_cuda:
            out["require_cuda"] = self.preflight.require_cuda
        return out
