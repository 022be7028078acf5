"""`envbuild fleet k8s`: Kubernetes Jobs, one per GPU class, scheduled by what the lock needs.
Registered in the `fleet` group (envbuild/cli/commands/fleet.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from envbuild.cli import console
from envbuild.cli.options import help_epilog, image_lock, matrix_overlay


def render(doc: dict[str, Any]) -> str:
    lines = [
        f"wrote {len(doc['jobs'])} Job(s) to {doc['manifest']} (run {doc['run']}, "
        f"nodes chosen by {'DRA ResourceClaims' if doc['select'] == 'dra' else 'GFD labels'}):"
    ]
    lines += [f"  {j['job']}: {j['nodes']} node(s) of {j['gpu_class']}" for j in doc["jobs"]]
    lines += [f"  no Job for {e['gpu_class']}: {e['reason']}" for e in doc["excluded"]]
    lines += [
        f"kubectl apply -f {doc['manifest']}; then: envbuild fleet results --run {doc['run']}"
    ]
    return "\n".join(lines)


@click.command(
    "k8s",
    epilog=help_epilog(
        [
            "envbuild fleet k8s --lock images/torch-train --image REF@sha256:... "
            "--hosts fleet.jsonl -o jobs.yaml",
            "envbuild fleet k8s --lock images/torch-train --image REF@sha256:... --select dra "
            "--nodes-per-class 4 --run-id ci-1234 -o jobs.yaml",
        ],
        [(0, "written"), (2, "bad input")],
    ),
)
@image_lock
@click.option("--image", required=True, help="The image to test, by digest: REF@sha256:...")
@click.option(
    "--hosts",
    "hosts_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Host facts of the fleet (doctor --json): one Job per GPU product, a pod per host "
    "[the lock's target GPUs].",
)
@click.option(
    "--select",
    type=click.Choice(["labels", "dra"]),
    default="labels",
    show_default=True,
    help="How nodes are chosen: node affinity on GPU Feature Discovery labels, or a DRA "
    "ResourceClaim with a CEL selector.",
)
@click.option("--run-id", help="The envbuild.run label of the run [<lock name>-<sha256[:12]>].")
@click.option(
    "--nodes-per-class",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Without --hosts: nodes to test per GPU class.",
)
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="GPUs per pod.")
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the manifests (multi-document YAML).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def command(
    lock_dir: Path,
    image: str,
    hosts_file: Path | None,
    select: str,
    run_id: str | None,
    nodes_per_class: int,
    gpus_per_node: int | None,
    output: Path,
    as_json: bool,
) -> None:
    """Write one Job per GPU class that smoke-tests IMAGE on the nodes whose driver, compute
    capability and CPU architecture the lock runs on; each pod's verdict is its termination
    message, read back by `envbuild fleet results`."""
    from envbuild.app import fleet

    result = fleet.k8s_jobs(
        lock_dir=lock_dir,
        image=image,
        output=output,
        hosts_file=hosts_file,
        run_id=run_id,
        select="dra" if select == "dra" else "labels",
        nodes_per_class=nodes_per_class,
        gpus_per_node=gpus_per_node,
        matrix_overlay=matrix_overlay(),
    )
    doc = result.to_json()
    if as_json:
        console.emit_json(doc)
    else:
        console.line(render(doc))
