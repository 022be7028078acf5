"""Orchestration of `envbuild image` over a fake engine: build -> smoke -> tag only on pass."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from envbuild.build.pipeline import (
    LOCK_LABEL,
    LOCK_SHA_LABEL,
    REPORT_LABEL,
    ImageJob,
    StepClock,
    build_and_verify,
    default_tag,
    report_label,
)
from envbuild.core.errors import (
    BuildError,
    EngineError,
    EnvbuildError,
    GpuUnavailableError,
    SmokeFailed,
    UserError,
)
from envbuild.engine.protocol import BuildResult, ProgressFn, RunResult, RunSpec
from tests.unit.fakes import FakeEngine
from envbuild.host.gpu_attach import Attachment
from envbuild.smoke.container import ROLE_LABEL, shm_mib_for
from envbuild.smoke.plan import SmokeJudgement, payload_command

LOCK_TEXT = "# envbuild.lock\nname = 'demo'\n"
SHA = "ab" * 32


def make_job(**over: Any) -> ImageJob:
    job = ImageJob(
        name="demo",
        context={"Dockerfile": b"FROM base\n"},
        lock_text=LOCK_TEXT,
        lock_sha256=SHA,
        tag="envbuild-test/demo:ok",
        needs_gpu=True,
        allow_cpu=False,
        timeout_s=30,
        shm_mib=2048,
        locked_base_image="nvidia/cuda:12.8.1-base-ubuntu24.04",
        base_image="nvidia/cuda:12.8.1-base-ubuntu24.04",
    )
    return replace(job, **over)


PASS_REPORT = {"ok": True, "device": "cuda", "checks": [{"name": "cuda.init", "status": "pass"}]}


def passing(result: RunResult) -> SmokeJudgement:
    return SmokeJudgement(ok=True, report=PASS_REPORT)


def failing(result: RunResult) -> SmokeJudgement:
    return SmokeJudgement(
        ok=False,
        report={"ok": False, "device": "cuda"},
        failed=({"name": "shm.size", "figure": "64 MiB", "hint": "run with --shm-size=2g"},),
        summary="shm.size failed",
    )


def crashing(result: RunResult) -> SmokeJudgement:
    raise ValueError("no ENVBUILD-SMOKE-REPORT line in the output")


OK_RUN = RunResult(exit_code=0, stdout="ENVBUILD-SMOKE-REPORT {}\n", stderr="")
FAIL_RUN = RunResult(exit_code=1, stdout="ENVBUILD-SMOKE-REPORT {}\n", stderr="shm too small\n")


def lines() -> tuple[list[str], ProgressFn]:
    seen: list[str] = []
    return seen, seen.append


def test_pass_tags_after_the_smoke_run_with_both_labels() -> None:
    engine = FakeEngine(run_result=OK_RUN)
    seen, progress = lines()
    out = build_and_verify(engine, make_job(), judge=passing, progress=progress)
    names = engine.names()
    assert names.index("build") < names.index("run") < names.index("tag")
    assert "remove_image" not in names
    labels = engine.image_labels("envbuild-test/demo:ok")
    assert labels[LOCK_LABEL] == LOCK_TEXT
    assert labels[LOCK_SHA_LABEL] == SHA
    report = json.loads(labels[REPORT_LABEL])
    assert report["ok"] is True
    assert report["envbuild"]["lock_sha256"] == SHA
    assert out.tag == "envbuild-test/demo:ok"
    assert out.image_id == engine.tags["envbuild-test/demo:ok"]
    assert out.to_json()["device"] == "cuda"
    assert any(s.startswith("Step 1/1") for s in seen)


def test_a_smoke_container_the_engine_kept_is_named_and_the_pass_still_tags() -> None:
    # The image passed; the engine's leftover is said, with the command that removes it.
    kept = replace(OK_RUN, left_behind="envbuild-smoke-00ff")
    engine = FakeEngine(run_result=kept)
    seen, progress = lines()
    out = build_and_verify(engine, make_job(), judge=passing, progress=progress)
    assert out.tag == "envbuild-test/demo:ok" and "tag" in engine.names()
    warned = [s for s in seen if s.startswith("warning:")]
    assert warned and "docker rm -f envbuild-smoke-00ff" in warned[0]


def test_each_step_of_a_pass_is_timed_in_order_and_reported() -> None:
    clock = StepClock()
    out = build_and_verify(
        FakeEngine(run_result=OK_RUN), make_job(), judge=passing, progress=print, clock=clock
    )
    order = ["up_to_date_check", "preflight", "build", "smoke", "tag", "labels_check"]
    order.append("record_pass")
    assert list(clock.seconds) == order
    assert all(isinstance(v, float) and v >= 0 for v in clock.seconds.values())
    # The app puts the clock's seconds on the outcome; its JSON carries them as they are.
    assert replace(out, steps_s=clock.seconds).to_json()["steps_s"] == clock.seconds


def test_a_failed_smoke_still_times_the_steps_it_ran() -> None:
    clock = StepClock()
    with pytest.raises(SmokeFailed):
        build_and_verify(
            FakeEngine(run_result=OK_RUN), make_job(), judge=failing, progress=print, clock=clock
        )
    assert list(clock.seconds) == ["up_to_date_check", "preflight", "build", "smoke"]


def test_run_spec_attaches_gpus_shm_limit_and_role_label() -> None:
    engine = FakeEngine(run_result=OK_RUN)
    build_and_verify(engine, make_job(shm_mib=4096, timeout_s=77), judge=passing, progress=print)
    spec = next(c[1] for c in engine.calls if c[0] == "run")
    assert spec.gpus is True
    assert spec.shm_size == "4096m"
    assert spec.timeout_s == 77
    assert spec.labels[ROLE_LABEL] == "smoke"
    assert spec.command == payload_command(allow_cpu=False)
    assert "--allow-cpu" not in spec.command


def test_the_locks_platform_reaches_the_build_and_the_smoke_container() -> None:
    engine = FakeEngine(run_result=OK_RUN)
    job = make_job(platform="linux/arm64", needs_gpu=False)
    build_and_verify(engine, job, judge=passing, progress=print)
    assert engine.platforms == ["linux/arm64"]
    assert [spec.platform for spec in engine.runs] == ["linux/arm64"]
    plain = FakeEngine(run_result=OK_RUN)
    build_and_verify(plain, make_job(needs_gpu=False), judge=passing, progress=print)
    assert plain.platforms == [None]
    assert [spec.platform for spec in plain.runs] == [None]


def test_the_jobs_build_arguments_reach_the_engine() -> None:
    engine = FakeEngine(run_result=OK_RUN)
    args = {"UV_PYTHON_INSTALL_MIRROR": "http://mirror.example/pbs"}
    build_and_verify(engine, make_job(needs_gpu=False, build_args=args), judge=passing, progress=print)
    plain = FakeEngine(run_result=OK_RUN)
    build_and_verify(plain, make_job(needs_gpu=False), judge=passing, progress=print)
    assert (engine.build_args, plain.build_args) == ([args], [{}])


def test_allow_cpu_runs_the_cpu_path_without_gpus_or_runtime_check() -> None:
    engine = FakeEngine(run_result=OK_RUN, nvidia=False)
    job = make_job(allow_cpu=True)
    out = build_and_verify(engine, job, judge=passing, progress=lambda _: None)
    spec = next(c[1] for c in engine.calls if c[0] == "run")
    assert spec.gpus is False
    assert spec.command[-1] == "--allow-cpu"
    assert json.loads(out.report_label)["envbuild"]["allow_cpu"] is True


def test_gpu_image_without_runtime_fails_before_building() -> None:
    engine = FakeEngine(run_result=OK_RUN, nvidia=False)
    with pytest.raises(GpuUnavailableError) as info:
        build_and_verify(engine, make_job(), judge=passing, progress=lambda _: None)
    assert info.value.exit_code == 7
    for needle in ("nvidia-smi", "nvidia-ctk --version", "docker info | grep -i runtime"):
        assert needle in info.value.hint
    assert "--allow-cpu" in info.value.hint
    assert "build" not in engine.names()
    assert not engine.tags


def test_cpu_image_needs_no_runtime_and_no_flag() -> None:
    engine = FakeEngine(run_result=OK_RUN, nvidia=False)
    build_and_verify(engine, make_job(needs_gpu=False), judge=passing, progress=lambda _: None)
    spec = next(c[1] for c in engine.calls if c[0] == "run")
    assert spec.gpus is False
    assert "--allow-cpu" not in spec.command
    assert engine.tags


def test_failed_check_removes_candidate_and_names_check_and_fix() -> None:
    engine = FakeEngine(run_result=FAIL_RUN)
    with pytest.raises(SmokeFailed) as info:
        build_and_verify(engine, make_job(), judge=failing, progress=lambda _: None)
    err = info.value
    assert err.exit_code == 6
    assert "shm.size" in err.message
    assert "--shm-size=2g" in err.hint
    assert "tag" not in engine.names()
    candidate = next(c[1] for c in engine.calls if c[0] == "build")
    assert engine.names()[-1] == "remove_image"
    assert not engine.tags
    assert err.fields["tag"] is None
    assert err.fields["failed"][0]["name"] == "shm.size"
    assert candidate  # the build happened with labels


def test_keep_failed_keeps_the_candidate() -> None:
    engine = FakeEngine(run_result=FAIL_RUN)
    with pytest.raises(SmokeFailed) as info:
        build_and_verify(engine, make_job(keep_failed=True), judge=failing, progress=lambda _: None)
    assert "remove_image" not in engine.names()
    kept = info.value.fields["candidate_id"]
    assert kept in engine.images
    assert kept in info.value.hint


def test_timeout_is_a_failure_without_judging() -> None:
    engine = FakeEngine(
        run_result=RunResult(exit_code=None, stdout="", stderr="", timed_out=True, duration_s=1.0)
    )
    judged: list[RunResult] = []

    def judge(result: RunResult) -> SmokeJudgement:
        judged.append(result)
        return passing(result)

    with pytest.raises(SmokeFailed) as info:
        build_and_verify(engine, make_job(timeout_s=1), judge=judge, progress=lambda _: None)
    assert not judged
    assert "within 1 s" in info.value.message
    assert "--smoke-timeout" in info.value.hint
    assert info.value.fields["timed_out"] is True
    assert "tag" not in engine.names()
    assert "remove_image" in engine.names()


def test_crash_without_report_is_a_failure_with_stderr_tail() -> None:
    run = RunResult(exit_code=139, stdout="", stderr="Traceback\nSegmentation fault\n")
    engine = FakeEngine(run_result=run)
    with pytest.raises(SmokeFailed) as info:
        build_and_verify(engine, make_job(), judge=crashing, progress=lambda _: None)
    assert "crashed (exit 139)" in info.value.message
    assert info.value.fields["stderr_tail"][-1] == "Segmentation fault"
    assert not engine.tags


def test_ok_report_with_nonzero_exit_is_not_a_pass() -> None:
    engine = FakeEngine(run_result=RunResult(exit_code=1, stdout="", stderr=""))
    with pytest.raises(SmokeFailed):
        build_and_verify(engine, make_job(), judge=passing, progress=lambda _: None)
    assert not engine.tags


def test_daemon_down_stops_before_anything() -> None:
    engine = FakeEngine(ping_error=EngineError("cannot reach the Docker engine", hint="start it"))
    with pytest.raises(EngineError) as info:
        build_and_verify(engine, make_job(), judge=passing, progress=lambda _: None)
    assert info.value.exit_code == 4
    assert engine.names() == ["ping"]


def test_build_failure_runs_nothing_and_tags_nothing() -> None:
    engine = FakeEngine(build_error=BuildError("build failed at Step 2/9 : RUN false"))
    with pytest.raises(BuildError) as info:
        build_and_verify(engine, make_job(), judge=passing, progress=lambda _: None)
    assert info.value.exit_code == 5
    assert "run" not in engine.names()
    assert not engine.tags


def test_ctrl_c_during_smoke_removes_candidate() -> None:
    engine = FakeEngine(run_raises=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        build_and_verify(engine, make_job(), judge=passing, progress=lambda _: None)
    assert engine.names()[-1] == "remove_image"
    assert not engine.tags


def test_engine_error_during_smoke_removes_candidate() -> None:
    engine = FakeEngine(run_raises=EngineError("engine went away"))
    with pytest.raises(EngineError):
        build_and_verify(engine, make_job(), judge=passing, progress=lambda _: None)
    assert "remove_image" in engine.names()


def test_replaced_base_is_recorded_in_label_and_json() -> None:
    engine = FakeEngine(run_result=OK_RUN)
    job = make_job(base_image="envbuild-e2e/base:bookworm", allow_cpu=True)
    out = build_and_verify(engine, job, judge=passing, progress=lambda _: None)
    doc = out.to_json()
    assert doc["base_image_replaced"] is True
    assert doc["base_image"] == "envbuild-e2e/base:bookworm"
    label = json.loads(engine.image_labels(job.tag)[REPORT_LABEL])
    assert label["envbuild"]["base_image"] == "envbuild-e2e/base:bookworm"
    assert label["envbuild"]["locked_base_image"] == job.locked_base_image


def test_report_label_is_compact_sorted_json_with_ok_true() -> None:
    text = report_label({"z": 1, "ok": False, "a": [1, 2]}, make_job())
    assert " " not in text
    data = json.loads(text)
    assert data["ok"] is True
    assert list(data) == sorted(data)
    assert text == json.dumps(data, sort_keys=True, separators=(",", ":"))


def test_default_tag_and_shm() -> None:
    assert default_tag("torch-slim", SHA) == f"envbuild/torch-slim:{SHA[:12]}"
    assert shm_mib_for(512) >= 2048
    assert shm_mib_for(8192) == 8192


def test_oversized_lock_is_refused_before_the_engine() -> None:
    from envbuild.build.pipeline import LOCK_LABEL_MAX_BYTES
    from envbuild.core.errors import UserError

    engine = FakeEngine(run_result=OK_RUN)
    job = make_job(lock_text="#" * (LOCK_LABEL_MAX_BYTES + 1))
    with pytest.raises(UserError) as info:
        build_and_verify(engine, job, judge=passing, progress=lambda _: None)
    assert info.value.exit_code == 2
    assert engine.calls == []


def test_a_failing_cleanup_does_not_hide_the_smoke_failure() -> None:
    class StickyEngine(FakeEngine):
        def remove_image(self, image_id: str) -> None:
            self.calls.append(("remove_image", image_id))
            raise EngineError("could not remove image: in use")

    engine = StickyEngine(run_result=FAIL_RUN)
    with pytest.raises(SmokeFailed):
        build_and_verify(engine, make_job(), judge=failing, progress=lambda _: None)
    assert "remove_image" in engine.names()
    assert not engine.tags
