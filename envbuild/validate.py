"""Will this lock run on that host? Pure pre-flight, fleet view, Job manifest, JUnit XML.

Nothing here starts a container or reads a file: `api.validate*` gathers the lock and the host
facts and runs the smoke payload; this module decides. The checks, and why each exists:

- driver floor: the lock records two driver minimums (`Floors`); the host's driver must reach
  the one the lock relies on. The NVIDIA Container Toolkit does not check this under CDI
  (internal/modifier/cdi.go has no requirement check; see ../shared/reference/
  reliability-performance.md A4), so a too-new image would start and fail at CUDA init.
- compute capability: each GPU must be covered by a cubin of the same major and a minor <= the
  device's, or by PTX of a cc <= the device's, which the driver JIT-compiles; JIT of PTX needs
  the toolkit's own driver floor, not the minor-version-compatibility one (CUDA C++
  Programming Guide, "Binary Compatibility" / "PTX Compatibility"; CUDA Compatibility guide,
  "Minor Version Compatibility" limits).
- NVIDIA_REQUIRE_CUDA: the expression libnvidia-container would evaluate in its legacy hook,
  evaluated here against the host: space-separated constraints are ORed, comma-separated
  ones ANDed; properties cuda (the CUDA version the driver supports), driver, arch (compute
  capability), brand; unknown properties are skipped (nvidia-container-toolkit
  internal/requirements/constraints/factory.go, binary.go, property.go).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from packaging.version import Version

from envbuild.archs import ArchRules, coverage, parse_arch
from envbuild.models import Host, HostGpu, Lock
from envbuild.versions import try_version

Status = Literal["pass", "fail", "skip"]
S = TypeVar("S", bound=str)

SMOKE_COMMAND = ("python", "/opt/envbuild/payload", "--plan", "/opt/envbuild/plan.json")
"""How the smoke payload runs inside every envbuild image (venv /opt/venv is on PATH)."""


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
        }


# --- versions ------------------------------------------------------------------------------------


# --- NVIDIA_REQUIRE_CUDA -------------------------------------------------------------------------

_OPERATORS = ("!=", "<=", ">=", "=", "<", ">")
"""Longest first, as the toolkit's parser tries them (factory.go)."""
_VERSION_PROPERTIES = ("cuda", "driver", "arch")
_STRING_PROPERTIES = ("brand",)


@dataclass(frozen=True)
class RequireResult:
    ok: bool
    expression: str
    unsatisfied: tuple[str, ...] = ()
    """For a failed expression: every OR term, each with the factor that failed and why."""


def _compare(prop: str, have: str | None, op: str, want: str) -> tuple[bool, str]:
    """One factor `prop op want` against the host's value; (satisfied, why not)."""
    if prop in _STRING_PROPERTIES:
        value = have or ""
        cmp = (value > want) - (value < want)
    else:
        want_v = try_version(want)
        if want_v is None:
            return False, f"{prop}{op}{want}: {want!r} is not a version"
        have_v = try_version(have)
        if have_v is None:
            # The toolkit compares with semver, where an unknown (invalid) version is lower
            # than every valid one; "unknown" therefore fails >=, > and = like it would there.
            return op in ("<", "<=", "!="), f"{prop}{op}{want}: host {prop} unknown"
        cmp = (have_v > want_v) - (have_v < want_v)
    ok = {
        "=": cmp == 0,
        "!=": cmp != 0,
        "<": cmp < 0,
        "<=": cmp <= 0,
        ">": cmp > 0,
        ">=": cmp >= 0,
    }[op]
    return ok, f"{prop}{op}{want}: host has {prop}={have or 'unknown'}"


def evaluate_require(expression: str, properties: Mapping[str, str | None]) -> RequireResult:
    """Evaluate one NVIDIA_REQUIRE_* value against host properties (cuda, driver, arch, brand).

    "cuda>=12.8 brand=tesla,driver>=470,driver<471" is true when the driver supports CUDA
    12.8, or when it is a Tesla-brand GPU on a 470 driver (the forward-compatibility clause).
    """
    terms = [t for t in expression.split(" ") if t.strip()]
    if not terms:
        return RequireResult(ok=True, expression=expression)
    failures: list[str] = []
    evaluated = 0
    for term in terms:
        term_ok = True
        why = ""
        counted = False
        for factor in (f for f in term.split(",") if f.strip()):
            m = re.match(r"([^<>=!]*)(.*)$", factor)
            assert m is not None  # the pattern matches every string
            prop, rest = m.group(1), m.group(2)
            if prop not in _VERSION_PROPERTIES and prop not in _STRING_PROPERTIES:
                continue  # the toolkit skips constraints on properties it does not know
            op = next((o for o in _OPERATORS if rest.startswith(o)), "")
            if not op:
                term_ok, why = False, f"{factor}: no comparison operator"
                counted = True
                break
            counted = True
            ok, reason = _compare(prop, properties.get(prop), op, rest[len(op) :])
            if not ok:
                term_ok, why = False, reason
                break
        if not counted:
            continue
        evaluated += 1
        if term_ok:
            return RequireResult(ok=True, expression=expression)
        failures.append(f"{term} (fails on {why})")
    if evaluated == 0:
        return RequireResult(ok=True, expression=expression)
    return RequireResult(ok=False, expression=expression, unsatisfied=tuple(failures))


def require_properties(host: Host, gpu: HostGpu | None) -> dict[str, str | None]:
    """The properties the toolkit compares NVIDIA_REQUIRE_* with, for one GPU of a host."""
    return {
        "cuda": host.cuda_driver,
        "driver": host.driver,
        "arch": gpu.cc if gpu else None,
        "brand": (gpu.brand or None) if gpu else None,
    }


# --- compute capability --------------------------------------------------------------------------


def arch_coverage(
    archs: Sequence[str], cc: str, rules: ArchRules | None = None
) -> tuple[Literal["cubin", "ptx", "none"], str]:
    """How a build's archs cover a device: a cubin, else PTX to JIT, else nothing.

    The rule is envbuild.archs.coverage, the same one the resolver uses (cubin: same major,
    lower or equal minor; sm_XYa: exactly X.Y; PTX: any device >= X.Y; Tegra and renamed
    archs through `rules`). Names that are not architectures (a hand-edited lock) are ignored.
    """
    valid = [a for a in archs if _is_arch(a)]
    how, arch = coverage(valid, cc, rules or ArchRules())
    return (how or "none", arch or "")


def _is_arch(text: str) -> bool:
    try:
        parse_arch(text)
    except ValueError:
        return False
    return True


# --- pre-flight ----------------------------------------------------------------------------------


def host_checks(facts: Mapping[str, Any] | None) -> list[Check]:
    """Host states that stop every GPU image, whatever its lock (from doctor facts)."""
    if not facts:
        return []
    driver = facts.get("driver")
    if not isinstance(driver, dict):
        return []
    err = driver.get("nvml_error")
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


def _driver_check(lock: Lock, host: Host) -> Check:
    floors = lock.stack.floors
    assert floors is not None
    have = try_version(host.driver)
    if have is None:
        return Check(
            "driver-floor",
            "fail",
            f"host driver unknown; the lock needs >= {floors.effective}",
            "run `envbuild doctor` on the host to see why NVML gives no driver version",
        )
    toolkit = Version(floors.toolkit)
    effective = Version(floors.effective)
    if have >= toolkit:
        return Check(
            "driver-floor",
            "pass",
            f"driver {host.driver} >= {floors.toolkit}, the CUDA {lock.stack.cuda} toolkit's own "
            "floor (full feature set)",
        )
    if have >= effective:
        return Check(
            "driver-floor",
            "pass",
            f"driver {host.driver} >= {floors.effective}, the minor-version-compatibility floor "
            f"the lock relies on (limited features below {floors.toolkit}: no JIT of newer PTX)",
        )
    relied = "minor-version-compatibility" if floors.relied_on == "minor_compat" else "toolkit"
    return Check(
        "driver-floor",
        "fail",
        f"driver {host.driver} < {floors.effective}, the {relied} floor of CUDA "
        f"{lock.stack.cuda} that the lock relies on",
        f"upgrade the host driver to >= {floors.effective}, or re-lock for this host: set "
        f'targets.driver = "{host.driver}" in the image\'s envbuild.toml and run '
        f"`envbuild lock images/{lock.name}`",
    )


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


def _short_require(expr: str) -> str:
    """The expression as people read it: nvidia/cuda bases carry dozens of forward-compat
    `brand=` clauses; name the first constraint and count the rest."""
    parts = expr.split()
    brands = [p for p in parts if p.startswith("brand=")]
    if len(brands) <= 2:
        return repr(expr)
    rest = " ".join(p for p in parts if not p.startswith("brand="))
    return f"'{rest}' (+{len(brands)} brand= forward-compat clauses)"


def _short_unsatisfied(failures: Sequence[str], host: Host, gpu: HostGpu | None) -> str:
    """Why the expression is false, readable: the `cuda>=` term in full, the dozens of `brand=`
    forward-compat clauses of nvidia/cuda bases as one count (each failing line was as long as
    a screen and said the same thing)."""
    brands = [f for f in failures if f.startswith("brand=")]
    shown = [f for f in failures if not f.startswith("brand=")]
    if len(brands) <= 2:
        return "; ".join(failures)
    brand = (gpu.brand if gpu else None) or "unknown"
    shown.append(
        f"none of the {len(brands)} brand= forward-compat clauses matches "
        f"(brand={brand}, driver={host.driver or 'unknown'})"
    )
    return "; ".join(shown)


def _require_check(lock: Lock, host: Host) -> Check:
    expr = lock.stack.base_image.require_cuda.strip()
    if not expr:
        return Check("require-cuda", "skip", "the image sets no NVIDIA_REQUIRE_CUDA")
    gpus: Sequence[HostGpu | None] = host.gpus or (None,)
    for gpu in gpus:
        res = evaluate_require(expr, require_properties(host, gpu))
        if not res.ok:
            which = f"GPU {gpu.index} of " if gpu else ""
            return Check(
                "require-cuda",
                "fail",
                f"NVIDIA_REQUIRE_CUDA={_short_require(expr)} is false on {which}this host: "
                + _short_unsatisfied(res.unsatisfied, host, gpu),
                f"upgrade the driver so it supports CUDA {_cuda_of_expr(expr) or lock.stack.cuda}, "
                f'or re-lock with targets.driver = "{host.driver}"',
            )
    return Check("require-cuda", "pass", f"NVIDIA_REQUIRE_CUDA={_short_require(expr)} holds")


def _cuda_of_expr(expr: str) -> str | None:
    m = re.search(r"cuda>=(\d+(?:\.\d+)*)", expr)
    return m.group(1) if m else None


def preflight(
    lock: Lock,
    host: Host,
    *,
    facts: Mapping[str, Any] | None = None,
    lock_label: str | None = None,
    rules: ArchRules | None = None,
) -> Preflight:
    """Everything that can be decided before starting a container: does `lock` run on `host`?

    `rules`: the matrix's Tegra capabilities and arch renames
    (`ArchRules.from_archs(load_matrix().archs)`); None = desktop rules only."""
    label = lock_label or lock.name
    host_name = host.name or "this host"
    if lock.stack.floors is None or lock.stack.cuda is None:
        return Preflight(
            label,
            host_name,
            (Check("cpu-image", "pass", "a CPU image: needs no driver or GPU"),),
        )
    blockers = host_checks(facts)
    if blockers:
        # NVML is down: nothing GPU-related can start, and every other answer would be noise.
        return Preflight(label, host_name, tuple(blockers))
    checks: list[Check] = []
    if not host.gpus:
        checks.append(
            Check(
                "gpus",
                "fail",
                "the host has no NVIDIA GPU that NVML can see",
                "run `envbuild doctor` on the host",
            )
        )
    checks.append(_driver_check(lock, host))
    checks.extend(_arch_checks(lock, host, rules))
    checks.append(_require_check(lock, host))
    return Preflight(label, host_name, tuple(checks))


# --- fleet view ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetView:
    locks: tuple[str, ...]
    hosts: tuple[str, ...]
    results: tuple[Preflight, ...]
    """One per (lock, host), locks outer, hosts inner."""
    gpu_counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def result(self, lock: str, host: str) -> Preflight:
        return next(r for r in self.results if r.lock == lock and r.host == host)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "locks": list(self.locks),
            "hosts": list(self.hosts),
            "results": [
                {
                    "lock": r.lock,
                    "host": r.host,
                    "runs": r.ok,
                    "failed": [c.to_json() for c in r.failed],
                }
                for r in self.results
            ],
        }


def unique_host_names(names: Sequence[str]) -> list[str]:
    """Host names made unique in order: a second "gpu-1" becomes "gpu-1#2"."""
    seen: dict[str, int] = {}
    out: list[str] = []
    for i, n in enumerate(names):
        base = n or f"host{i + 1}"
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return out


def fleet_view(
    locks: Sequence[tuple[str, Lock]],
    hosts: Sequence[tuple[Host, Mapping[str, Any] | None]],
) -> FleetView:
    """Which locks run on which hosts, decided without running anything."""
    names = unique_host_names([h.name for h, _ in hosts])
    results: list[Preflight] = []
    for label, lock in locks:
        for (host, facts), name in zip(hosts, names, strict=True):
            pf = preflight(lock, host, facts=facts, lock_label=label)
            results.append(Preflight(pf.lock, name, pf.checks))
    return FleetView(
        locks=tuple(label for label, _ in locks),
        hosts=tuple(names),
        results=tuple(results),
        gpu_counts={name: len(h.gpus) for (h, _), name in zip(hosts, names, strict=True)},
    )


# --- Kubernetes Job manifest ---------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*$")


def _yaml_scalar(value: Any) -> str:
    # Strings are written JSON-quoted: a JSON string is a valid YAML double-quoted scalar, so
    # "yes", "0755" or ":" can never change type or meaning (YAML 1.2 spec, section 7.3.1).
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(str(value), ensure_ascii=False)


def _yaml_key(key: str) -> str:
    return key if _PLAIN_KEY.match(key) else json.dumps(key)


def _yaml_lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{_yaml_key(str(k))}:")
                lines.extend(_yaml_lines(v, indent + 2))
            else:
                inline = "{}" if isinstance(v, dict) else "[]" if isinstance(v, list) else None
                lines.append(f"{pad}{_yaml_key(str(k))}: {inline or _yaml_scalar(v)}")
        return lines
    if isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)) and item:
                sub = _yaml_lines(item, indent + 2)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines.extend(sub[1:])
            else:
                lines.append(f"{pad}- {_yaml_scalar(item)}")
        return lines
    return [pad + _yaml_scalar(value)]


def to_yaml(value: Any) -> str:
    """A tiny YAML emitter for manifests (mappings, sequences, JSON-quoted scalars)."""
    return "\n".join(_yaml_lines(value, 0)) + "\n"


def k8s_name(text: str, *, prefix: str = "envbuild-validate-") -> str:
    """A DNS-1123 label (lowercase alphanumerics and '-', at most 63 characters)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "image"
    return (prefix + slug)[:63].rstrip("-")


PULL_MARGIN_S = 600
"""Added to the smoke time limit in activeDeadlineSeconds: image pull and scheduling."""


def k8s_job(
    *,
    image: str,
    name: str,
    gpus_per_pod: int,
    pods: int = 1,
    smoke_timeout_s: int = 600,
    shm_size: str = "2Gi",
    command: Sequence[str] = SMOKE_COMMAND,
) -> dict[str, Any]:
    """A batch/v1 Job that runs the smoke payload of `image` on `pods` distinct GPU nodes.

    Each pod asks for `gpus_per_pod` whole GPUs (nvidia.com/gpu, the NVIDIA device plugin's
    resource); pods spread one per node (topologySpreadConstraints on kubernetes.io/hostname);
    /dev/shm is a memory emptyDir because a pod's default /dev/shm is 64 MB, too small for
    NCCL and DataLoader workers. backoffLimit 0 and restartPolicy Never: a failed smoke run is a
    verdict, not something to retry.
    """
    job_name = k8s_name(name)
    labels = {"app.kubernetes.io/name": "envbuild-validate", "envbuild.job": job_name}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name, "labels": labels},
        "spec": {
            "completions": pods,
            "parallelism": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(smoke_timeout_s) + PULL_MARGIN_S,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": {"envbuild.job": job_name}},
                        }
                    ],
                    "containers": [
                        {
                            "name": "smoke",
                            "image": image,
                            "command": list(command),
                            "resources": {
                                "limits": {"nvidia.com/gpu": int(gpus_per_pod)},
                            },
                            "securityContext": {
                                "runAsNonRoot": True,
                                "allowPrivilegeEscalation": False,
                            },
                            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                        }
                    ],
                    "volumes": [
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}}
                    ],
                },
            },
        },
    }


# --- JUnit XML -----------------------------------------------------------------------------------


def junit_xml(suites: Sequence[tuple[str, Sequence[Check]]]) -> str:
    """JUnit XML for CI: one <testsuite> per target, one <testcase> per check.

    Deterministic (no timestamps or durations), so a report can be diffed.
    """
    root = ET.Element("testsuites", name="envbuild validate")
    total = failures = skipped = 0
    for suite_name, checks in suites:
        n_fail = sum(1 for c in checks if c.status == "fail")
        n_skip = sum(1 for c in checks if c.status == "skip")
        suite = ET.SubElement(
            root,
            "testsuite",
            name=suite_name,
            tests=str(len(checks)),
            failures=str(n_fail),
            errors="0",
            skipped=str(n_skip),
        )
        for c in checks:
            case = ET.SubElement(suite, "testcase", classname=suite_name, name=c.name)
            if c.status == "fail":
                fail = ET.SubElement(case, "failure", message=c.detail, type="envbuild")
                fail.text = f"{c.detail}\nnext: {c.next_step}" if c.next_step else c.detail
            elif c.status == "skip":
                ET.SubElement(case, "skipped", message=c.detail)
            else:
                out = ET.SubElement(case, "system-out")
                out.text = c.detail
        total += len(checks)
        failures += n_fail
        skipped += n_skip
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", "0")
    root.set("skipped", str(skipped))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


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

    @property
    def checks(self) -> tuple[Check, ...]:
        return self.preflight.checks + self.smoke

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 pass; 1 the pre-flight says no; 6 the smoke test ran and said no (SmokeFailed)."""
        if not self.preflight.ok:
            return 1
        return 0 if self.ok else 6

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "target": self.target,
            "kind": self.kind,
            "host": self.host,
            "checks": [c.to_json() for c in self.checks],
        }


@dataclass(frozen=True)
class FleetResult:
    view: FleetView
    manifest_path: Any = None
    """Where the Job manifest was written (a Path), or None."""
    manifest: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = self.view.to_json()
        if self.manifest_path is not None:
            out["k8s_job"] = str(self.manifest_path)
        return out
