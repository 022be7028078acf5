"""The sbatch script of `envbuild fleet slurm` (preflight/slurm.py + templates/slurm)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from envbuild.core import resources
from envbuild.core.errors import UserError
from envbuild.preflight import slurm
from envbuild.smoke.container import SmokeLimits, smoke_container

BODY = (resources.templates_dir() / "slurm" / "smoke.sbatch.sh").read_text()


def make_run(**kw: object) -> slurm.SlurmRun:
    smoke = smoke_container(
        kw.pop("image", "reg.example.com/ml/torch@sha256:" + "a" * 64),  # type: ignore[arg-type]
        SmokeLimits(shm_mib=4096, kill_after_s=660, timeout_s=600),
        allow_cpu=False,
        attach=None,
        environ={},
    )
    values = {
        "smoke": smoke,
        "run_name": slurm.run_name("torch-train", "b" * 64),
        "lock_sha256": "b" * 64,
        "shared": "/shared/envbuild",
        "partition": "gpu",
        "gpus_per_node": 8,
        "gpu_class": "H100",
    }
    values.update(kw)
    return slurm.SlurmRun(**values)  # type: ignore[arg-type]


def test_the_script_asks_for_whole_nodes_one_task_each_and_their_gpus() -> None:
    text = slurm.sbatch_script(make_run(), BODY)
    head = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert head == [
        "#SBATCH --job-name=envbuild-smoke-torch-train-bbbbbbbbbbbb",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        "#SBATCH --time=26",  # (660 s + the 900 s import margin) / 60, rounded up
        "#SBATCH --output=/shared/envbuild/envbuild-smoke-torch-train-bbbbbbbbbbbb-%j.out",
        "#SBATCH --partition=gpu",
        "#SBATCH --gpus-per-node=8",
    ]
    assert "ENVBUILD_SHM_MIB=4096" in text and "ENVBUILD_GPUS=8" in text
    assert (
        "ENVBUILD_PAYLOAD='python /opt/envbuild/payload --plan /opt/envbuild/plan.json "
        "--verdict -'" in text
    )


def test_the_script_is_valid_bash_and_values_stay_data(tmp_path: Path) -> None:
    nasty = "reg.example.com/x:$(touch /tmp/pwned)`id`"
    text = slurm.sbatch_script(make_run(image=nasty, archive="/shared/a b.tar"), BODY)
    script = tmp_path / "s.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    assert f"ENVBUILD_IMAGE={shlex.quote(nasty)}" in text
    settings = text.split("# --- the body")[0]
    done = subprocess.run(
        ["bash", "-c", settings + '\nprintf %s "$ENVBUILD_IMAGE|$ENVBUILD_ARCHIVE"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == nasty + "|/shared/a b.tar"


def test_a_nodelist_and_node_count_go_to_sbatch() -> None:
    text = slurm.sbatch_script(make_run(partition="", nodelist="gpu[01-16,20]", nodes=4), BODY)
    assert "#SBATCH --nodelist=gpu[01-16,20]" in text and "#SBATCH --nodes=4" in text
    assert "--partition" not in text.split("# --- the body")[0]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"partition": "gpu; rm -rf /"}, "not a Slurm name"),
        ({"nodelist": "a b"}, "not a Slurm name"),
        ({"shared": "shared/envbuild"}, "not an absolute path"),
        ({"archive": "x.tar"}, "not an absolute path"),
    ],
)
def test_what_sbatch_would_misread_is_refused(change: dict[str, str], words: str) -> None:
    with pytest.raises(UserError, match=words):
        slurm.sbatch_script(make_run(**change), BODY)


def test_a_cpu_run_asks_for_no_gpus() -> None:
    text = slurm.sbatch_script(make_run(gpus_per_node=0, gpu_class="cpu"), BODY)
    assert "--gpus-per-node" not in text and "ENVBUILD_GPUS=0" in text
