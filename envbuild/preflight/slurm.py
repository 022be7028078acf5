"""The sbatch script of `envbuild fleet slurm` (pure): the `#SBATCH` lines and the settings of
one smoke run over a partition or node list, in front of the fixed body
`templates/slurm/smoke.sbatch.sh` (the import once to shared storage, one `srun` task per node,
one verdict per node; the body says how).

Every value is written shell-quoted (`shlex.quote`), so an image reference or a folder name can
never become shell code; the script is deterministic (no clock, no random run id: the run
folder is named after the lock and `$SLURM_JOB_ID` at run time).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass

from envbuild.core.errors import UserError
from envbuild.smoke.container import SmokeContainer

IMPORT_MARGIN_S = 900
"""Added to the smoke's kill time in `--time`: the import (a registry pull, an enroot or
Apptainer conversion of a multi-GB image) and the queue of srun steps."""

# Slurm's node names and partition names: hostnames and hostlist expressions (node[01-16,20]).
_NODE_LIST = re.compile(r"[A-Za-z0-9._\-\[\],]+")


@dataclass(frozen=True)
class SlurmRun:
    """What one sbatch script smoke-tests, and where."""

    smoke: SmokeContainer
    run_name: str
    """The run folder's name before `-$SLURM_JOB_ID` (`<lock name>-<lock sha256[:12]>`)."""
    lock_sha256: str
    shared: str
    """A folder every node sees (the run folder is made in it)."""
    archive: str = ""
    """A `envbuild image --save` archive on shared storage, instead of pulling `smoke.image`."""
    partition: str = ""
    nodelist: str = ""
    nodes: int | None = None
    gpus_per_node: int = 0
    gpu_class: str = ""
    """What the nodes are expected to hold ("NVIDIA H100 80GB HBM3", or "cpu")."""
    account: str = ""


def run_name(lock_name: str, lock_sha256: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", lock_name.lower()).strip("-") or "image"
    return f"envbuild-smoke-{slug}-{lock_sha256[:12]}"


def check_run(run: SlurmRun) -> None:
    """UserError for what sbatch would refuse or misread: a node list or partition that is not
    a Slurm name, a relative shared folder (nodes do not share the submitter's cwd)."""
    for what, value in (("--partition", run.partition), ("--nodelist", run.nodelist)):
        if value and not _NODE_LIST.fullmatch(value):
            raise UserError(
                f"{what} {value!r} is not a Slurm name or host list",
                hint="as `sinfo` shows them: a partition name, or nodes like gpu[01-16]",
            )
    if not run.shared.startswith("/"):
        raise UserError(
            f"--shared {run.shared} is not an absolute path",
            hint="give a folder every node mounts at the same path (/shared/envbuild, $HOME/...)",
        )
    if re.search(r"[\s'\"\\]", run.shared) or re.search(r"[\s'\"\\]", run.account):
        raise UserError(
            f"--shared {run.shared!r} / --account {run.account!r}: no spaces or quotes",
            hint="sbatch reads #SBATCH lines word by word; use a folder without spaces",
        )
    if run.archive and not run.archive.startswith("/"):
        raise UserError(f"--archive {run.archive} is not an absolute path on shared storage")


def sbatch_lines(run: SlurmRun) -> list[str]:
    """The #SBATCH directives: one task per node on whole nodes, and a time limit of the
    smoke's kill time plus the import."""
    minutes = math.ceil((run.smoke.limits.kill_after_s + IMPORT_MARGIN_S) / 60)
    lines = [
        f"--job-name={run.run_name[:64]}",
        "--ntasks-per-node=1",
        "--exclusive",
        f"--time={minutes}",
        f"--output={run.shared.rstrip('/')}/{run.run_name}-%j.out",
    ]
    if run.partition:
        lines.append(f"--partition={run.partition}")
    if run.nodelist:
        lines.append(f"--nodelist={run.nodelist}")
    if run.nodes:
        lines.append(f"--nodes={run.nodes}")
    if run.account:
        lines.append(f"--account={run.account}")
    if run.gpus_per_node:
        lines.append(f"--gpus-per-node={run.gpus_per_node}")
    # sbatch reads these lines itself, not a shell: values are checked words (`check_run`).
    return [f"#SBATCH {line}" for line in lines]


def sbatch_script(run: SlurmRun, body: str) -> str:
    """The whole script: shebang, #SBATCH lines, the settings, then `body`."""
    check_run(run)
    settings = {
        "ENVBUILD_SHARED": run.shared.rstrip("/") or "/",
        "ENVBUILD_IMAGE": run.smoke.image,
        "ENVBUILD_ARCHIVE": run.archive,
        "ENVBUILD_RUN_NAME": run.run_name,
        "ENVBUILD_LOCK_SHA256": run.lock_sha256,
        "ENVBUILD_GPU_CLASS": run.gpu_class,
        "ENVBUILD_SHM_MIB": str(run.smoke.shm_mib),
        "ENVBUILD_KILL_AFTER": str(run.smoke.limits.kill_after_s),
        "ENVBUILD_GPUS": str(run.gpus_per_node),
        # Word-split by the body on purpose: the payload's argv has no spaces in its words.
        "ENVBUILD_PAYLOAD": " ".join((*run.smoke.command, "--verdict", "-")),
    }
    for key, value in settings.items():
        if "\n" in value or (key == "ENVBUILD_PAYLOAD" and "'" in value):
            raise UserError(f"{key} cannot hold {value!r}")
    lines = [
        "#!/bin/bash",
        *sbatch_lines(run),
        f"# Written by `envbuild fleet slurm` for lock sha256 {run.lock_sha256}; submit it",
        "# with `sbatch FILE`. The settings:",
        *(f"{key}={shlex.quote(value)}" for key, value in settings.items()),
        "ENVBUILD_WAY=${ENVBUILD_WAY:-auto}",
        "",
    ]
    return "\n".join(lines) + body
