"""The body of the sbatch script (templates/slurm/smoke.sbatch.sh) run by bash with stand-ins
for srun, scontrol, enroot, apptainer and docker on PATH: which way it picks, what it imports
once and what runs on each node, and what each node leaves in the run folder. The Docker way
runs for real under Slurm in `make e2e` (step 5b); pyxis and Apptainer are not installed
here, so their command lines are checked this way."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from envbuild.core import resources
from envbuild.payload import smoke_checks as ck
from envbuild.preflight import fleet_run, slurm
from envbuild.smoke.container import SmokeLimits, smoke_container

BODY = (resources.templates_dir() / "slurm" / "smoke.sbatch.sh").read_text()
IMAGE = "reg.example.com/ml/torch@sha256:" + "c" * 64
VERDICT = ck.verdict_text({"schema": 1, "ok": True, "node": "n1", "checks": 9, "failed": []})

# srun: `--help` shows pyxis's option only when PYXIS=1; a step runs once per node of
# $NODES with SLURMD_NODENAME set, as slurmd would start it.
SRUN = """#!/bin/bash
args=(); for a in "$@"; do [ "$a" = bash ] && break; args+=("$a"); done
echo "srun ${args[*]}" >>"$CALLS"
if [ "$1" = --help ]; then [ "${PYXIS:-0}" = 1 ] && echo '  --container-image=[USER@][REGISTRY#]IMAGE'; exit 0; fi
while [ "$1" != bash ]; do shift; done
for n in $NODES; do SLURMD_NODENAME=$n "$@"; done
"""
RECORD = '#!/bin/bash\necho "$(basename "$0") $*" >>"$CALLS"\n'
PAYLOAD = RECORD + "echo 'table on stderr' >&2\necho \"ENVBUILD-SMOKE-VERDICT $VERDICT\"\n"
STUBS = {
    "srun": SRUN,
    "scontrol": '#!/bin/bash\nfor n in $NODES; do echo "$n"; done\n',
    "enroot": RECORD,
    # apptainer exec prints the payload's verdict line; build only records.
    "apptainer": RECORD + '[ "$1" = exec ] && echo "ENVBUILD-SMOKE-VERDICT $VERDICT"; exit 0\n',
    "docker": RECORD
    + 'case $1 in info) exit 0;; image) exit 1;; run) echo "ENVBUILD-SMOKE-VERDICT $VERDICT";; esac\n',
    "python": PAYLOAD,
}


def run_script(
    tmp_path: Path, *, have: tuple[str, ...], env: dict[str, str], archive: str = ""
) -> Path:
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in have:
        (stubs / name).write_text(STUBS[name])
        (stubs / name).chmod(0o755)
    smoke = smoke_container(
        IMAGE, SmokeLimits(2048, 660, 600), allow_cpu=False, attach=None, environ={}
    )
    shared = tmp_path / "shared"
    run = slurm.SlurmRun(
        smoke, "envbuild-smoke-t-cccc", "c" * 64, str(shared), archive=archive, gpus_per_node=8
    )
    script = tmp_path / "smoke.sbatch"
    script.write_text(slurm.sbatch_script(run, BODY))
    base = {"PATH": f"{stubs}:/usr/bin:/bin", "CALLS": str(tmp_path / "calls"), "NODES": "n1 n2"}
    done = subprocess.run(
        ["bash", str(script)],
        env={
            **base,
            "SLURM_JOB_ID": "77",
            "SLURM_JOB_NODELIST": "n[1-2]",
            "VERDICT": VERDICT,
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 of 2 nodes passed" in done.stdout
    return shared / "envbuild-smoke-t-cccc-77"


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


def read_back(run: Path) -> fleet_run.FleetRun:
    from envbuild.app import fleet

    return fleet_run.slurm_results(fleet.read_slurm_folder(run, ""))


def test_pyxis_imports_once_and_runs_the_payload_in_the_container(tmp_path: Path) -> None:
    run = run_script(tmp_path, have=("srun", "scontrol", "enroot", "python"), env={"PYXIS": "1"})
    log = calls(tmp_path)
    imports = [c for c in log if c.startswith("enroot")]
    assert imports == [
        f"enroot import --output {run}/image/image.sqsh "
        "docker://reg.example.com#ml/torch@sha256:" + "c" * 64
    ]
    (step,) = [c for c in log if c.startswith("srun --ntasks")]
    assert f"--container-image={run}/image/image.sqsh" in step
    assert f"--container-mounts={run}:{run}" in step
    payload = [c for c in log if c.startswith("python")]
    assert (
        payload == ["python /opt/envbuild/payload --plan /opt/envbuild/plan.json --verdict -"] * 2
    )
    assert json.loads((run / "run.json").read_text())["way"] == "pyxis"
    assert [n.status for n in read_back(run).nodes] == ["passed", "passed"]


def test_apptainer_builds_a_sif_once_and_execs_it_with_the_gpus(tmp_path: Path) -> None:
    run = run_script(tmp_path, have=("srun", "scontrol", "apptainer"), env={})
    log = [c for c in calls(tmp_path) if c.startswith("apptainer")]
    assert log[0] == f"apptainer build --force {run}/image/image.sif docker://{IMAGE}"
    assert log[1:] == [
        f"apptainer exec --nv --contain --env ENVBUILD_NODE={n} {run}/image/image.sif "
        "python /opt/envbuild/payload --plan /opt/envbuild/plan.json --verdict -"
        for n in ("n1", "n2")
    ]
    assert sorted(p.name for p in (run / "verdicts").iterdir()) == ["n1.json", "n2.json"]
    assert (run / "logs" / "n1.rc").read_text().strip() == "0"


def test_docker_pulls_by_digest_on_each_node_and_runs_with_gpus_and_shm(tmp_path: Path) -> None:
    run = run_script(tmp_path, have=("srun", "scontrol", "docker"), env={})
    runs = [c for c in calls(tmp_path) if c.startswith("docker run")]
    assert (
        len(runs) == 2
        and [c for c in calls(tmp_path) if c.startswith("docker pull")]
        == [f"docker pull {IMAGE}"] * 2
    )
    assert "--gpus all --shm-size 2048m -e ENVBUILD_NODE=n1" in runs[0]
    assert f"--label envbuild.lock.sha256={'c' * 64}" in runs[0]
    assert read_back(run).ok


def test_an_archive_on_shared_storage_is_loaded_instead_of_pulled(tmp_path: Path) -> None:
    archive = str(tmp_path / "torch-train.tar")
    run = run_script(tmp_path, have=("srun", "scontrol", "docker"), env={}, archive=archive)
    log = calls(tmp_path)
    assert [c for c in log if c.startswith(("docker load", "docker pull"))] == [
        f"docker load -i {archive}"
    ] * 2
    assert read_back(run).ok
    (tmp_path / "a").mkdir()
    apptainer = run_script(
        tmp_path / "a", have=("srun", "scontrol", "apptainer"), env={}, archive=archive
    )
    assert f"apptainer build --force {apptainer}/image/image.sif docker-archive://{archive}" in (
        calls(tmp_path / "a")
    )


def test_without_a_way_to_run_containers_the_job_stops_before_srun(tmp_path: Path) -> None:
    # (ENVBUILD_WAY names none of the four: this machine's own Docker must not be picked.)
    with pytest.raises(AssertionError, match="no way to run a container"):
        run_script(tmp_path, have=("srun", "scontrol"), env={"ENVBUILD_WAY": "none"})
    assert not (tmp_path / "calls").exists()  # nothing was started
