"""Entry point of the smoke payload (see __init__.py for the contract)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

if not __package__:
    # Run as a folder: make the sibling modules importable by plain name.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    from . import smoke_checks as ck
    from . import smoke_host as hostmod
except ImportError:  # run as a folder (python /opt/envbuild/payload): siblings are top-level
    import smoke_checks as ck  # type: ignore[no-redef,import-not-found]
    import smoke_host as hostmod  # type: ignore[no-redef,import-not-found]

FRAMEWORKS = ("torch", "jax", "tensorflow")
DEFAULT_PLAN = "/opt/envbuild/plan.json"


def _framework_module(name: str) -> Any:
    module = {"torch": "smoke_torch", "jax": "smoke_jax", "tensorflow": "smoke_tf"}[name]
    if __package__:
        return importlib.import_module(f"{__package__}.{module}")
    return importlib.import_module(module)


def _ext_module() -> Any:
    if __package__:
        return importlib.import_module(f"{__package__}.smoke_ext")
    return importlib.import_module("smoke_ext")


def detect_framework(wanted: str | None) -> str | None:
    """The plan's framework, or the first of torch/jax/tensorflow importable here."""
    if wanted and wanted != "auto":
        return wanted
    for name in FRAMEWORKS:
        if importlib.util.find_spec(name) is not None:
            return name
    return None


def new_report(plan: dict[str, Any], framework: str | None) -> dict[str, Any]:
    return {
        "schema": ck.REPORT_SCHEMA,
        "ok": False,
        "framework": framework,
        "device": "cpu",
        "tier": int(plan.get("tier", 2)),
        "allow_cpu": bool(plan.get("allow_cpu")),
        "host": {"source": None, "driver": None, "cuda_driver": None, "gpus": []},
        "versions": {},
        "checks": [],
        "timings": {},
        "metrics": {},
        "errors": [],
    }


VERDICT_TO: list[str] = []
"""Where `--verdict` sends the node's verdict (a file, or "-": a stdout line); set by main."""


def node_name() -> str:
    """The node this runs on: what the runner says (ENVBUILD_NODE: the Kubernetes Job sets it
    from spec.nodeName, the Slurm script from SLURMD_NODENAME), else the hostname."""
    return os.environ.get("ENVBUILD_NODE") or os.uname().nodename


def write_verdict(report: dict[str, Any]) -> None:
    """The compact verdict (smoke_checks.verdict_of), where `--verdict` said; a verdict that
    cannot be written must not take the report down, so it says why on stderr."""
    for where in VERDICT_TO:
        text = ck.verdict_text(ck.verdict_of(report, node_name()))
        if where == "-":
            sys.stdout.write(f"{ck.VERDICT_MARKER} {text}\n")
            continue
        try:
            with open(where, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            sys.stderr.write(f"envbuild-smoke: cannot write the verdict to {where}: {exc}\n")


def finish(report: dict[str, Any], started: float) -> int:
    """Print the table on stderr, the verdict where --verdict says, and the report line last on
    stdout; the exit code."""
    report["ok"] = bool(report["checks"]) and ck.report_ok(report["checks"])
    report["timings"]["total_s"] = round(time.perf_counter() - started, 3)
    sys.stderr.write(ck.format_table(report) + "\n")
    sys.stderr.flush()
    write_verdict(report)
    sys.stdout.write(ck.report_line(report) + "\n")
    sys.stdout.flush()
    return 0 if report["ok"] else 1


def load_plan(path: str | None) -> dict[str, Any]:
    if path is None:
        path = DEFAULT_PLAN if os.path.exists(DEFAULT_PLAN) else None
    if path is None:
        return {}
    with open(path, encoding="utf-8") as f:
        plan = json.load(f)
    if not isinstance(plan, dict):
        raise ValueError("the plan is not a JSON object")
    return plan


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(prog="envbuild-smoke", description=__doc__)
    parser.add_argument("--plan", help=f"smoke plan JSON (default {DEFAULT_PLAN} if present)")
    parser.add_argument(
        "--allow-cpu", action="store_true", help="run on the CPU when no GPU is visible"
    )
    parser.add_argument("--tier", type=int, choices=(1, 2), help="override the plan's tier")
    parser.add_argument(
        "--verdict",
        metavar="PATH",
        help="also write the node's verdict JSON (<= 4 KiB) to PATH, or '-': a stdout line",
    )
    args = parser.parse_args(argv)
    VERDICT_TO[:] = [args.verdict] if args.verdict else []
    try:
        plan = load_plan(args.plan)
    except (OSError, ValueError) as exc:
        report = new_report({}, None)
        report["checks"].append(
            ck.check(
                "plan",
                1,
                "fail",
                f"cannot read the plan: {exc}",
                "pass --plan with the JSON `envbuild` wrote",
            )
        )
        return finish(report, started)
    if args.allow_cpu:
        plan["allow_cpu"] = True
    if args.tier:
        plan["tier"] = args.tier
    framework = detect_framework(plan.get("framework"))
    report = new_report(plan, framework)
    report["host"] = hostmod.nvml_facts()
    if framework not in FRAMEWORKS:
        report["checks"].append(
            ck.check(
                "framework",
                1,
                "fail",
                f"no supported framework ({framework or 'none importable'})",
                "install torch, jax or tensorflow in this Python (or point --plan at the image's plan)",
            )
        )
        return finish(report, started)
    if importlib.util.find_spec(framework) is None:
        report["checks"].append(
            ck.check(
                "framework",
                1,
                "fail",
                f"{framework} is not importable by {sys.executable}",
                f"install {framework} here, or run inside the image",
            )
        )
        return finish(report, started)

    # Watchdog: a hung CUDA call or NCCL collective must still end with a report.
    timeout_s = float(plan.get("timeout_s", 600))

    def on_timeout() -> None:
        report["checks"].append(
            ck.check(
                "timeout",
                2,
                "fail",
                f"no verdict after {timeout_s:.0f} s",
                "a GPU call hung: check `nvidia-smi` for a stuck process or Xid errors in dmesg",
            )
        )
        finish(report, started)
        os._exit(1)

    watchdog = threading.Timer(timeout_s, on_timeout)
    watchdog.daemon = True
    watchdog.start()
    try:
        _framework_module(framework).run(plan, report)
        # Packages compiled from source: their archs (tier 1), their own GPU test (tier 2).
        _ext_module().run(plan, report)
    except Exception as exc:
        report["errors"].append(traceback.format_exc(limit=6))
        report["checks"].append(
            ck.check(
                "payload",
                1,
                "fail",
                f"{type(exc).__name__}: {exc}"[:300],
                f"{framework} failed to load or run: see the error above",
            )
        )
    finally:
        watchdog.cancel()
    return finish(report, started)


if __name__ == "__main__":
    sys.exit(main())
