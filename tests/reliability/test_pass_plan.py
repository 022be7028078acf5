"""A recorded smoke pass counts only for the plan it passed (envbuild.build.passes.weaker).

The defect: `envbuild image DIR --smoke-timeout 1` on a candidate that had passed here in
4.7 s under the default limit was tagged without running anything ("not run again"): the
pass store kept no plan. Now a pass is reused only when the plan it ran under (tier, steps,
the kill time, the checks, the GPU devices) is at least as strict as the one asked for.
The store is the real `FileStore` (a JSON file in tmp_path); the engine the shared fake
(a candidate id per context, as Docker's layer cache gives).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from envbuild.app.image import ImageRequest, prepare
from envbuild.build import passes as smokepass
from envbuild.build.pipeline import ImageJob, build_and_verify
from envbuild.render.dockerfile import BuildInputs
from tests.reliability.helpers import copy_example
from tests.unit.build.test_build import OK_RUN, lines, make_job, passing
from tests.unit.build.test_smokepass import CachingEngine

PLAN = {"tier": 1, "steps": 20, "timeout_s": 600, "framework": "torch", "expect": {}}


def _job(**over: Any) -> ImageJob:
    return make_job(**{"smoke_plan": PLAN, "timeout_s": 630, **over})


def _store(tmp_path: Path) -> smokepass.FileStore:
    return smokepass.FileStore("host-a", "host a", path=tmp_path / "passes.json")


def _runs(engine: CachingEngine, job: ImageJob, tmp_path: Path) -> tuple[int, list[str]]:
    seen, progress = lines()
    build_and_verify(engine, job, judge=passing, progress=progress, passes=_store(tmp_path))
    return engine.names().count("run"), seen


def test_a_shorter_timeout_runs_the_smoke_test_again(tmp_path: Path) -> None:
    engine = CachingEngine(run_result=OK_RUN)
    assert _runs(engine, _job(), tmp_path)[0] == 1
    runs, seen = _runs(engine, _job(timeout_s=1), tmp_path)
    assert runs == 2, seen
    assert any("less strict plan (a 630 s limit there, 1 s asked)" in s for s in seen), seen
    assert not any("not run again" in s for s in seen)


def test_a_pass_under_a_stricter_plan_is_reused(tmp_path: Path) -> None:
    engine = CachingEngine(run_result=OK_RUN)
    _runs(engine, _job(timeout_s=5), tmp_path)
    runs, seen = _runs(engine, _job(), tmp_path)  # 630 s asked, passed within 5 s
    assert runs == 1
    assert any("not run again" in s for s in seen)


def test_more_steps_a_higher_tier_or_other_checks_run_it_again(tmp_path: Path) -> None:
    engine = CachingEngine(run_result=OK_RUN)
    _runs(engine, _job(), tmp_path)
    asked = [
        {**PLAN, "steps": 200},
        {**PLAN, "tier": 2},
        {**PLAN, "expect": {"cuda": "12.8"}},
    ]
    for n, plan in enumerate(asked, start=2):
        assert _runs(engine, _job(smoke_plan=plan), tmp_path)[0] == n, plan
    # Each new pass was recorded under its own plan: the same plan again is not re-run.
    assert _runs(engine, _job(smoke_plan=asked[-1]), tmp_path)[0] == len(asked) + 1


def test_other_gpu_devices_or_command_run_it_again(tmp_path: Path) -> None:
    engine = CachingEngine(run_result=OK_RUN)
    _runs(engine, _job(), tmp_path)
    job = _job()
    assert _runs(engine, replace(job, gpu=replace(job.gpu, devices=("0",))), tmp_path)[0] == 2
    # The payload, then the project's own step: two runs.
    assert _runs(engine, _job(smoke_command=("python", "-c", "1")), tmp_path)[0] == 4


def test_a_pass_recorded_without_a_plan_covers_nothing(tmp_path: Path) -> None:
    engine = CachingEngine(run_result=OK_RUN)
    _runs(engine, _job(), tmp_path)
    path = tmp_path / "passes.json"
    data = json.loads(path.read_text())
    for entry in data["passes"].values():
        entry.pop("plan")  # as an envbuild before this rule recorded it
    path.write_text(json.dumps(data))
    runs, seen = _runs(engine, _job(), tmp_path)
    assert runs == 2
    assert any("recorded without its plan" in s for s in seen)


def test_an_unchanged_context_is_reused_only_for_a_covered_plan(tmp_path: Path) -> None:
    engine = CachingEngine(run_result=OK_RUN)
    _runs(engine, _job(context_key="k1"), tmp_path)
    runs, seen = _runs(engine, _job(context_key="k1", timeout_s=1), tmp_path)
    assert runs == 2
    assert not any("is up to date" in s for s in seen)
    runs, seen = _runs(engine, _job(context_key="k1", timeout_s=1), tmp_path)
    assert runs == 2 and any("is up to date" in s for s in seen)


def test_image_puts_the_smoke_plan_and_the_timeout_into_the_job(tmp_path: Path) -> None:
    # The real use case: `--smoke-timeout 1` reaches the plan a pass is compared with.
    folder = copy_example(tmp_path, "torch-cpu")
    job, _judge = prepare(
        image_dir=folder, request=ImageRequest(smoke_timeout=1), build_inputs=BuildInputs()
    )
    assert job.timeout_s == 1
    assert job.smoke_plan["tier"] in (1, 2) and job.smoke_plan["steps"] >= 1
    default, _ = prepare(image_dir=folder, request=ImageRequest(), build_inputs=BuildInputs())
    plan_of = smokepass.pass_plan
    asked = plan_of(job.smoke_plan, kill_after_s=job.timeout_s, devices=[], command=[])
    passed = plan_of(default.smoke_plan, kill_after_s=default.timeout_s, devices=[], command=[])
    assert smokepass.weaker(passed, asked) is not None
    assert smokepass.weaker(asked, passed) is None
