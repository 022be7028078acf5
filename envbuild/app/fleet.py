"""The `envbuild fleet` use cases: write what runs the image's smoke test on every node of a
fleet (an sbatch script for Slurm, Jobs for Kubernetes) and read the verdicts back into one
view. The decisions are `envbuild.preflight.slurm`, `envbuild.preflight.k8s` and
`envbuild.preflight.fleet_run`'s; this module reads and writes the files.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuild.app import inputs
from envbuild.core import resources
from envbuild.core.documents import DocumentError, json_loads
from envbuild.core.errors import EnvbuildError, UserError
from envbuild.core.fsio import read_input, write_atomic
from envbuild.core.models import Lock
from envbuild.lock.format import lock_sha256, read_lock_text
from envbuild.preflight import fleet_run, reports
from envbuild.preflight import slurm as slurm_rules
from envbuild.preflight.fleet_run import FleetRun, SlurmFolder
from envbuild.preflight.validate import Check
from envbuild.smoke.container import limits_for, smoke_container

SLURM_BODY = "slurm/smoke.sbatch.sh"
VERDICT_READ_LIMIT = 64 * 1024
"""A verdict is at most 4 KiB; a larger file is not one (read no more)."""
TAIL_BYTES = 2048


@dataclass(frozen=True)
class SlurmScript:
    path: Path
    run_name: str
    shared: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "script": str(self.path),
            "run_name": self.run_name,
            "run_folder": f"{self.shared.rstrip('/')}/{self.run_name}-$SLURM_JOB_ID",
        }


def _lock_of(lock_dir: Path) -> tuple[Lock, str]:
    """The folder's lock and its sha256 (the `envbuild.lock.sha256` label of its images)."""
    _label, lock = inputs.read_lock_dir(lock_dir)
    text = read_lock_text(lock_dir)
    assert text is not None  # read_lock_dir refuses a folder without one
    return lock, lock_sha256(text)


def slurm_script(
    *,
    lock_dir: Path,
    image: str,
    shared: str,
    output: Path,
    archive: str = "",
    partition: str = "",
    nodelist: str = "",
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    allow_cpu: bool = False,
    account: str = "",
) -> SlurmScript:
    """`envbuild fleet slurm`: the sbatch script that smoke-tests `image` (built from
    `lock_dir`) once on every node of the allocation, written to `output`."""
    if not partition and not nodelist:
        raise UserError(
            "fleet slurm needs the nodes: --partition NAME or --nodelist LIST",
            hint="envbuild fleet slurm --lock images/torch-train --image REF@sha256:... "
            "--partition gpu --shared /shared/envbuild -o smoke.sbatch",
        )
    lock, sha = _lock_of(lock_dir)
    gpus = 0 if not lock.is_gpu or allow_cpu else (gpus_per_node or 1)
    smoke = smoke_container(
        image, limits_for(lock.smoke), allow_cpu=allow_cpu, attach=None, environ={}
    )
    name = slurm_rules.run_name(lock.name or lock_dir.name, sha)
    run = slurm_rules.SlurmRun(
        smoke=smoke,
        run_name=name,
        lock_sha256=sha,
        shared=shared,
        archive=archive,
        partition=partition,
        nodelist=nodelist,
        nodes=nodes,
        gpus_per_node=gpus,
        gpu_class=", ".join(sorted({g for g in lock.targets.gpus})) if gpus else "cpu",
        account=account,
    )
    body = (resources.templates_dir() / SLURM_BODY).read_text(encoding="utf-8")
    text = slurm_rules.sbatch_script(run, body)
    write_atomic(output, text)
    output.chmod(0o755)
    return SlurmScript(path=output, run_name=name, shared=shared, text=text)


# --- read back -----------------------------------------------------------------------------------


def _small(path: Path, limit: int = VERDICT_READ_LIMIT) -> str:
    try:
        return read_input(path, what="a run file", limit=limit).decode("utf-8", "replace")
    except (FileNotFoundError, UserError):
        return ""


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return " | ".join(line for line in text.strip().splitlines()[-3:] if line.strip())


def read_slurm_folder(run_dir: Path, sacct_text: str | None = None) -> SlurmFolder:
    """The files a Slurm run left in its folder (templates/slurm/smoke.sbatch.sh)."""
    if not (run_dir / "nodes.txt").is_file():
        raise UserError(
            f"{run_dir} is not an envbuild Slurm run folder (no nodes.txt)",
            hint="give the folder the job printed (`envbuild: run folder ...` in its output "
            "file); a job still PENDING has not made it yet (squeue)",
        )
    run_text = _small(run_dir / "run.json")
    try:
        run = json_loads(run_text) if run_text else {}
    except DocumentError:
        run = {}
    nodes = [n.strip() for n in _small(run_dir / "nodes.txt").splitlines() if n.strip()]
    verdicts = {p.stem: _small(p) for p in sorted((run_dir / "verdicts").glob("*.json"))}
    logs = run_dir / "logs"
    codes = {p.stem: _small(p, 64) for p in sorted(logs.glob("*.rc"))}
    tails = {n: _tail(logs / f"{n}.err") for n in codes if n not in verdicts}
    if sacct_text is None:
        sacct_text = _sacct(str(run.get("job_id") or "")) if isinstance(run, dict) else None
    sacct = fleet_run.parse_sacct(sacct_text) if sacct_text else None
    return SlurmFolder(
        run=run if isinstance(run, dict) else {},
        nodes=nodes,
        verdicts=verdicts,
        exit_codes=codes,
        err_tails=tails,
        sacct=sacct,
    )


def _sacct(job_id: str) -> str | None:
    """`sacct` of the job where Slurm keeps accounting (None where it does not answer)."""
    if not job_id or shutil.which("sacct") is None:
        return None
    try:
        done = subprocess.run(
            ["sacct", "-j", job_id, "-n", "-P", "-o", "JobID,NodeList,State,ExitCode"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def results(
    *,
    slurm: Path | None = None,
    k8s_file: Path | None = None,
    run: str | None = None,
    sacct_file: Path | None = None,
    junit: Path | None = None,
) -> FleetRun:
    """`envbuild fleet results`: the fleet view of a Slurm run folder, of `kubectl get
    jobs,pods -o json` output in a file, or of the cluster kubectl reaches (run = the run id).
    With `junit`, JUnit XML is written whatever happens."""
    try:
        view = _results(slurm, k8s_file, run, sacct_file)
    except EnvbuildError as err:
        if junit is not None:
            check = Check("error", "fail", err.message, err.hint)
            write_atomic(junit, reports.junit_xml([("envbuild.fleet", (check,))]))
        raise
    if junit is not None:
        write_atomic(junit, reports.junit_xml(view.junit_suites()))
    return view


def _results(
    slurm: Path | None, k8s_file: Path | None, run: str | None, sacct_file: Path | None
) -> FleetRun:
    given = [x for x in (slurm, k8s_file, run) if x is not None]
    if len(given) != 1:
        raise UserError(
            "fleet results reads one run: --slurm RUN_FOLDER, --k8s FILE or --run RUN_ID",
            hint="envbuild fleet results --slurm /shared/envbuild/envbuild-smoke-x-1234",
        )
    if slurm is not None:
        sacct = None
        if sacct_file is not None:
            sacct = read_input(sacct_file, what="--sacct").decode("utf-8", "replace")
        return fleet_run.slurm_results(read_slurm_folder(slurm, sacct))
    raise UserError("Kubernetes read-back is not available in this build")
