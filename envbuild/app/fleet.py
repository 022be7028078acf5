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

from envbuild import matrix as matrix_data
from envbuild.app import inputs
from envbuild.core import resources
from envbuild.core.documents import DocumentError, json_loads
from envbuild.core.errors import EnvbuildError, UserError
from envbuild.core.fsio import read_input, write_output
from envbuild.core.models import Lock
from envbuild.host.probe import host_from_facts, load_facts_file
from envbuild.lock.format import lock_sha256, read_lock_text
from envbuild.preflight import fleet_run, reports
from envbuild.preflight import k8s as k8s_rules
from envbuild.preflight import slurm as slurm_rules
from envbuild.preflight.fleet_run import FleetRun, SlurmFolder
from envbuild.preflight.validate import Check, gpu_cc_of
from envbuild.resolver import parse_gpu
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
    if not write_output(output, text, what="the sbatch script"):  # "" for a regular file
        output.chmod(0o755)
    return SlurmScript(path=output, run_name=name, shared=shared, text=text)


# --- Kubernetes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class K8sJobs:
    path: Path
    run: str
    jobs: tuple[tuple[str, str, int], ...]
    """(Job name, GPU class, nodes) of every Job written."""
    excluded: tuple[tuple[str, str], ...]
    """(GPU class, why) of the classes the lock cannot run on: no Job."""
    select: str

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "manifest": str(self.path),
            "run": self.run,
            "select": self.select,
            "selector": f"{fleet_run.RUN_LABEL}={self.run}",
            "jobs": [{"job": j, "gpu_class": c, "nodes": n} for j, c, n in self.jobs],
            "excluded": [{"gpu_class": c, "reason": r} for c, r in self.excluded],
        }


def _classes_of_hosts(
    hosts_file: Path, gpus_per_node: int | None, matrix_overlay: Path | None
) -> list[k8s_rules.GpuClass]:
    """One class per GPU product of the recorded hosts, with how many hosts have it."""
    gpu_cc = gpu_cc_of(matrix_data.load_matrix_from(matrix_overlay))
    found: dict[tuple[str, str], list[int]] = {}
    for facts in load_facts_file(hosts_file):
        host = host_from_facts(facts, gpu_cc=gpu_cc)
        if host.gpus:
            found.setdefault((host.gpus[0].name, host.gpus[0].cc), []).append(len(host.gpus))
    if not found:
        raise UserError(f"no host in {hosts_file} records a GPU: no GPU class to test")
    return [
        k8s_rules.GpuClass(
            name=name, cc=cc, product=name, nodes=len(counts), gpus=gpus_per_node or min(counts)
        )
        for (name, cc), counts in sorted(found.items())
    ]


def _classes_of_lock(
    lock: Lock, nodes: int, gpus_per_node: int | None, matrix_overlay: Path | None
) -> list[k8s_rules.GpuClass]:
    """One class per target GPU of the lock (selected by compute capability)."""
    if not lock.targets.gpus:
        raise UserError(
            "the lock names no target GPUs: no GPU class to test",
            hint="pass --hosts FILE (envbuild doctor --json of the nodes), or lock with "
            "targets.gpus",
        )
    matrix = matrix_data.load_matrix_from(matrix_overlay)
    by_cc: dict[str, str] = {}
    for gpu in lock.targets.gpus:
        by_cc.setdefault(parse_gpu(matrix, gpu).cc, gpu)
    return [
        k8s_rules.GpuClass(name=name, cc=cc, nodes=nodes, gpus=gpus_per_node or 1)
        for cc, name in sorted(by_cc.items())
    ]


def k8s_jobs(
    *,
    lock_dir: Path,
    image: str,
    output: Path,
    hosts_file: Path | None = None,
    run_id: str | None = None,
    select: k8s_rules.Select = "labels",
    nodes_per_class: int = 1,
    gpus_per_node: int | None = None,
    matrix_overlay: Path | None = None,
) -> K8sJobs:
    """`envbuild fleet k8s`: one Job per GPU class (of the hosts, else of the lock's targets)
    that smoke-tests `image` on nodes chosen by what the lock needs; written to `output`."""
    lock, sha = _lock_of(lock_dir)
    if not lock.is_gpu:
        raise UserError(
            f"{lock_dir} is a CPU lock: there is no GPU class to schedule it by",
            hint="run it on any node with `kubectl run`, or on Slurm with envbuild fleet slurm",
        )
    classes = (
        _classes_of_hosts(hosts_file, gpus_per_node, matrix_overlay)
        if hosts_file is not None
        else _classes_of_lock(lock, nodes_per_class, gpus_per_node, matrix_overlay)
    )
    name = lock.name or lock_dir.name
    run = k8s_rules.label_value(run_id or f"{name}-{sha[:12]}")
    smoke = smoke_container(image, limits_for(lock.smoke), allow_cpu=False, attach=None, environ={})
    spec = k8s_rules.JobSpec(smoke=smoke, run=run, lock_sha256=sha, lock_name=name, select=select)
    docs, excluded = k8s_rules.fleet_documents(lock, spec, classes)
    if not docs:
        why = "; ".join(f"{p.gpu_class.name}: {p.excluded}" for p in excluded)
        raise UserError(f"the lock runs on none of the GPU classes: {why}", hint="re-lock for them")
    write_output(output, reports.to_yaml_documents(docs), what="the Jobs manifest")
    jobs = tuple(
        (
            d["metadata"]["name"],
            d["metadata"]["labels"][fleet_run.CLASS_LABEL],
            int(d["spec"]["completions"]),
        )
        for d in docs
        if d["kind"] == "Job"
    )
    return K8sJobs(
        path=output,
        run=run,
        jobs=jobs,
        excluded=tuple((p.gpu_class.name, p.excluded) for p in excluded),
        select=select,
    )


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
    nodes_file: Path | None = None,
    junit: Path | None = None,
) -> FleetRun:
    """`envbuild fleet results`: the fleet view of a Slurm run folder, of `kubectl get
    jobs,pods -o json` output in a file, or of the cluster kubectl reaches (run = the run id).
    With `junit`, JUnit XML is written whatever happens."""
    try:
        view = _results(slurm, k8s_file, run, sacct_file, nodes_file)
    except EnvbuildError as err:
        if junit is not None:
            check = Check("error", "fail", err.message, err.hint)
            write_output(junit, reports.junit_xml([("envbuild.fleet", (check,))]), what="--junit")
        raise
    if junit is not None:
        write_output(junit, reports.junit_xml(view.junit_suites()), what="--junit")
    return view


def _results(
    slurm: Path | None,
    k8s_file: Path | None,
    run: str | None,
    sacct_file: Path | None,
    nodes_file: Path | None,
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
    if k8s_file is not None:
        doc = _json_file(k8s_file, "--k8s")
        nodes = _json_file(nodes_file, "--nodes") if nodes_file is not None else None
        return fleet_run.k8s_results(doc, _items(nodes))
    assert run is not None
    listed = _kubectl(["get", "jobs,pods", "-l", f"{fleet_run.RUN_LABEL}={run}", "-o", "json"])
    if listed is None:
        raise UserError(
            f"kubectl could not list the Jobs and Pods of run {run}",
            hint="check `kubectl get jobs -l envbuild.run=RUN` (context, namespace); or save "
            "its -o json output and pass --k8s FILE",
        )
    return fleet_run.k8s_results(listed, _items(_kubectl(["get", "nodes", "-o", "json"])))


def _items(doc: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    if doc is None:
        return None
    return [i for i in doc.get("items") or [] if isinstance(i, dict)]


def _json_file(path: Path, what: str) -> dict[str, Any]:
    text = read_input(path, what=what, limit=1 << 30).decode("utf-8", "replace")
    try:
        doc = json_loads(text)
    except DocumentError as exc:
        raise UserError(
            f"{what} {path} is not JSON: {exc}", hint="write it with kubectl ... -o json"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise UserError(
            f"{what} {path} is not a Kubernetes List (no items)",
            hint="kubectl get jobs,pods -l envbuild.run=RUN -o json > FILE",
        )
    return doc


def _kubectl(args: list[str]) -> dict[str, Any] | None:
    """kubectl's JSON answer, or None where kubectl is missing or says no."""
    if shutil.which("kubectl") is None:
        return None
    try:
        done = subprocess.run(
            ["kubectl", *args], capture_output=True, text=True, timeout=120, check=False
        )
        doc = json_loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, DocumentError):
        return None
    return doc if isinstance(doc, dict) else None
