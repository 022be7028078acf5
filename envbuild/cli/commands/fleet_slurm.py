"""`envbuild fleet slurm`: the sbatch script of one smoke run over a partition or node list.
Registered in the `fleet` group (envbuild/cli/commands/fleet.py)."""

from __future__ import annotations

from pathlib import Path

import click

from envbuild.cli import console
from envbuild.cli.options import help_epilog, image_lock


@click.command(
    "slurm",
    epilog=help_epilog(
        [
            "envbuild fleet slurm --lock images/torch-train --image REF@sha256:... "
            "--partition gpu --shared /shared/envbuild -o smoke.sbatch && sbatch smoke.sbatch",
            "envbuild fleet slurm --lock images/torch-train --image envbuild/torch-train:TAG "
            "--archive /shared/torch-train.tar --nodelist 'gpu[01-16]' --shared /shared/envbuild "
            "-o smoke.sbatch",
        ],
        [(0, "written"), (2, "bad input")],
    ),
)
@image_lock
@click.option("--image", required=True, help="The image to test: REF@sha256:... (or a tag).")
@click.option(
    "--shared",
    required=True,
    help="A folder every node mounts at the same path: the run folder is made in it.",
)
@click.option(
    "--archive",
    default="",
    help="An `envbuild image --save` archive on shared storage, imported instead of pulling.",
)
@click.option("--partition", default="", help="The partition to test.")
@click.option("--nodelist", default="", help="The nodes to test (a Slurm host list).")
@click.option("--nodes", type=click.IntRange(min=1), help="How many nodes [the whole list].")
@click.option("--account", default="", help="The Slurm account to charge.")
@click.option(
    "--gpus-per-node", type=click.IntRange(min=1), help="GPUs per node for a GPU image [1]."
)
@click.option(
    "--allow-cpu", is_flag=True, help="Smoke a GPU image on the CPU path (CPU-only nodes)."
)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the script.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def command(
    lock_dir: Path,
    image: str,
    shared: str,
    archive: str,
    partition: str,
    nodelist: str,
    nodes: int | None,
    account: str,
    gpus_per_node: int | None,
    allow_cpu: bool,
    output: Path,
    as_json: bool,
) -> None:
    """Write an sbatch script that imports IMAGE once to shared storage and runs its smoke
    payload on every node of the allocation (pyxis, else Apptainer, else the node's Docker or
    Podman); each node leaves its verdict in the run folder for `envbuild fleet results`."""
    from envbuild.app import fleet

    script = fleet.slurm_script(
        lock_dir=lock_dir,
        image=image,
        shared=shared,
        output=output,
        archive=archive,
        partition=partition,
        nodelist=nodelist,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        allow_cpu=allow_cpu,
        account=account,
    )
    doc = script.to_json()
    if as_json:
        console.emit_json(doc)
        return
    console.line(
        f"wrote {doc['script']}: sbatch {doc['script']}; each node's verdict lands in "
        f"{doc['run_folder']}; read back: envbuild fleet results --slurm RUN_FOLDER"
    )
