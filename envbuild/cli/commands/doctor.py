"""`envbuild doctor [--json]`: check this GPU host; exit 0 healthy, 1 problems, 2 cannot probe."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from envbuild.cli import console
from envbuild.cli.options import help_epilog, host_facts, matrix_overlay
from envbuild.host.probe import NO_DRIVER_ERRORS


def summary_line(facts: dict[str, Any]) -> str:
    driver = facts.get("driver") or {}
    gpus = facts.get("gpus") or []
    version = driver.get("version") or driver.get("kernel_module_version") or "?"
    n = len(gpus)
    err = driver.get("nvml_error")
    if err in NO_DRIVER_ERRORS:
        return f"host {facts.get('hostname') or '?'}: no NVIDIA GPU (NVML: {err})"
    return (
        f"host {facts.get('hostname') or '?'}: driver {version}, CUDA {driver.get('cuda') or '?'}, "
        f"{n} GPU{'' if n == 1 else 's'}"
    )


def render(doc: dict[str, Any]) -> str:
    """The human report: one table of findings, then the next steps, then the verdict."""
    findings = doc["findings"]
    rows: list[tuple[str, ...]] = [(f["status"], f["check"], f["detail"]) for f in findings]
    lines = [summary_line(doc), "", console.table(rows, header=("status", "check", "detail"))]
    steps = [f for f in findings if f.get("next_step") and f["status"] != "ok"]
    if steps:
        lines += ["", "next steps:"]
        lines += [f"  {f['check']}: {f['next_step']}" for f in steps]
    problems = sum(1 for f in findings if f["status"] == "problem")
    verdict = (
        "verdict: healthy"
        if not problems
        else f"verdict: {problems} problem{'' if problems == 1 else 's'} found"
    )
    if (doc.get("driver") or {}).get("nvml_error") in NO_DRIVER_ERRORS:
        verdict = f"verdict: no NVIDIA GPU here ({problems} problem{'' if problems == 1 else 's'})"
    lines += ["", verdict]
    return "\n".join(lines)


@click.command(
    "doctor",
    epilog=help_epilog(
        ["envbuild doctor", "envbuild doctor --json > host.json"],
        [(0, "healthy"), (1, "problems found"), (2, "cannot probe (no NVIDIA driver)")],
    ),
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the host facts + findings.")
@host_facts("Check")
def command(as_json: bool, facts_file: Path | None) -> None:
    """Check this GPU host: driver and NVML, GPUs (ECC, remapped rows, persistence), the
    container engine's NVIDIA runtime or CDI specs, /dev/shm, and which locks in reach
    (./envbuild.lock, images/*/envbuild.lock) would run here.

    The JSON object (--json) is also what `envbuild validate --hosts FILE` reads. Set
    ENVBUILD_HOST_FACTS=FILE to check a recorded host instead of this one.
    """
    from envbuild.app import doctor

    result = doctor.doctor(facts_file=facts_file, matrix_overlay=matrix_overlay())
    doc = result.to_json()
    if as_json:
        console.emit_json(doc)
    else:
        console.line(render(doc))
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)
