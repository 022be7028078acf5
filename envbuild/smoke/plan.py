"""The smoke plan and verdict (pure): what the payload must check, and what its report means.

`plan(lock, ...)` turns a lock (or nothing, for a bare host) into the JSON-able plan the
payload reads (`/opt/envbuild/plan.json` inside images); `parse_report(stdout)` takes the
payload's last `ENVBUILD-SMOKE-REPORT {json}` line; `evaluate(report, plan)` re-checks the
report against the plan and gives the verdict with a fix hint per failure. The rules for the
figures live in `envbuild/payload/smoke_checks.py` (standard library only, shared with the
payload), so the host and the image judge alike.

Exit codes of `envbuild smoke`: 0 = pass, 1 = the payload ran and the verdict is "no" (like
`lock --check`), 6 (SmokeFailed) = no verdict: the payload crashed, hung or printed no report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envbuild.core.documents import DocumentError, json_loads, printable, printable_data
from envbuild.core.errors import SmokeFailed
from envbuild.core.models import Lock, SmokeSettings
from envbuild.cuda.archs import ArchRules, parse_arch
from envbuild.cuda.wheels import cuda_libs
from envbuild.matrix import Matrix
from envbuild.payload import smoke_checks as ck
from envbuild.payload.smoke_checks import REPORT_MARKER, Baseline, SmokePlan

PLAN_SCHEMA = ck.PLAN_SCHEMA
PAYLOAD_DIR = "/opt/envbuild/payload"
PLAN_PATH = "/opt/envbuild/plan.json"
SMOKE_GRACE_S = 60
"""Beyond the plan's timeout_s before a runner kills the payload: its own watchdog (which
fires at timeout_s, envbuild/payload/__main__.py) reports first."""
MIN_FREE_MIB = {1: 512, 2: 4096}
"""Free GPU memory the payload asks for before it starts: tier 2 peaks at ~2.5 GiB on an H200
(benchmarks/results/h200-smoke-full.json: NVML peak 2485 MiB incl. the CUDA context)."""
COLLECTIVE_TIMEOUT_S = 60
REQUIRED_TIER1 = ("gpu-visible", "cuda-build", "driver-floor", "shm")
REQUIRED_TIER2 = ("loss-falling", "grads")


def kill_after_s(timeout_s: int) -> int:
    """The one timeout rule of every smoke runner (host subprocess, image build, validate):
    kill the payload SMOKE_GRACE_S after the plan's timeout_s."""
    return int(timeout_s) + SMOKE_GRACE_S


def payload_command(*, allow_cpu: bool) -> tuple[str, ...]:
    """The payload as an image runs it: the venv's python (on PATH) and the image's plan."""
    command: tuple[str, ...] = ("python", PAYLOAD_DIR, "--plan", PLAN_PATH)
    return (*command, "--allow-cpu") if allow_cpu else command


@dataclass(frozen=True)
class FailedCheck:
    name: str
    tier: int
    status: str
    figure: str
    hint: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tier": self.tier,
            "status": self.status,
            "figure": self.figure,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class SmokeVerdict:
    """The judgement of one report against its plan; `summary` is the line a CLI prints."""

    ok: bool
    failed: tuple[FailedCheck, ...]
    warnings: tuple[FailedCheck, ...]
    device: str
    summary: str

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "device": self.device,
            "summary": self.summary,
            "failed": [f.to_json() for f in self.failed],
            "warnings": [w.to_json() for w in self.warnings],
        }


@dataclass(frozen=True)
class SmokeOutcome:
    """One `envbuild smoke` run (api.smoke): the plan sent, the payload's report, the verdict."""

    plan: SmokePlan
    report: dict[str, Any]
    verdict: SmokeVerdict
    returncode: int


@dataclass(frozen=True)
class SmokeJudgement:
    """What a judge concluded from one smoke run's output."""

    ok: bool
    report: Mapping[str, Any]
    """The payload's report (the JSON after REPORT_MARKER)."""
    failed: tuple[Mapping[str, str], ...] = ()
    """{"name", "figure", "hint"} of each failed check; hint = what usually fixes it."""
    summary: str = ""


def judge(stdout: str, plan: Mapping[str, Any], *, timed: bool = True) -> SmokeJudgement:
    """Read the report in a payload's stdout and judge it against its plan (SmokeFailed when
    there is no readable report). `timed=False`: the summary leaves out the payload's own
    time, for a caller that reports the smoke time itself (`envbuild image`: `smoke_s`)."""
    report = parse_report(stdout)
    verdict = evaluate(report, plan, timed=timed)
    return SmokeJudgement(
        ok=verdict.ok,
        report=report,
        failed=tuple({"name": f.name, "figure": f.figure, "hint": f.hint} for f in verdict.failed),
        summary=verdict.summary,
    )


# --- plan ------------------------------------------------------------------------------------


def plan(
    lock: Lock | None,
    *,
    allow_cpu: bool,
    matrix: Matrix,
    tier: int | None = None,
) -> SmokePlan:
    """The smoke plan for a lock (None = a bare host: no expectations, framework detected).

    Deterministic (sorted keys when dumped, no clock): it is written into the build context.
    A CPU lock (no CUDA) always allows the CPU.
    """
    settings = lock.smoke if lock is not None else SmokeSettings()
    run_tier = tier if tier is not None else settings.tier
    if run_tier not in (1, 2):
        raise ValueError(f"tier must be 1 or 2, not {run_tier}")
    expect: dict[str, str] = {}
    framework = "auto"
    driver_floor: str | None = None
    locked_archs: list[str] = []
    name = ""
    cpu_lock = False
    if lock is not None:
        stack = lock.stack
        name = lock.name
        framework = stack.framework.name
        expect["framework"] = stack.framework.version
        cpu_lock = not lock.is_gpu
        if stack.cuda is not None:
            expect["cuda"] = stack.cuda
            # The locked wheels are the libraries the framework loads (cudawheels).
            libs = cuda_libs(lock.packages)
            cudnn = libs.cudnn or stack.cudnn
            nccl = libs.nccl or stack.nccl
            if cudnn:
                expect["cudnn"] = cudnn
            if nccl:
                expect["nccl"] = nccl
        if stack.floors is not None:
            driver_floor = stack.floors.effective
        locked_archs = list(stack.archs)
    baselines = [
        Baseline(
            gpu=b.gpu,
            bf16_tflops=b.bf16_tflops,
            mem_bw_tbs=b.mem_bw_tbs,
            nvlink_busbw_gbs=b.nvlink_busbw_gbs,
            confidence=b.confidence,
            source=b.source,
        )
        for b in sorted(matrix.baselines, key=lambda b: b.gpu)
    ]
    extensions, target_ccs, tegra_ccs = _extension_plan(lock, matrix)
    return {
        "schema": PLAN_SCHEMA,
        "name": name,
        "input_hash": lock.input_hash if lock is not None else None,
        "framework": framework,
        "tier": run_tier,
        "allow_cpu": bool(allow_cpu or cpu_lock),
        "steps": settings.steps,
        "timeout_s": settings.timeout_s,
        "min_shm_mib": settings.min_shm_mib,
        "min_free_mib": MIN_FREE_MIB[run_tier],
        "driver_floor": driver_floor,
        "expect": expect,
        "locked_archs": locked_archs,
        "baselines": baselines,
        "floor_ratio": ck.FLOOR_RATIO,
        "multi_gpu": True,
        "collective_timeout_s": COLLECTIVE_TIMEOUT_S,
        # No request or lock key chooses it: the payload picks per GPU (docs/smoke.md).
        "precision": ck.DEFAULT_PRECISION,
        # Packages compiled from source, and the GPUs their code must cover.
        "extensions": extensions,
        "target_ccs": target_ccs,
        "tegra_ccs": tegra_ccs,
    }


def _extension_plan(
    lock: Lock | None, matrix: Matrix
) -> tuple[list[dict[str, str]], list[str], list[str]]:
    """The packages the image compiled from source and the GPUs their code must cover (the
    lock's targets; Tegra ones need an exact cubin): checked by the payload's smoke_ext."""
    compiled = [p for p in lock.packages if p.sdist and not p.pure] if lock is not None else []
    if lock is None or lock.build is None or not compiled:
        return [], [], []  # pure-Python sdists hold no device code to check
    rules = ArchRules.from_archs(matrix.archs)
    ccs = []
    for sm in lock.stack.target_archs:
        _, major, minor, _ = parse_arch(sm)
        ccs.append((major, minor))
    return (
        [{"name": p.name, "version": p.version} for p in compiled],
        [f"{a}.{b}" for a, b in sorted(set(ccs))],
        [f"{a}.{b}" for a, b in sorted(set(ccs) & rules.tegra)],
    )


# --- report ----------------------------------------------------------------------------------


def parse_report(stdout: str) -> dict[str, Any]:
    """The payload's report: the last `ENVBUILD-SMOKE-REPORT {json}` line of its stdout.

    Raises SmokeFailed (no verdict) when the line is missing or is not a report.
    """
    prefix = REPORT_MARKER + " "
    line = next(
        (ln for ln in reversed(stdout.splitlines()) if ln.startswith(prefix)),
        None,
    )
    tail = "\n".join(stdout.strip().splitlines()[-5:])
    if line is None:
        raise SmokeFailed(
            "the smoke payload printed no report (it crashed or was killed)",
            hint="read its output above; run it by hand: python /opt/envbuild/payload "
            "--plan /opt/envbuild/plan.json",
            fields={"stdout_tail": tail},
        )
    try:
        report = json_loads(line[len(prefix) :])
    except DocumentError as exc:
        raise SmokeFailed(
            f"the smoke report is not JSON: {exc}",
            hint="the payload's output was cut or mixed with other output; rerun it",
        ) from None
    problem = _schema_problem(report)
    if problem:
        raise SmokeFailed(
            f"the smoke report is malformed: {printable(problem)}",
            hint="the payload and envbuild are different versions: rebuild the image",
        )
    # Check names, figures and hints come from inside the image: what reaches a terminal is
    # made printable here, once (docs/reliability.md).
    return dict(printable_data(report))


# The report's fields envbuild reads, and their JSON types (SmokeReport in payload/smoke_checks):
# anything else is "malformed" (exit 6), never a crash of the judge.
_REPORT_TYPES: dict[str, tuple[type, ...]] = {
    "framework": (str, type(None)),
    "device": (str,),
    "tier": (int,),
    "allow_cpu": (bool,),
    "host": (dict,),
    "versions": (dict,),
    "timings": (dict,),
    "metrics": (dict,),
    "errors": (list,),
}
_CHECK_TYPES: dict[str, tuple[type, ...]] = {
    "tier": (int,),
    "figure": (str,),
    "hint": (str,),
}


def _wrong_type(table: Any, types: Mapping[str, tuple[type, ...]]) -> str | None:
    for key, allowed in types.items():
        if key not in table:
            continue
        value = table[key]
        if isinstance(value, bool) and bool not in allowed:  # JSON true is not a tier
            return key
        if not isinstance(value, allowed):
            return key
    return None


def _schema_problem(report: Any) -> str:
    if not isinstance(report, dict):
        return "not a JSON object"
    if report.get("schema") != ck.REPORT_SCHEMA:
        return f"schema {report.get('schema')!r}, expected {ck.REPORT_SCHEMA}"
    if not isinstance(report.get("ok"), bool):
        return "'ok' is not a boolean"
    key = _wrong_type(report, _REPORT_TYPES)
    if key is not None:
        return f"{key!r} is a {type(report[key]).__name__}"
    for part, inner in (("host", "gpus"), ("metrics", "framework_gpus")):
        items = report.get(part, {}).get(inner)
        if items is not None and (
            not isinstance(items, list) or not all(isinstance(g, dict) for g in items)
        ):
            return f"'{part}.{inner}' is not a list of objects"
    versions = report.get("versions", {})
    if not all(isinstance(v, dict) for v in versions.values()):
        return "'versions' holds a value that is not an object"
    seconds = report.get("timings", {}).get("total_s")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float)):
        return "'timings.total_s' is not a number"
    checks = report.get("checks")
    if not isinstance(checks, list):
        return "'checks' is not a list"
    for c in checks:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            return "a check has no name"
        if c.get("status") not in ck.STATUSES:
            return f"check {c.get('name')!r} has status {c.get('status')!r}"
        key = _wrong_type(c, _CHECK_TYPES)
        if key is not None:
            return f"check {c.get('name')!r}: {key!r} is a {type(c[key]).__name__}"
    return ""


# The plan's fields and their JSON types (SmokePlan in payload/smoke_checks): a plan file is
# user input (`envbuild smoke --plan FILE`), so a wrong type is exit 2 naming the field.
_PLAN_TYPES: dict[str, tuple[type, ...]] = {
    "schema": (int,),
    "name": (str,),
    "input_hash": (str, type(None)),
    "framework": (str,),
    "tier": (int,),
    "allow_cpu": (bool,),
    "steps": (int,),
    "timeout_s": (int,),
    "min_shm_mib": (int,),
    "min_free_mib": (int,),
    "driver_floor": (str, type(None)),
    "expect": (dict,),
    "locked_archs": (list,),
    "baselines": (list,),
    "floor_ratio": (int, float),
    "multi_gpu": (bool,),
    "collective_timeout_s": (int,),
    "precision": (str,),
    "extensions": (list,),
    "target_ccs": (list,),
    "tegra_ccs": (list,),
}


def plan_problem(plan: Any) -> str:
    """What is wrong with a plan read from a file ("" when nothing): its shape and the types of
    the fields envbuild and the payload read (pure)."""
    if not isinstance(plan, dict):
        return "not a JSON object"
    key = _wrong_type(plan, _PLAN_TYPES)
    if key is not None:
        return f"{key} is {json.dumps(plan[key])[:60]}, not {_PLAN_TYPES[key][0].__name__}"
    if "tier" in plan and plan["tier"] not in (1, 2):
        return f"tier is {plan['tier']}, not 1 or 2"
    if "timeout_s" in plan and not 1 <= plan["timeout_s"] <= 86400:
        return f"timeout_s is {plan['timeout_s']}, not 1 to 86400"
    expect = plan.get("expect", {})
    if not all(isinstance(v, str) for v in expect.values()):
        return "expect holds a version that is not a string"
    if not all(isinstance(b, dict) for b in plan.get("baselines", [])):
        return "baselines holds an entry that is not an object"
    if not all(isinstance(a, str) for a in plan.get("locked_archs", [])):
        return "locked_archs holds an entry that is not a string"
    return ""


# --- verdict ---------------------------------------------------------------------------------


def _failed(c: Mapping[str, Any]) -> FailedCheck:
    return FailedCheck(
        name=str(c.get("name", "?")),
        tier=int(c.get("tier", 1) or 1),
        status=str(c.get("status", "fail")),
        figure=str(c.get("figure", "")),
        hint=str(c.get("hint", "")),
    )


def evaluate(
    report: Mapping[str, Any], plan: Mapping[str, Any], *, timed: bool = True
) -> SmokeVerdict:
    """Judge a report against its plan; the report's own "ok" is not trusted alone.

    Fails on: any failed check; another framework than planned; a version seen that the plan
    does not expect (re-checked here); and, for a report that failed nothing itself, a CPU
    run the plan did not allow or required checks that are missing (a payload that skipped
    its training run must not pass).
    """
    checks = [c for c in report.get("checks", []) if isinstance(c, Mapping)]
    failed = [_failed(c) for c in checks if c.get("status") == "fail"]
    warnings = tuple(_failed(c) for c in checks if c.get("status") == "warn")
    device = str(report.get("device", "cpu"))
    # A report that failed on its own already says why; the defences below catch a report
    # that passes without having tested what the plan asks (CPU fallback, skipped checks).
    own_failure = bool(failed)
    failed_names = {f.name for f in failed}
    for extra in _plan_failures(report, plan, checks, device, own_failure):
        if extra.name not in failed_names:
            failed.append(extra)
            failed_names.add(extra.name)
    ok = not failed
    summary = _summary(report, device, ok, len(checks), failed, warnings, timed=timed)
    return SmokeVerdict(
        ok=ok, failed=tuple(failed), warnings=warnings, device=device, summary=summary
    )


def _plan_failures(
    report: Mapping[str, Any],
    plan: Mapping[str, Any],
    checks: list[Mapping[str, Any]],
    device: str,
    own_failure: bool,
) -> list[FailedCheck]:
    """What the plan asks that the report does not show: the framework, the GPU, the locked
    versions and the required checks (the latter three only for a report that passes)."""
    out: list[FailedCheck] = []

    def add(name: str, figure: str, hint: str, tier: int = 1) -> None:
        out.append(FailedCheck(name, tier, "fail", figure, hint))

    want_framework = str(plan.get("framework") or "auto")
    if want_framework != "auto" and report.get("framework") != want_framework:
        add(
            "framework",
            f"the payload tested {report.get('framework')!r}, the plan {want_framework!r}",
            "run the image's own payload and plan (/opt/envbuild/plan.json)",
        )
    if device != "cuda" and not plan.get("allow_cpu") and not own_failure:
        add(
            "gpu-visible",
            "the payload ran on the CPU",
            "no GPU was visible: run the container with `--gpus all`; --allow-cpu only for "
            "CPU images",
        )
    out += _version_failures(report, plan, own_failure)
    required = list(REQUIRED_TIER1)
    if int(plan.get("tier", 2)) >= 2:
        required += list(REQUIRED_TIER2)
    names = {str(c.get("name")) for c in checks}
    # A package compiled from source must have had its architectures read.
    required += [
        f"ext-archs:{e.get('name')}" for e in plan.get("extensions") or [] if isinstance(e, Mapping)
    ]
    for name in required if not own_failure else ():
        if name not in names:
            add(
                name,
                "missing from the report",
                "the payload did not run this check: the payload and envbuild differ, rebuild "
                "the image",
                tier=1 if name in REQUIRED_TIER1 else 2,
            )
    return out


def _version_failures(
    report: Mapping[str, Any], plan: Mapping[str, Any], own_failure: bool
) -> list[FailedCheck]:
    out: list[FailedCheck] = []
    versions = report.get("versions") or {}
    for label, expected in sorted((plan.get("expect") or {}).items()):
        entry = versions.get(label) if isinstance(versions, Mapping) else None
        if not isinstance(entry, Mapping):
            if not own_failure:
                out.append(
                    FailedCheck(
                        f"version:{label}",
                        1,
                        "fail",
                        "missing from the report",
                        "the payload did not report this version: rebuild the image",
                    )
                )
            continue
        seen = entry.get("seen")
        if label == "nccl" and seen is None and report.get("framework") != "torch":
            continue  # jax and tensorflow do not report their NCCL; the payload skips it
        if ck.version_matches(str(expected), None if seen is None else str(seen)) is False:
            out.append(
                FailedCheck(
                    f"version:{label}",
                    1,
                    "fail",
                    f"seen {seen or 'none'}, plan expects {expected}",
                    f"the image does not hold the locked {label}: rebuild it from its lock",
                )
            )
    return out


def _summary(
    report: Mapping[str, Any],
    device: str,
    ok: bool,
    total: int,
    failed: list[FailedCheck],
    warnings: tuple[FailedCheck, ...],
    *,
    timed: bool = True,
) -> str:
    """The verdict line a CLI prints; with the payload's own time (`timings.total_s`) when
    `timed`."""
    # The GPUs the framework saw (CUDA_VISIBLE_DEVICES applied), else every GPU NVML lists.
    seen_gpus = (report.get("metrics") or {}).get("framework_gpus")
    if not isinstance(seen_gpus, list):
        seen_gpus = (report.get("host") or {}).get("gpus", []) or []
    gpus = ", ".join(str(g.get("name", "?")) for g in seen_gpus if isinstance(g, Mapping))
    where = f"{report.get('framework') or 'no framework'} on {device}" + (
        f" ({gpus})" if gpus else ""
    )
    seconds = (report.get("timings") or {}).get("total_s")
    took = f" in {float(seconds):.1f} s" if timed and isinstance(seconds, (int, float)) else ""
    if ok:
        extra = f", {len(warnings)} warning(s)" if warnings else ""
        return f"smoke PASS: {where}, {total} checks{extra}{took}"
    return (
        f"smoke FAIL: {where}, {len(failed)} of {max(total, len(failed))} checks failed "
        f"({', '.join(f.name for f in failed)}){took}"
    )


def verdict_json(report: Mapping[str, Any], verdict: SmokeVerdict) -> dict[str, Any]:
    """What `envbuild smoke --json` prints: the report, its "ok" set by the verdict."""
    out = dict(report)
    out["ok"] = verdict.ok
    out["verdict"] = verdict.to_json()
    return out
