"""The smoke container's removal (engine/docker.py `_remove_container`): asked again while the
engine refuses, done only when the engine no longer knows the container, and a container it
keeps is reported by name (`RunResult.left_behind`, then a warning with the command)."""

from __future__ import annotations

from typing import ClassVar

import docker.errors
import pytest
import requests.exceptions

from envbuild.core.errors import EngineError
from envbuild.engine import docker as docker_engine
from envbuild.engine.protocol import RunResult, RunSpec
from envbuild.smoke.container import left_behind_note


class _Container:
    """A container whose engine refuses `refusals` removals (Podman's 500 while its own cleanup
    of an exited container runs), or answers a removal without removing (`lies`)."""

    def __init__(self, refusals: int = 0, lies: int = 0) -> None:
        self.refusals, self.lies = refusals, lies
        self.exists = True
        self.calls = 0
        self.name = ""

    def remove(self, force: bool) -> None:
        assert force
        self.calls += 1
        if not self.exists:
            raise docker.errors.NotFound("no such container")
        if self.refusals:
            self.refusals -= 1
            raise docker.errors.APIError("container state improper")
        if self.lies:
            self.lies -= 1
            return
        self.exists = False

    def reload(self) -> None:
        if not self.exists:
            raise docker.errors.NotFound("no such container")


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker_engine, "REMOVE_RETRY_S", 0.0)


def test_a_refused_removal_is_asked_again_until_it_is_done() -> None:
    # Five refusals: the old three tries in 1.5 s gave up here and left the container.
    container = _Container(refusals=5)
    assert docker_engine._remove_container(container, grace_s=5)
    assert container.calls == 6 and not container.exists


def test_an_answered_removal_that_left_the_container_is_asked_again() -> None:
    container = _Container(lies=2)
    assert docker_engine._remove_container(container, grace_s=5)
    assert container.calls == 3 and not container.exists


def test_a_container_already_gone_counts_as_removed() -> None:
    container = _Container()
    container.exists = False
    assert docker_engine._remove_container(container, grace_s=5)


def test_a_container_the_engine_keeps_is_reported_not_raised() -> None:
    container = _Container(refusals=10**9)
    assert docker_engine._remove_container(container, grace_s=0.05) is False
    assert container.exists and container.calls >= 1


def test_the_note_names_the_container_and_how_to_remove_it() -> None:
    kept = RunResult(0, "", "", left_behind="envbuild-smoke-0123")
    note = left_behind_note(kept)
    assert note.startswith("warning: the engine kept smoke container envbuild-smoke-0123")
    assert "docker rm -f envbuild-smoke-0123" in note
    assert "podman rm -f envbuild-smoke-0123" in note
    assert left_behind_note(RunResult(0, "", "")) == ""


class _Client:
    """docker-py's client as far as `DockerEngine.run` calls it; its one container is `kept`
    by an engine that refuses every removal, or starts and then `fails` to answer."""

    def __init__(self, container: _Container, *, start_fails: bool = False) -> None:
        self.container, self.start_fails = container, start_fails
        self.containers = self

    def create(self, **kwargs: object) -> _Container:
        self.container.name = str(kwargs["name"])
        if self.start_fails:
            self.container.start = _refuse_start  # type: ignore[attr-defined]
        return self.container

    def get(self, name: str) -> _Container:
        if self.container.exists and name == self.container.name:
            return self.container
        raise docker.errors.NotFound("no such container")


def _refuse_start() -> None:
    raise docker.errors.APIError("OCI runtime create failed", explanation="runtime failed")


class _Exits(_Container):
    status = "exited"
    attrs: ClassVar[dict[str, dict[str, int]]] = {"State": {"ExitCode": 0}}

    def start(self) -> None:
        return None

    def logs(self, **_: object) -> bytes:
        return b""


def _engine(client: _Client) -> docker_engine.DockerEngine:
    engine = docker_engine.DockerEngine()
    engine._client = client
    return engine


def test_a_run_whose_container_the_engine_keeps_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker_engine, "REMOVE_GRACE_S", 0.05)
    kept = _Exits(refusals=10**9)
    result = _engine(_Client(kept)).run(RunSpec(image="i", command=("true",), gpus=False))
    assert result.exit_code == 0
    assert result.left_behind.startswith("envbuild-smoke-") and kept.exists
    removed = _Exits()
    result = _engine(_Client(removed)).run(RunSpec(image="i", command=("true",), gpus=False))
    assert result.left_behind == "" and not removed.exists


def test_a_failed_run_says_the_container_it_could_not_remove(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(docker_engine, "REMOVE_GRACE_S", 0.05)
    kept = _Exits(refusals=10**9)
    with pytest.raises(EngineError) as err:
        _engine(_Client(kept, start_fails=True)).run(
            RunSpec(image="i", command=("true",), gpus=False)
        )
    assert "could not start the smoke container" in err.value.message
    assert f"docker rm -f {kept.name}" in err.value.hint
    assert err.value.fields["left_behind"] == kept.name
    # Removed: nothing more is said.
    gone = _Exits()
    with pytest.raises(EngineError) as err:
        _engine(_Client(gone, start_fails=True)).run(
            RunSpec(image="i", command=("true",), gpus=False)
        )
    assert "left_behind" not in err.value.fields and not gone.exists


def test_an_engine_that_stopped_answering_is_not_asked_for_the_whole_grace() -> None:
    class _Gone(_Container):
        def remove(self, force: bool) -> None:
            self.calls += 1
            raise requests.exceptions.ConnectionError("connection refused")

    container = _Gone()
    assert docker_engine._remove_container(container, grace_s=60) is False
    assert container.calls == 3
