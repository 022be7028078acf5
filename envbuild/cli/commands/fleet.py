"""`envbuild fleet`: smoke-test an image on every node of a fleet (Slurm or Kubernetes) and read
the verdicts back. Subcommands are imported only when they run (`envbuild.cli.lazy`)."""

from __future__ import annotations

import click

from envbuild.cli.lazy import CommandTable, LazyGroup
from envbuild.cli.options import help_epilog

SUBCOMMANDS: CommandTable = {
    "slurm": (
        "envbuild.cli.commands.fleet_slurm",
        "Write an sbatch script that smoke-tests an image on every node of a partition.",
    ),
    "k8s": (
        "envbuild.cli.commands.fleet_k8s",
        "Write Kubernetes Jobs, one per GPU class, that smoke-test an image.",
    ),
    "results": (
        "envbuild.cli.commands.fleet_results",
        "Read a fleet run's verdicts back: per node and GPU class.",
    ),
}


@click.group(
    "fleet",
    cls=LazyGroup,
    table=SUBCOMMANDS,
    epilog=help_epilog(
        [
            "envbuild fleet slurm --lock images/torch-train --image REF@sha256:... "
            "--partition gpu --shared /shared/envbuild -o smoke.sbatch",
            "envbuild fleet results --slurm /shared/envbuild/envbuild-smoke-torch-train-3f2a9c1b7d4e-1234",
        ],
        [(0, "ok"), (1, "a node failed or did not run"), (2, "bad input")],
    ),
)
def command() -> None:
    """Run the image's smoke test on a fleet (Slurm, Kubernetes) and read the verdicts back."""
