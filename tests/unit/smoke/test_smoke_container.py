"""The one smoke container: `envbuild image`, validate's local run and validate's Kubernetes
Job start the same command with the same /dev/shm and time limits for the same lock."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from envbuild.app import image as image_case
from envbuild.app import inputs
from envbuild.app import smoke as smoke_case
from envbuild.app import validate as validate_case
from envbuild.build import pipeline
from envbuild.core.models import Lock
from envbuild.engine.protocol import RunResult, RunSpec
from envbuild.lock.format import loads
from envbuild.preflight import reports
from envbuild.render.dockerfile import BuildInputs
from envbuild.smoke.container import (
    DEFAULT_SHM_MIB,
    ROLE_LABEL,
    limits_for,
    shm_mib_for,
    smoke_container,
)
from envbuild.smoke.plan import SMOKE_GRACE_S

ROOT = Path(__file__).resolve().parents[3]
IMAGE_DIR = ROOT / "images" / "torch-train"


def the_lock(**smoke: Any) -> Lock:
    lock = loads((IMAGE_DIR / "envbuild.lock").read_text(encoding="utf-8"))
    return dataclasses.replace(lock, smoke=dataclasses.replace(lock.smoke, **smoke))


class Recorder:
    """A stand-in engine that records the RunSpec it is asked to run."""

    name = "fake"

    def __init__(self) -> None:
        self.specs: list[RunSpec] = []

    def run(self, spec: RunSpec) -> RunResult:
        self.specs.append(spec)
        return RunResult(exit_code=0, stdout="", stderr="")


def test_shm_is_at_least_the_plan_and_never_below_the_default() -> None:
    assert shm_mib_for(512) == DEFAULT_SHM_MIB
    assert shm_mib_for(8192) == 8192


def test_limits_kill_after_the_grace_unless_a_kill_time_is_given() -> None:
    lock = the_lock(timeout_s=700, min_shm_mib=6144)
    limits = limits_for(lock.smoke)
    assert (limits.shm_mib, limits.timeout_s, limits.kill_after_s) == (6144, 700, 700 + 60)
    assert limits_for(lock.smoke, kill_after=5).kill_after_s == 5


def test_image_smoke_and_the_job_get_the_same_container(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lock = the_lock(timeout_s=700, min_shm_mib=6144)
    monkeypatch.setenv("NCCL_DEBUG", "INFO")

    # `envbuild image`: the job prepare() decides, run by the pipeline.
    monkeypatch.setattr(inputs, "load_fresh_text", lambda *a, **k: (None, lock, "# lock\n"))
    job, _ = image_case.prepare(
        image_dir=IMAGE_DIR, request=image_case.ImageRequest(), build_inputs=BuildInputs()
    )
    built = pipeline._smoke_spec(job, "sha256:candidate", None)

    # validate's local run.
    engine = Recorder()
    smoke_case.run_in_image(engine, "reg/img:tag", lock, attach=None)  # type: ignore[arg-type]
    (local,) = engine.specs

    # validate's Kubernetes Job.
    container = smoke_container(
        "reg/img:tag", limits_for(lock.smoke), allow_cpu=False, attach=None, environ={}
    )
    job_doc = reports.k8s_job(smoke=container, name="t", job_name="j", node="n", gpus=1)
    (pod,) = job_doc["spec"]["template"]["spec"]["containers"]
    volumes = job_doc["spec"]["template"]["spec"]["volumes"]

    assert built.command == local.command == tuple(pod["command"])
    assert built.shm_size == local.shm_size == "6144m"
    assert volumes[0]["emptyDir"]["sizeLimit"] == "6144Mi"
    assert built.timeout_s == local.timeout_s == 700 + SMOKE_GRACE_S
    deadline = job_doc["spec"]["activeDeadlineSeconds"]
    assert deadline == 700 + reports.PULL_MARGIN_S
    assert built.environment == local.environment == {"NCCL_DEBUG": "INFO"}
    assert "env" not in pod  # the manifest does not depend on who wrote it
    assert built.labels[ROLE_LABEL] == local.labels[ROLE_LABEL] == "smoke"


def test_validate_writes_the_job_from_the_same_container() -> None:
    # The use case's Job builder goes through smoke_container (no other spelling of the
    # command, shm or deadline is left in app/validate.py).
    source = Path(validate_case.__file__).read_text(encoding="utf-8")
    assert "smoke_container(" in source and "shm_mib_for" not in source
