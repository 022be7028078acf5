"""The `envbuild smoke` use case, and the one smoke runner: the payload run on this host (a
subprocess) or in an image (a container), under the one timeout rule (`smoke.kill_after_s`),
its output judged by `smoke.judge`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from envbuild import matrix as matrix_data
from envbuild.app import inputs
from envbuild.core import fsio
from envbuild.core.documents import DocumentError, json_loads
from envbuild.core.errors import SmokeFailed, UserError
from envbuild.core.fsio import read_input
from envbuild.core.models import Lock
from envbuild.core.resources import payload_dir
from envbuild.engine.protocol import ContainerEngine, RunResult
from envbuild.host.gpu_attach import Attachment
from envbuild.payload.smoke_checks import REPORT_MARKER, SmokePlan
from envbuild.smoke import plan as smoke
from envbuild.smoke.container import limits_for, smoke_container


def run(
    *,
    allow_cpu: bool = False,
    plan_file: Path | None = None,
    lock_dir: Path | None = None,
    tier: int | None = None,
    python: str | None = None,
    matrix_overlay: Path | None = None,
) -> smoke.SmokeOutcome:
    """`envbuild smoke`: run the smoke payload on this host and judge its report.

    The plan comes from `plan_file` (JSON, as written into images), from the lock in
    `lock_dir` (StaleLockError when stale), or, with neither, a bare plan (framework detected,
    no version expectations, the matrix's GPU baselines). The payload runs as a subprocess of
    `python` (default: this interpreter, which must import the framework). SmokeFailed (exit 6)
    when it gives no report; a report that says no is a verdict, not an error.
    """
    if plan_file is not None and lock_dir is not None:
        raise UserError("--plan and --lock both name a plan", hint="pass one of them, not both")
    if tier is not None and tier not in (1, 2):
        raise UserError(f"--tier must be 1 or 2, not {tier}", hint="use --tier 1 or --tier 2")
    if plan_file is not None:
        plan = read_plan(plan_file)
        if allow_cpu:
            plan["allow_cpu"] = True
        if tier is not None:
            plan["tier"] = tier
            plan["min_free_mib"] = smoke.MIN_FREE_MIB[tier]
    else:
        lock = None
        if lock_dir is not None:
            _, lock = inputs.load_fresh(lock_dir, matrix_overlay=matrix_overlay)
        matrix = matrix_data.load_matrix_from(matrix_overlay)
        plan = smoke.plan(lock, allow_cpu=allow_cpu, matrix=matrix, tier=tier)
    stdout, returncode = run_on_host(plan, python=python or sys.executable)
    report = smoke.parse_report(stdout)
    verdict = smoke.evaluate(report, plan)
    return smoke.SmokeOutcome(plan=plan, report=report, verdict=verdict, returncode=returncode)


def read_plan(path: Path) -> SmokePlan:
    """A plan JSON file as written into images: a regular file of sane size, JSON of sane
    depth, the fields of the types the payload reads (UserError, exit 2, otherwise)."""
    try:
        data = json_loads(read_input(path, what="the smoke plan"))
    except FileNotFoundError:
        raise UserError(
            f"cannot read the smoke plan {path}: no such file",
            hint="pass --plan with a plan JSON (an image has it at /opt/envbuild/plan.json)",
            fields={"file": str(path)},
        ) from None
    except DocumentError as exc:
        raise UserError(
            f"the smoke plan {path} is not JSON: {exc}",
            hint="pass the plan.json envbuild wrote, or use --lock DIR instead",
            fields={"file": str(path)},
        ) from None
    problem = smoke.plan_problem(data)
    if problem:
        raise UserError(
            f"the smoke plan {path}: {problem}",
            hint="pass the plan.json envbuild wrote, or use --lock DIR instead",
            fields={"file": str(path)},
        )
    plan: SmokePlan = data  # the payload tolerates missing keys
    return plan


def run_on_host(plan: SmokePlan, *, python: str) -> tuple[str, int]:
    """Run `python <payload dir> --plan <tmp>`; (stdout, returncode). Its stderr table is
    captured and shown only when it gives no report (the CLI prints the verdict's table)."""
    timeout_s = smoke.kill_after_s(int(plan.get("timeout_s", 600)))
    fsio.remove_dead_temp()
    with tempfile.TemporaryDirectory(prefix=fsio.temp_prefix("envbuild-smoke-")) as tmp:
        plan_path = Path(tmp) / "plan.json"
        plan_path.write_text(json.dumps(plan, sort_keys=True, indent=2) + "\n", encoding="utf-8")
        command = [python, str(payload_dir()), "--plan", str(plan_path)]
        if plan.get("allow_cpu"):
            command.append("--allow-cpu")
        try:
            process = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise SmokeFailed(
                f"the smoke payload gave no verdict in {timeout_s} s and was killed",
                hint="a GPU call or collective hung: check `nvidia-smi` for stuck processes",
            ) from None
        except OSError as exc:
            raise SmokeFailed(
                f"cannot start {python}: {exc.strerror}",
                hint="run envbuild from the Python environment that has the framework",
            ) from None
    if REPORT_MARKER + " " not in process.stdout:
        tail = "\n".join(process.stderr.strip().splitlines()[-8:])
        raise SmokeFailed(
            f"the smoke payload exited {process.returncode} without a report",
            hint=f"its last output:\n{tail}" if tail else "run it by hand to see why",
            fields={"returncode": process.returncode},
        )
    return process.stdout, process.returncode


def run_in_image(
    engine: ContainerEngine, image: str, lock: Lock, *, attach: Attachment | None
) -> RunResult:
    """Run a built image's own payload and plan on this host's GPUs (validate), attached as
    `attach` says (None: no GPU)."""
    container = smoke_container(
        image, limits_for(lock.smoke), allow_cpu=False, attach=attach, environ=os.environ
    )
    return engine.run(container.run_spec())
