"""Packages the image compiled from source (the plan's "extensions"): tier 1 reads the
architectures of every compiled library they installed and checks them against the lock's
target GPUs and the visible ones (no GPU needed: the CPU path checks the arch list too);
tier 2 calls each package's `envbuild.smoke.plan` entry point on the GPU, where it offers one
(a callable that raises when its kernel is wrong and returns a line to report).
"""

from __future__ import annotations

import importlib.metadata as md
import traceback
from typing import Any

try:
    from . import fatbin
    from . import smoke_checks as ck
except ImportError:  # run as a folder (python /opt/envbuild/payload): siblings are top-level
    import fatbin  # type: ignore[no-redef,import-not-found]
    import smoke_checks as ck  # type: ignore[no-redef,import-not-found]

ENTRY_POINT_GROUP = "envbuild.smoke"


def libraries(name: str) -> dict[str, list[str]]:
    """path -> device-code archs of each shared library the distribution `name` installed."""
    dist = md.distribution(name)
    out: dict[str, list[str]] = {}
    for file in dist.files or ():
        text = str(file)
        if not (text.endswith(".so") or ".so." in text.rsplit("/", 1)[-1]):
            continue
        path = str(dist.locate_file(file))
        try:
            out[path] = fatbin.library_archs(path)
        except (OSError, fatbin.NotElf):
            continue
    return out


def run(plan: dict[str, Any], report: dict[str, Any]) -> None:
    """Append the ext-archs (tier 1) and ext-smoke (tier 2) checks of the plan's extensions."""
    extensions = [e for e in plan.get("extensions") or [] if isinstance(e, dict)]
    if not extensions:
        return
    checks: list[dict[str, Any]] = report["checks"]
    gpus = (report.get("metrics") or {}).get("framework_gpus") or []
    visible = [str(g.get("cc")) for g in gpus if isinstance(g, dict) and g.get("cc")]
    names = []
    for ext in extensions:
        name = str(ext.get("name", ""))
        names.append(name)
        try:
            libs = libraries(name)
        except md.PackageNotFoundError:
            checks.append(
                ck.check(
                    f"ext-archs:{name}",
                    1,
                    "fail",
                    f"{name} is not installed in {report.get('framework') or 'this'} Python",
                    "the builder stage did not install it: rebuild the image from its lock",
                )
            )
            continue
        report["metrics"].setdefault("extensions", {})[name] = libs
        checks.append(
            ck.check_extension_archs(
                name,
                libs,
                target_ccs=[str(c) for c in plan.get("target_ccs") or []],
                visible_ccs=visible,
                tegra_ccs=[str(c) for c in plan.get("tegra_ccs") or []],
            )
        )
    if int(plan.get("tier", 2)) >= 2 and report.get("device") == "cuda" and ck.report_ok(checks):
        _call_entry_points(set(names), checks)


def _call_entry_points(names: set[str], checks: list[dict[str, Any]]) -> None:
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        owner = _normalise(dist.name) if dist is not None else ""
        if owner not in {_normalise(n) for n in names}:
            continue
        try:
            figure = ep.load()()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            checks.append(ck.check_extension_call(owner, None, error + traceback.format_exc(-1)))
            continue
        checks.append(ck.check_extension_call(owner, str(figure), None))


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")
