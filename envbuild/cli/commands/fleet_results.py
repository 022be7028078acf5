"""`envbuild fleet results`: a fleet run's verdicts read back, per node and GPU class.
Registered in the `fleet` group (envbuild/cli/commands/fleet.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from envbuild.cli import console
from envbuild.cli.options import help_epilog

SHOWN = {
    "passed": "passed",
    "failed": "FAILED",
    "never_scheduled": "never scheduled",
    "never_started": "never started",
    "evicted": "evicted",
    "pending": "pending",
}


def render(doc: dict[str, Any]) -> str:
    """A line per GPU class (how many nodes passed, failed, ...), then every node that did not
    pass: what it said and the one fix."""
    rows: list[tuple[str, ...]] = []
    for cls, counts in doc["classes"].items():
        total = sum(counts.values())
        rest = ", ".join(f"{n} {SHOWN[s]}" for s, n in counts.items() if s != "passed")
        rows.append((cls, f"{counts.get('passed', 0)}/{total} passed", rest))
    lines = [
        f"fleet run {doc['run']} ({doc['source']}): {len(doc['nodes'])} node(s)",
        "",
        console.table(rows, header=("gpu class", "passed", "not passed")),
    ]
    for n in doc["nodes"]:
        if n["status"] == "passed":
            continue
        where = n["node"] or f"{n.get('job', '?')} (no node)"
        head = f"{where} [{n['gpu_class']}]: {SHOWN[n['status']]}"
        lines += ["", head + (f": {n['check']}" if n.get("check") else "")]
        if n.get("detail"):
            lines.append(f"  {n['detail']}")
        if n.get("fix"):
            lines.append(f"  fix: {n['fix']}")
    return "\n".join(lines)


@click.command(
    "results",
    epilog=help_epilog(
        [
            "envbuild fleet results --slurm /shared/envbuild/envbuild-smoke-torch-train-3f2a9c1b7d4e-1234",
            "kubectl get jobs,pods -l envbuild.run=RUN -o json > run.json && "
            "envbuild fleet results --k8s run.json --junit fleet.xml",
            "envbuild fleet results --run RUN --json",
        ],
        [(0, "every node passed"), (1, "a node failed or did not run"), (2, "bad input")],
    ),
)
@click.option(
    "--slurm",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    metavar="RUN_FOLDER",
    help="A Slurm run folder (the job's output names it).",
)
@click.option(
    "--k8s",
    "k8s_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    metavar="FILE",
    help="`kubectl get jobs,pods -l envbuild.run=RUN -o json` output.",
)
@click.option("--run", help="A Kubernetes run id: read the cluster kubectl reaches.")
@click.option(
    "--nodes",
    "nodes_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="With --k8s: `kubectl get nodes -o json` output, to name the label that excluded them.",
)
@click.option(
    "--sacct",
    "sacct_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="With --slurm: `sacct -j JOB -n -P -o JobID,NodeList,State,ExitCode` output.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.option(
    "--junit",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write JUnit XML (one testcase per node) for CI.",
)
def command(
    slurm: Path | None,
    k8s_file: Path | None,
    run: str | None,
    sacct_file: Path | None,
    nodes_file: Path | None,
    as_json: bool,
    junit: Path | None,
) -> None:
    """Read a fleet smoke run back: per node and GPU class, passed, failed (the failed check
    and its fix), never scheduled (the requirement no node met), never started, evicted."""
    from envbuild.app import fleet

    view = fleet.results(
        slurm=slurm, k8s_file=k8s_file, run=run, sacct_file=sacct_file, junit=junit
    )
    doc = view.to_json()
    if as_json:
        console.emit_json(doc)
    else:
        console.line(render(doc))
    if not view.ok:
        raise click.exceptions.Exit(1)
