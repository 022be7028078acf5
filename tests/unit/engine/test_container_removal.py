"""The smoke container's removal (engine/docker.py `_remove_container`): asked again while the
engine refuses, done only when the engine no longer knows the container, and a container it
keeps is reported by name (`RunResult.left_behind`, then a warning with the command)."""

from __future__ import annotations

import docker.errors
import pytest

from envbuild.engine import docker as docker_engine
from envbuild.engine.protocol import RunResult
from envbuild.smoke.container import left_behind_note


class _Container:
    """A container whose engine refuses `refusals` removals (Podman's 500 while its own cleanup
    of an exited container runs), or answers a removal without removing (`lies`)."""

    def __init__(self, refusals: int = 0, lies: int = 0) -> None:
        self.refusals, self.lies = refusals, lies
        self.exists = True
        self.calls = 0

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
    assert "envbuild-smoke-0123" in note
    assert "docker rm -f envbuild-smoke-0123" in note
    assert "podman rm -f envbuild-smoke-0123" in note
    assert left_behind_note(RunResult(0, "", "")) == ""
