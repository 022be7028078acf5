"""A candidate that differs from a passed one only in the project's code (the same environment
key: `envbuild.app.image.context_key(environment=True)`) runs the project's own smoke step
alone (envbuild.build.pipeline `_reuse_environment`): the payload is not run again, the label
says whose environment pass it carries, a failing project step leaves no tag, and anything
else that changed, or a stricter plan, runs the whole test.

The store is the real `FileStore` (a JSON file in tmp_path); the engine the shared fake, which
gives every build a new candidate id (as a changed project layer does)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from envbuild.build import passes as smokepass
from envbuild.build.pipeline import REPORT_LABEL, ImageOutcome, build_and_verify
from envbuild.cli.commands.image import _print_outcome
from envbuild.core.errors import SmokeFailed
from envbuild.engine.protocol import RunResult, RunSpec
from tests.unit.build.test_build import OK_RUN, lines, make_job, passing
from tests.unit.fakes import FakeEngine

COMMAND = ("python", "-m", "demo.train", "--steps", "5")


@dataclass
class ScriptedEngine(FakeEngine):
    """The fake engine whose project command fails when `command_fails` is set."""

    command_fails: bool = False
    commands: list[tuple[str, ...]] = field(default_factory=list)

    def run(self, spec: RunSpec) -> RunResult:
        self.calls.append(("run", spec))
        self.commands.append(spec.command)
        if self.command_fails and "demo.train" in spec.command:
            return RunResult(exit_code=3, stdout="", stderr="ImportError: no module demo\n")
        return OK_RUN


def _store(tmp_path: Path) -> smokepass.FileStore:
    return smokepass.FileStore("host-a", "host a, fake", path=tmp_path / "passes.json")


def _image(
    engine: FakeEngine, tmp_path: Path, *, context_key: str, env_key: str, **over: Any
) -> tuple[list[str], ImageOutcome]:
    seen, progress = lines()
    job = make_job(context_key=context_key, env_key=env_key, smoke_command=COMMAND, **over)
    out = build_and_verify(engine, job, judge=passing, progress=progress, passes=_store(tmp_path))
    return seen, out


def _payload_runs(engine: ScriptedEngine) -> int:
    return sum(1 for command in engine.commands if "--plan" in command)


def test_a_code_change_runs_the_project_step_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = ScriptedEngine()
    _seen, first = _image(engine, tmp_path, context_key="c1", env_key="e1")
    assert _payload_runs(engine) == 1 and len(engine.commands) == 2
    seen, second = _image(engine, tmp_path, context_key="c2", env_key="e1")
    assert _payload_runs(engine) == 1  # the payload did not run again
    assert len(engine.commands) == 3 and "demo.train" in engine.commands[-1]
    doc = second.to_json()
    assert doc["tag"] == first.tag and doc["candidate_id"] != first.candidate_id
    assert doc["smoke_reused"]["scope"] == "environment"
    assert doc["smoke_reused"]["image_id"] == first.candidate_id
    assert doc["smoke_command"]["ok"] is True
    assert doc["smoke"]["checks"] == first.to_json()["smoke"]["checks"]
    label = json.loads(engine.image_labels(doc["tag"])[REPORT_LABEL])
    assert label["ok"] is True
    assert label["envbuild"]["environment_pass"]["image_id"] == first.candidate_id
    assert label["envbuild"]["smoke_command"]["command"] == list(COMMAND)
    assert any("only the project's code changed" in line for line in seen)
    _print_outcome(doc)
    out = capsys.readouterr().out
    assert "only its smoke step ran (--resmoke runs the whole test)" in out


def test_the_same_candidate_again_is_found_as_its_own_pass(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    _image(engine, tmp_path, context_key="c1", env_key="e1")
    _image(engine, tmp_path, context_key="c2", env_key="e1")
    runs = len(engine.commands)
    _seen, again = _image(engine, tmp_path, context_key="c2", env_key="e1")
    assert len(engine.commands) == runs  # up to date: nothing built or run
    assert again.unchanged is True


def test_a_failing_project_step_leaves_no_tag(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    _seen, first = _image(engine, tmp_path, context_key="c1", env_key="e1")
    engine.command_fails = True
    with pytest.raises(SmokeFailed):
        _image(engine, tmp_path, context_key="c2", env_key="e1")
    assert engine.tags[first.tag] == first.image_id  # the tag still names the old image
    removed = [arg for name, arg in engine.calls if name == "remove_image"]
    assert len(removed) == 1 and removed[0] != first.candidate_id
    stored = json.loads((tmp_path / "passes.json").read_text())["passes"]
    assert not any(k.endswith("/built/c2") for k in stored)


def test_another_environment_runs_the_whole_test(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    _image(engine, tmp_path, context_key="c1", env_key="e1")
    _seen, out = _image(engine, tmp_path, context_key="c2", env_key="e2")
    assert _payload_runs(engine) == 2
    assert out.smoke_reused is None


def test_no_environment_key_runs_the_whole_test(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    _image(engine, tmp_path, context_key="c1", env_key="")
    _image(engine, tmp_path, context_key="c2", env_key="")
    assert _payload_runs(engine) == 2


def test_a_stricter_plan_runs_the_whole_test(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    _image(engine, tmp_path, context_key="c1", env_key="e1", timeout_s=60)
    _seen, out = _image(engine, tmp_path, context_key="c2", env_key="e1", timeout_s=30)
    assert _payload_runs(engine) == 2  # a pass under 60 s says nothing about 30 s
    assert out.smoke_reused is None
