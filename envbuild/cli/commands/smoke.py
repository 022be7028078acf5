"""`envbuild smoke`: run the smoke payload on this host and print its verdict."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envbuild.cli import console
from envbuild.cli.options import help_epilog, matrix_overlay, report_page
from envbuild.core.errors import EnvbuildError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from envbuild.smoke.plan import SmokeVerdict


def render(report: Mapping[str, Any], verdict: SmokeVerdict) -> str:
    """The human table of a report, the failures with their next step, and the verdict line."""
    rows: list[tuple[str, ...]] = [
        (
            str(c.get("tier", "")),
            str(c.get("name", "")),
            str(c.get("status", "")).upper(),
            str(c.get("figure", "")),
        )
        for c in report.get("checks", [])
    ]
    reported = {str(c.get("name")) for c in report.get("checks", [])}
    rows += [
        (str(f.tier), f.name, "FAIL", f.figure) for f in verdict.failed if f.name not in reported
    ]
    lines = [console.table(rows, header=("TIER", "CHECK", "STATUS", "FIGURE"))]
    lines += [
        f"  {item.name}: {item.hint}" for item in verdict.failed + verdict.warnings if item.hint
    ]
    lines.append(verdict.summary)
    return "\n".join(lines)


@click.command(
    "smoke",
    help=(
        "Run the smoke payload on this host: tier 1 (seconds: GPU visible, CUDA build, archs, "
        "versions, driver floor, /dev/shm, free memory), tier 2 (a short mixed-precision "
        "training run, cuDNN conv, attention, a bitwise-repeat matmul, bf16 TFLOP/s and memory "
        "bandwidth against the GPU's baseline, NVML telemetry, DDP over every GPU). The "
        "framework must be importable by this Python."
    ),
    epilog=help_epilog(
        [
            "envbuild smoke --tier 1",
            "envbuild smoke --lock images/torch-train --json",
            "python -m envbuild smoke --plan /opt/envbuild/plan.json --allow-cpu",
        ],
        [
            (0, "pass"),
            (1, "a check failed"),
            (2, "bad input"),
            (6, "the payload gave no report (crashed, hung, or was killed)"),
        ],
    ),
)
@click.option("--json", "as_json", is_flag=True, help="Print the report and verdict as JSON.")
@click.option(
    "--allow-cpu", is_flag=True, help="Run the CPU path when no GPU is visible (CPU images)."
)
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="A smoke plan JSON (an image has it at /opt/envbuild/plan.json).",
)
@click.option(
    "--lock",
    "lock_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Plan from this image folder's envbuild.lock (expected versions, driver floor).",
)
@click.option("--tier", type=click.IntRange(1, 2), help="1 = seconds, 2 = + training [the plan's].")
@report_page
def command(
    as_json: bool,
    allow_cpu: bool,
    plan_file: Path | None,
    lock_dir: Path | None,
    tier: int | None,
    report_path: Path | None,
) -> None:
    from envbuild.app import report as page
    from envbuild.app import smoke
    from envbuild.smoke.plan import verdict_json

    page.check_path(report_path)

    try:
        outcome = smoke.run(
            allow_cpu=allow_cpu,
            plan_file=plan_file,
            lock_dir=lock_dir,
            tier=tier,
            matrix_overlay=matrix_overlay(),
        )
    except EnvbuildError as err:
        if report_path is not None:  # the page of a payload that gave no report says why
            page.write(
                report_path, title="envbuild smoke", ok=False, report=None, error=err.message
            )
        raise
    fit = page.memory_fit(outcome.report, matrix_overlay())
    if report_path is not None:
        page.write(
            report_path,
            title="envbuild smoke",
            ok=outcome.verdict.ok,
            report=outcome.report,
            fit=fit,
            error="" if outcome.verdict.ok else outcome.verdict.summary,
        )
    if as_json:
        console.emit_json({**verdict_json(outcome.report, outcome.verdict), "memory_fit": fit})
    else:
        console.line(render(outcome.report, outcome.verdict))
        if fit:
            console.line(f"memory: {fit['summary']}")
    if not outcome.verdict.ok:
        raise click.exceptions.Exit(1)
