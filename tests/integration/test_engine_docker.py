"""The build -> smoke -> tag path on the real Docker engine, with tiny images FROM
envbuild-e2e/base:bookworm (made by tests/e2e.sh) and stand-in payloads (cases/*/).

Marked `engine`; skipped when no engine answers or the base image is missing. Every test
checks that no smoke container is left behind and that no tag is written on failure.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest

from envbuild.build.pipeline import (
    LOCK_LABEL,
    LOCK_SHA_LABEL,
    REPORT_LABEL,
    build_and_verify,
)
from envbuild.core.errors import (
    BuildError,
    DiskFullError,
    GpuUnavailableError,
    SmokeFailed,
)
from envbuild.engine.docker import DockerEngine
from envbuild.engine.protocol import RunSpec
from envbuild.smoke.container import ROLE_LABEL
from tests.integration.engine_cases import BASE, CASES, job, judge


def smoke_leftovers(engine: DockerEngine, lock_sha256: str) -> list[str]:
    """This test's smoke containers only: others may use the same engine at the same time."""
    return engine.containers(f"{LOCK_SHA_LABEL}={lock_sha256}")


pytestmark = pytest.mark.engine


def test_pass_tags_with_lock_sha_and_report_labels(engine: DockerEngine, tag: str) -> None:
    j = job("pass", tag)
    out = build_and_verify(engine, j, judge=judge, progress=lambda _: None)
    labels = engine.image_labels(tag)
    assert labels[LOCK_SHA_LABEL] == j.lock_sha256
    assert labels[LOCK_LABEL] == j.lock_text
    report = json.loads(labels[REPORT_LABEL])
    assert report["ok"] is True
    assert report["device"] == "cpu"
    assert report["envbuild"]["base_image"] == BASE
    assert out.image_id == engine.client.images.get(tag).id
    assert smoke_leftovers(engine, j.lock_sha256) == []


def test_failing_run_step_is_a_build_error_naming_the_step(engine: DockerEngine, tag: str) -> None:
    seen: list[str] = []
    with pytest.raises(BuildError) as info:
        build_and_verify(engine, job("failstep", tag), judge=judge, progress=seen.append)
    err = info.value
    assert err.exit_code == 5
    assert "Step 2/" in err.message and "RUN" in err.message  # build-API labels add steps
    assert any("about to fail" in line for line in err.fields["log_tail"])
    assert not engine.image_exists(tag)
    # The failing step's intermediate container is removed (forcerm). Other containers on
    # this engine are not ours to judge, so look for this step's command only.
    leftovers = [
        c.id
        for c in engine.client.containers.list(all=True)
        if "about to fail" in " ".join(c.attrs["Config"].get("Cmd") or [])
    ]
    assert leftovers == []


def test_crashing_payload_fails_without_tag_and_removes_candidate(
    engine: DockerEngine, tag: str
) -> None:
    j = job("crash", tag)
    with pytest.raises(SmokeFailed) as info:
        build_and_verify(engine, j, judge=judge, progress=lambda _: None)
    err = info.value
    assert err.exit_code == 6
    assert "crashed (exit 1)" in err.message
    assert any("libcudnn" in line for line in err.fields["stderr_tail"])
    assert not engine.image_exists(tag)
    assert err.fields["candidate_id"] is None
    assert smoke_leftovers(engine, j.lock_sha256) == []


def test_keep_failed_keeps_the_candidate(engine: DockerEngine, tag: str) -> None:
    with pytest.raises(SmokeFailed) as info:
        build_and_verify(
            engine, job("crash", tag, keep_failed=True), judge=judge, progress=lambda _: None
        )
    kept = info.value.fields["candidate_id"]
    try:
        assert engine.image_exists(kept)
        assert not engine.image_exists(tag)
    finally:
        engine.remove_image(kept)


def test_hanging_payload_is_killed_removed_and_untagged(engine: DockerEngine, tag: str) -> None:
    j = job("hang", tag, timeout_s=3)
    with pytest.raises(SmokeFailed) as info:
        build_and_verify(engine, j, judge=judge, progress=lambda _: None)
    err = info.value
    assert err.fields["timed_out"] is True
    assert 3 <= err.fields["duration_s"] < 30
    assert not engine.image_exists(tag)
    assert smoke_leftovers(engine, j.lock_sha256) == []


def test_gpu_image_without_runtime_fails_before_the_build(engine: DockerEngine, tag: str) -> None:
    if engine.has_nvidia_runtime():
        pytest.skip("this engine can attach GPUs")
    seen: list[str] = []
    with pytest.raises(GpuUnavailableError) as info:
        build_and_verify(
            engine, job("pass", tag, allow_cpu=False), judge=judge, progress=seen.append
        )
    assert info.value.exit_code == 7
    assert seen == []  # nothing was built
    assert not engine.image_exists(tag)


def test_gpu_request_on_a_gpu_less_engine_is_a_clear_error(engine: DockerEngine) -> None:
    if engine.has_nvidia_runtime():
        pytest.skip("this engine can attach GPUs")
    mine = uuid.uuid4().hex
    labels = {ROLE_LABEL: "smoke", LOCK_SHA_LABEL: mine}
    spec = RunSpec(image=BASE, command=("true",), gpus=True, labels=labels)
    with pytest.raises(GpuUnavailableError) as info:
        engine.run(spec)
    assert "nvidia-ctk --version" in info.value.hint
    assert smoke_leftovers(engine, mine) == []


def test_run_returns_exit_code_and_separate_streams(engine: DockerEngine) -> None:
    mine = uuid.uuid4().hex
    spec = RunSpec(
        image=BASE,
        command=("sh", "-c", "echo out; echo err >&2; exit 3"),
        gpus=False,
        shm_size="256m",
        labels={ROLE_LABEL: "smoke", LOCK_SHA_LABEL: mine},
    )
    result = engine.run(spec)
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    shm = engine.run(
        RunSpec(
            image=BASE,
            command=("df", "-m", "/dev/shm"),
            gpus=False,
            shm_size="300m",
            labels={ROLE_LABEL: "smoke", LOCK_SHA_LABEL: mine},
        )
    )
    assert " 300 " in shm.stdout
    assert smoke_leftovers(engine, mine) == []


def test_missing_base_that_cannot_be_pulled_suggests_base_image(engine: DockerEngine) -> None:
    # Whether or not a registry answers, this name cannot be pulled.
    ctx = {"Dockerfile": (CASES / "nobase" / "Dockerfile").read_bytes()}
    with pytest.raises(BuildError) as info:
        engine.build(context=ctx, labels={}, progress=lambda _: None)
    assert "envbuild-it/no-such-base:never" in info.value.message
    assert "--base-image" in info.value.hint


def test_disk_full_during_build_is_its_own_error(engine: DockerEngine) -> None:
    ctx = {"Dockerfile": (CASES / "diskfull" / "Dockerfile").read_bytes()}
    with pytest.raises(DiskFullError) as info:
        engine.build(context=ctx, labels={}, progress=lambda _: None)
    assert info.value.exit_code == 3
    assert "disk space" in info.value.message
    assert "docker system df" in info.value.hint


def test_failed_candidate_goes_but_its_cached_layers_stay(engine: DockerEngine, tag: str) -> None:
    """The build after a failed smoke test reuses the steps before the change: removing the
    candidate does not prune its parents (the classic builder's cache)."""
    probe = uuid.uuid4().hex
    j = job("crash", tag)
    dockerfile = (
        j.context["Dockerfile"]
        .decode()
        .replace("\nRUN ", f"\nRUN echo {probe} > /tmp/probe\nRUN ", 1)
    )
    context = {**j.context, "Dockerfile": dockerfile.encode()}
    with pytest.raises(SmokeFailed):
        build_and_verify(engine, replace(j, context=context), judge=judge, progress=lambda _: None)
    seen: list[str] = []
    with pytest.raises(SmokeFailed):
        build_and_verify(engine, replace(j, context=context), judge=judge, progress=seen.append)
    step = next(i for i, line in enumerate(seen) if probe in line)
    assert any("Using cache" in line for line in seen[step : step + 3]), seen[step : step + 3]
    assert not engine.image_exists(tag)
