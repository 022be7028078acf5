"""`envbuild smoke`: run the smoke payload on this host and print its verdict."""

from __future__ import annotations

from pathlib import Path

import click

from envbuild import console


@click.command(
    "smoke",
    help=(
        "Run the smoke payload on this host: tier 1 (seconds: GPU visible, CUDA build, archs, "
        "versions, driver floor, /dev/shm, free memory), tier 2 (a short mixed-precision "
        "training run, cuDNN conv, attention, a bitwise-repeat matmul, bf16 TFLOP/s and memory "
        "bandwidth against the GPU's baseline, NVML telemetry, DDP over every GPU). The "
        "framework must be importable by this Python. Exit 0 = pass, 1 = a check failed, "
        "6 = the payload gave no report."
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
def command(
    as_json: bool,
    allow_cpu: bool,
    plan_file: Path | None,
    lock_dir: Path | None,
    tier: int | None,
) -> None:
    from envbuild import api
    from envbuild.smoke import format_report, verdict_json

    outcome = api.smoke(allow_cpu=allow_cpu, plan_file=plan_file, lock_dir=lock_dir, tier=tier)
    if as_json:
        console.emit_json(verdict_json(outcome.report, outcome.verdict))
    else:
        console.line(format_report(outcome.report, outcome.verdict))
    if not outcome.verdict.ok:
        raise click.exceptions.Exit(1)
