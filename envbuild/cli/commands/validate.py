"""`envbuild validate`: will this image or lock run here (pre-flight + smoke), or on a fleet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from envbuild.cli import console
from envbuild.cli.options import (
    gpu_choice,
    help_epilog,
    host_facts,
    matrix_overlay,
    public_keys,
    report_page,
)
from envbuild.core.errors import UserError
from envbuild.host.gpu_attach import GpuChoice

CELL = {"runs": "yes", "runs_minor_compat": "yes (minor compat)"}


def verdict_lines(verdict: dict[str, Any], indent: str = "") -> list[str]:
    """A verdict as people read it: what decided it, then the one fix or what minor-version
    compatibility gives up, then the notes. `verdict`: validate's "verdict" object, or a fleet
    result (its outcome under "verdict")."""
    label = {
        "runs": "runs",
        "runs_minor_compat": "runs relying on minor-version compatibility",
        "does_not_run": "does not run",
    }[verdict.get("outcome") or verdict["verdict"]]
    lines = [f"{indent}{label}: {verdict['reason']}" if verdict.get("reason") else indent + label]
    if verdict.get("fix"):
        lines.append(f"{indent}  fix: {verdict['fix']}")
    if verdict.get("gives_up"):
        lines.append(f"{indent}  gives up: {verdict['gives_up']}")
    lines += [f"{indent}  note: {n}" for n in verdict.get("notes", [])]
    return lines


def render_checks(doc: dict[str, Any]) -> str:
    rows: list[tuple[str, ...]] = [(c["status"], c["check"], c["detail"]) for c in doc["checks"]]
    lines = [
        f"validate {doc['target']} on {doc['host'] or 'this host'}",
        "",
        console.table(rows, header=("status", "check", "detail")),
        "",
    ]
    first, *rest = verdict_lines(doc["verdict"])
    return "\n".join([*lines, "verdict: " + first, *rest])


def render_fleet(doc: dict[str, Any]) -> str:
    """Locks down, hosts across; each cell "yes", "yes (minor compat)" or "no: <first failed
    check>"; then, per lock and host that is not a plain yes, the verdict with its one fix."""
    cells = {(r["lock"], r["host"]): r for r in doc["results"]}
    rows = []
    for lock in doc["locks"]:
        row = [lock]
        for host in doc["hosts"]:
            r = cells[(lock, host)]
            row.append(CELL.get(r["verdict"]) or "no: " + r["failed"][0]["check"])
        rows.append(tuple(row))
    lines = [console.table(rows, header=("lock", *doc["hosts"]))]
    for r in doc["results"]:
        if r["verdict"] == "runs" and not r.get("notes"):
            continue
        lines += ["", f"{r['lock']} on {r['host']}:"]
        lines += verdict_lines(r, indent="  ")
    for host, m in sorted((doc.get("memory_fit") or {}).items()):
        if m.get("fits") is False:
            lines.append(
                f"memory: {host}'s {m['gpu']} ({m['memory_gib']:g} GiB) cannot hold the smoke "
                f"report's peak (needs {m['need_gib']:g} GiB): try bf16 autocast, gradient "
                "accumulation, activation checkpointing"
            )
    if doc.get("k8s_job"):
        nodes = ", ".join(j["node"] for j in doc.get("k8s_jobs", []))
        n = len(doc.get("k8s_jobs", []))
        lines += [
            "",
            f"wrote {n} Kubernetes Job{'' if n == 1 else 's'} to {doc['k8s_job']}, each pinned "
            f"to one host that passed ({nodes}): kubectl apply -f {doc['k8s_job']}",
        ]
    return "\n".join(lines)


@click.command(
    "validate",
    epilog=help_epilog(
        [
            "envbuild validate images/torch-train",
            "envbuild validate envbuild/torch-train:3f2a9c1b7d4e --junit validate.xml",
            "envbuild validate --hosts fleet.jsonl",
            "envbuild validate --hosts fleet.jsonl --lock images/torch-train "
            "--image registry.example.com/ml/torch:1 --k8s-job job.yaml",
        ],
        [
            (0, "pass"),
            (1, "the pre-flight (or the fleet view) says no"),
            (2, "bad input"),
            (4, "engine"),
            (6, "the smoke test failed"),
        ],
    ),
)
@click.argument("target", required=False, metavar="IMAGE_OR_DIR")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.option(
    "--junit",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write JUnit XML (one testcase per check) for CI.",
)
@click.option(
    "--hosts",
    "hosts_files",
    multiple=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Fleet view: one file of host facts (doctor --json objects, a list or one a line).",
)
@click.option(
    "--lock",
    "lock_dirs",
    multiple=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="With --hosts: an image folder whose lock to check [images/*].",
)
@click.option(
    "--k8s-job",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --hosts: write a Kubernetes Job manifest that smoke-tests --image.",
)
@click.option("--image", help="With --k8s-job: the image the Job runs (built from --lock).")
@click.option(
    "--smoke-report",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="With --hosts: a smoke report JSON (smoke --json, or the image's envbuild.smoke.report "
    "label): marks hosts whose GPUs cannot hold its peak memory.",
)
@report_page
@click.option(
    "--gpus-per-pod",
    type=click.IntRange(min=1),
    help="With --k8s-job: nvidia.com/gpu per pod [the fewest GPUs of a passing host].",
)
@click.option(
    "--evidence",
    "bundles",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="An image's signed attestations (.intoto.jsonl, docs/evidence.md): a host they "
    "prove is not smoke-tested again.",
)
@public_keys(
    required=False,
    help="With --evidence: a PEM public key that may have signed them (repeatable).",
)
@click.option("--resmoke", is_flag=True, help="With --evidence: run the smoke test anyway.")
@host_facts("Validate against")
@gpu_choice
def command(
    target: str | None,
    as_json: bool,
    junit: Path | None,
    hosts_files: tuple[Path, ...],
    lock_dirs: tuple[Path, ...],
    k8s_job: Path | None,
    image: str | None,
    gpus_per_pod: int | None,
    facts_file: Path | None,
    gpu: GpuChoice,
    smoke_report: Path | None,
    report_path: Path | None,
    bundles: tuple[Path, ...],
    keys: tuple[Path, ...],
    resmoke: bool,
) -> None:
    """Check that IMAGE_OR_DIR runs on this host.

    A folder: its envbuild.lock is pre-flighted against this host (driver floor, compute
    capability vs the lock's archs, NVIDIA_REQUIRE_CUDA). An image: the lock comes from its
    `envbuild.lock` label; after a passing pre-flight its smoke payload runs here on all GPUs
    (or --gpu-devices), attached as `envbuild image` and `envbuild doctor` say (--gpu-attach).

    With --hosts FILE: which locks run on which recorded hosts, and why not, without running
    anything; --k8s-job OUT writes a Job that smoke-tests --image on the passing hosts.
    """
    if len(hosts_files) > 1:
        # Click keeps only the last of a repeated single-value option: a fleet view of one
        # host that looks like the whole fleet. Refuse it and say how to join the files.
        names = " ".join(str(f) for f in hosts_files)
        raise UserError(
            f"--hosts takes one file; got {len(hosts_files)}",
            hint=f"join them into one: `jq -s . {names} > fleet.json` (or `cat` files that hold "
            "one `envbuild doctor --json` line each), then --hosts fleet.json",
        )
    hosts_file = hosts_files[0] if hosts_files else None
    if hosts_file is not None:
        if target is not None:
            raise UserError(
                "give either IMAGE_OR_DIR (this host) or --hosts FILE (a fleet), not both",
                hint="for a fleet, name the image folders with --lock DIR",
            )
        if bundles:
            raise UserError(
                "--evidence proves an image on this host, not a fleet view",
                hint="envbuild validate IMAGE --evidence FILE --key PUB on the host itself",
            )
        if report_path is not None:
            raise UserError(
                "--report is the page of one smoke run, not of a fleet view",
                hint="drop --report (--json and --junit report the fleet view)",
            )
        _fleet(hosts_file, lock_dirs, k8s_job, image, gpus_per_pod, junit, as_json, smoke_report)
        return
    if target is None:
        raise UserError(
            "validate needs IMAGE_OR_DIR, or --hosts FILE for a fleet",
            hint="envbuild validate images/torch-train (a folder) or envbuild validate IMAGE",
        )
    if lock_dirs or k8s_job or image or gpus_per_pod or smoke_report:
        raise UserError(
            "--lock, --k8s-job, --image, --gpus-per-pod and --smoke-report belong to the "
            "fleet view",
            hint="add --hosts FILE (host facts from `envbuild doctor --json`)",
        )
    if bool(bundles) != bool(keys):
        raise UserError(
            "--evidence and --key go together",
            hint="envbuild validate IMAGE --evidence torch.intoto.jsonl --key envbuild.pub",
        )
    from envbuild.app.validate import Proof

    proof = Proof(bundles=bundles, keys=keys, resmoke=resmoke) if bundles else None
    _single(target, facts_file, junit, gpu, report_path, as_json, proof)


def _single(
    target: str,
    facts_file: Path | None,
    junit: Path | None,
    gpu: GpuChoice,
    report_path: Path | None,
    as_json: bool,
    proof: Any = None,
) -> None:
    """`validate IMAGE_OR_DIR` on this host: the checks, the memory fit, the --report page."""
    from envbuild.app import report as page
    from envbuild.app import validate
    from envbuild.core.errors import EnvbuildError

    page.check_path(report_path)
    title = f"envbuild validate {target}"
    try:
        result = validate.validate(
            target=target,
            facts_file=facts_file,
            junit=junit,
            matrix_overlay=matrix_overlay(),
            gpu_attach=gpu,
            proof=proof,
        )
    except EnvbuildError as err:
        if report_path is not None:
            page.write(report_path, title=title, ok=False, report=None, error=err.message)
        raise
    doc = result.to_json()
    doc["memory_fit"] = page.memory_fit(result.smoke_report, matrix_overlay())
    if report_path is not None:
        checks = [
            {"name": c.name, "status": c.status, "figure": c.detail, "hint": c.next_step}
            for c in result.checks
        ]
        page.write(
            report_path,
            title=title,
            ok=result.ok,
            report=result.smoke_report,
            checks=checks,
            fit=doc["memory_fit"],
        )
    if as_json:
        console.emit_json(doc)
    else:
        console.line(render_checks(doc))
        if doc["memory_fit"]:
            console.line(f"memory: {doc['memory_fit']['summary']}")
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


def _fleet(
    hosts_file: Path,
    lock_dirs: tuple[Path, ...],
    k8s_job: Path | None,
    image: str | None,
    gpus_per_pod: int | None,
    junit: Path | None,
    as_json: bool,
    smoke_report: Path | None = None,
) -> None:
    """`validate --hosts FILE`: the fleet view, printed; exit 1 when a lock does not run or a
    host's GPUs cannot hold the --smoke-report's peak memory."""
    from envbuild.app import validate

    fleet = validate.validate_fleet(
        hosts_file=hosts_file,
        lock_dirs=lock_dirs,
        k8s_job=k8s_job,
        image=image,
        gpus_per_pod=gpus_per_pod,
        junit=junit,
        matrix_overlay=matrix_overlay(),
        smoke_report=smoke_report,
    )
    doc = fleet.to_json()
    if as_json:
        console.emit_json(doc)
    else:
        console.line(render_fleet(doc))
    if not fleet.view.ok:
        raise click.exceptions.Exit(1)
